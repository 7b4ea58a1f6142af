// scurry: wall-clock phase times switched on by an environment variable (SCURRY_HARMONY_TIMES=1,
// SCURRY_CMD_TIMES=1, ...): lap(what) prints "[tag] what <seconds>" on stderr, the time since the
// previous lap (or since construction); without the variable set to 1, nothing.
#pragma once
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace scurry {

class EnvLaps {
 public:
  EnvLaps(const char* env, std::string tag) : tag_(std::move(tag)) {
    const char* e = std::getenv(env);
    on_ = e && std::strcmp(e, "1") == 0;
  }
  bool on() const { return on_; }
  void lap(const char* what) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    std::fprintf(stderr, "[%s] %s %.4f s\n", tag_.c_str(), what, std::chrono::duration<double>(now - last_).count());
    last_ = now;
  }

 private:
  std::string tag_;
  bool on_ = false;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

}  // namespace scurry
