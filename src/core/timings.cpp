#include "core/timings.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <thread>

namespace scurry {

double Timings::wall_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double Timings::cpu_now() {
  timespec ts{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0.0;
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
double Timings::peak_rss_mb() {
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0.0;
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux: kilobytes
}

Timings::Scope::Scope(Timings& t, std::string name)
    : t_(&t), name_(std::move(name)), wall0_(wall_now()), cpu0_(cpu_now()) {}
Timings::Scope::Scope(Scope&& o) noexcept
    : t_(o.t_), name_(std::move(o.name_)), extra_(std::move(o.extra_)), wall0_(o.wall0_), cpu0_(o.cpu0_) {
  o.t_ = nullptr;
}
Timings::Scope::~Scope() {
  try {
    finish();
  } catch (...) {  // never throw from a destructor
  }
}
void Timings::Scope::finish() {
  if (!t_) return;
  TimingStep s;
  s.name = std::move(name_);
  s.wall_s = wall_now() - wall0_;
  s.cpu_s = cpu_now() - cpu0_;
  s.peak_rss_mb = peak_rss_mb();
  s.extra = std::move(extra_);
  t_->record(std::move(s));
  t_ = nullptr;
}

double Timings::total_wall_s() const {
  double s = 0;
  for (const auto& t : steps_) s += t.wall_s;
  return s;
}
double Timings::total_cpu_s() const {
  double s = 0;
  for (const auto& t : steps_) s += t.cpu_s;
  return s;
}

void Timings::print_table(std::FILE* out) const {
  size_t w = 5;  // "total"
  for (const auto& s : steps_) w = std::max(w, s.name.size());
  const int wi = static_cast<int>(w);
  std::fprintf(out, "%-*s  %9s  %9s  %8s  %12s  %s\n", wi, "step", "wall s", "cpu s", "cpu/wall", "peak RSS MB", "result");
  auto line = [&](const std::string& name, double wall, double cpu, double rss, const std::string& extra) {
    const double ratio = wall > 0 ? cpu / wall : 0.0;
    std::fprintf(out, "%-*s  %9.3f  %9.3f  %8.2f  %12.1f  %s\n", wi, name.c_str(), wall, cpu, ratio, rss, extra.c_str());
  };
  double peak = 0;
  for (const auto& s : steps_) {
    line(s.name, s.wall_s, s.cpu_s, s.peak_rss_mb, s.extra);
    peak = std::max(peak, s.peak_rss_mb);
  }
  std::fprintf(out, "%s\n", std::string(w + 2 + 9 + 2 + 9 + 2 + 8 + 2 + 12, '-').c_str());
  line("total", total_wall_s(), total_cpu_s(), peak, "");
}

std::string Timings::to_json(int indent) const {
  using nlohmann::json;
  json steps = json::array();
  double peak = 0;
  for (const auto& s : steps_) {
    steps.push_back({{"name", s.name},
                     {"wall_s", s.wall_s},
                     {"cpu_s", s.cpu_s},
                     {"peak_rss_mb", s.peak_rss_mb},
                     {"extra", s.extra}});
    peak = std::max(peak, s.peak_rss_mb);
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  json j;
  j["scurry_version"] = SCURRY_VERSION;
  j["argv"] = argv_;
  j["machine"] = {{"hostname", std::string(host)},
                  {"cores", static_cast<int>(std::thread::hardware_concurrency())}};
  j["meta"] = meta_;
  j["steps"] = std::move(steps);
  j["total"] = {{"wall_s", total_wall_s()}, {"cpu_s", total_cpu_s()}, {"peak_rss_mb", peak}};
  return j.dump(indent);
}

}  // namespace scurry
