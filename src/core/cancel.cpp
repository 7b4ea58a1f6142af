#include "core/cancel.hpp"

#include <atomic>

namespace scurry {

namespace {
std::atomic<bool> g_cancel{false};
std::atomic<int64_t> g_total{0}, g_done{0};
std::atomic<int> g_shields{0};
}

void cancel_request() { g_cancel.store(true, std::memory_order_relaxed); }
void cancel_reset() {
  g_cancel.store(false, std::memory_order_relaxed);
  g_total.store(0, std::memory_order_relaxed);
  g_done.store(0, std::memory_order_relaxed);
}
void work_begin(int64_t blocks) { g_total.fetch_add(blocks, std::memory_order_relaxed); }
void work_done(int64_t blocks) { g_done.fetch_add(blocks, std::memory_order_relaxed); }
int64_t work_total() { return g_total.load(std::memory_order_relaxed); }
int64_t work_completed() { return g_done.load(std::memory_order_relaxed); }
bool cancel_requested() { return g_cancel.load(std::memory_order_relaxed); }
void cancel_check() {
  if (cancel_requested() && g_shields.load(std::memory_order_relaxed) == 0) throw Cancelled();
}
CancelShield::CancelShield() { g_shields.fetch_add(1, std::memory_order_relaxed); }
CancelShield::~CancelShield() { g_shields.fetch_sub(1, std::memory_order_relaxed); }

}  // namespace scurry
