// scurry: a one-line progress bar on stderr (label, bar, percent, rate, ETA), redrawn at most about
// ten times a second, drawn only when stderr is a terminal and log::quiet() is false. advance() may
// be called from several threads at once.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace scurry {

class Progress {
 public:
  Progress(std::string label, int64_t total);
  ~Progress();  // draws the final state and ends the line (if anything was drawn)
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(int64_t n = 1);
  // Changes the total (a display whose work grows as it goes: the Python binding's step bar).
  void set_total(int64_t total) { total_.store(total < 0 ? 0 : total, std::memory_order_relaxed); }
  int64_t done() const { return done_.load(std::memory_order_relaxed); }
  bool active() const { return active_; }

 private:
  void draw(int64_t done, bool final);

  std::string label_;
  std::atomic<int64_t> total_;
  bool active_;
  std::atomic<int64_t> done_{0};
  std::atomic<int64_t> last_draw_ns_{0};
  std::atomic<bool> drawn_{false};
  std::chrono::steady_clock::time_point start_;
};

// "1.2k", "3.4M": counts and rates in short form.
std::string human_count(double x);

}  // namespace scurry
