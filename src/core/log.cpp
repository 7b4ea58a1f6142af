#include "core/log.hpp"

#include <atomic>
#include <cstdio>

namespace scurry::log {

static std::atomic<bool> g_quiet{false};

void set_quiet(bool q) { g_quiet = q; }
bool quiet() { return g_quiet; }
void info(const std::string& msg) {
  if (!g_quiet) std::fprintf(stderr, "scurry: %s\n", msg.c_str());
}
void warn(const std::string& msg) { std::fprintf(stderr, "scurry: warning: %s\n", msg.c_str()); }

}  // namespace scurry::log
