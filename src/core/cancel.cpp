#include "core/cancel.hpp"

#include <atomic>

namespace scurry {

namespace {
std::atomic<bool> g_cancel{false};
}

void cancel_request() { g_cancel.store(true, std::memory_order_relaxed); }
void cancel_reset() { g_cancel.store(false, std::memory_order_relaxed); }
bool cancel_requested() { return g_cancel.load(std::memory_order_relaxed); }
void cancel_check() {
  if (cancel_requested()) throw Cancelled();
}

}  // namespace scurry
