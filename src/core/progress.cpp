#include "core/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/log.hpp"

namespace scurry {

namespace {
constexpr int64_t kRedrawNs = 100'000'000;  // at most ~10 redraws a second
constexpr int kBarWidth = 30;

std::string clock_string(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(t / 3600),
                  static_cast<long long>(t / 60 % 60), static_cast<long long>(t % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  return buf;
}
}  // namespace

std::string human_count(double x) {
  const char* units[] = {"", "k", "M", "G", "T"};
  int u = 0;
  while (std::fabs(x) >= 1000 && u < 4) {
    x /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f%s" : "%.1f%s", x, units[u]);
  return buf;
}

Progress::Progress(std::string label, int64_t total)
    : label_(std::move(label)),
      total_(std::max<int64_t>(total, 0)),
      active_(!log::quiet() && isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() {
  if (active_ && drawn_.load()) {
    draw(done(), true);
    std::fputc('\n', stderr);
    std::fflush(stderr);
  }
}

void Progress::advance(int64_t n) {
  const int64_t d = done_.fetch_add(n, std::memory_order_relaxed) + n;
  if (!active_) return;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
  int64_t last = last_draw_ns_.load(std::memory_order_relaxed);
  if (now - last < kRedrawNs) return;
  // one thread wins the right to draw this frame
  if (!last_draw_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  draw(d, false);
}

void Progress::draw(int64_t done, bool final) {
  drawn_.store(true);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t total = total_.load(std::memory_order_relaxed);
  const double frac = total > 0 ? std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0) : 1.0;
  const int fill = static_cast<int>(frac * kBarWidth);
  std::string bar(static_cast<size_t>(fill), '=');
  if (fill < kBarWidth) bar += '>';
  bar.resize(kBarWidth, ' ');
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total - done) / rate : -1.0;
  std::fprintf(stderr, "\r%s [%s] %3d%%  %s/s  %s %s\x1b[K", label_.c_str(), bar.c_str(),
               static_cast<int>(frac * 100.0), human_count(rate).c_str(), final ? "took" : "ETA",
               clock_string(final ? elapsed : eta).c_str());
  std::fflush(stderr);
}

}  // namespace scurry
