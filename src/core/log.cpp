#include "core/log.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace scurry::log {

static std::atomic<bool> g_quiet{false};

void set_quiet(bool q) { g_quiet = q; }
bool quiet() { return g_quiet; }
void info(const std::string& msg) {
  if (!g_quiet) std::fprintf(stderr, "scurry: %s\n", msg.c_str());
}
static std::mutex g_warn_mu;
static std::vector<std::string> g_warnings;

void warn(const std::string& msg) {
  std::fprintf(stderr, "scurry: warning: %s\n", msg.c_str());
  std::lock_guard<std::mutex> lock(g_warn_mu);
  if (g_warnings.size() < 1000) g_warnings.push_back(msg);
}

std::vector<std::string> warnings_so_far() {
  std::lock_guard<std::mutex> lock(g_warn_mu);
  return g_warnings;
}

}  // namespace scurry::log
