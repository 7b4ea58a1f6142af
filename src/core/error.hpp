// scurry: errors. Every failure the user can cause is a scurry::Error whose message is one line:
// what was wrong, where (file, slot), and what to do. C status codes (HDF5, CUDA, ...) are converted
// into Error in exactly one place each (io/hdf5.cpp, exec/cuda_check.hpp).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace scurry {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// Bad input data or arguments (exit code 2 in the CLI); Error otherwise (exit code 1).
class InputError : public Error {
 public:
  explicit InputError(const std::string& msg) : Error(msg) {}
};

namespace detail {
template <class... A>
std::string concat(A&&... a) {
  std::ostringstream os;
  (os << ... << std::forward<A>(a));
  return os.str();
}
}  // namespace detail

// fail("x ", 3, " y"): throw Error with the concatenation.
template <class... A>
[[noreturn]] void fail(A&&... a) {
  throw Error(detail::concat(std::forward<A>(a)...));
}
// fail_input(file, "what was wrong"): throw InputError "FILE: what was wrong".
template <class... A>
[[noreturn]] void fail_input(const std::string& file, A&&... a) {
  throw InputError(detail::concat(file, ": ", std::forward<A>(a)...));
}

}  // namespace scurry
