// scurry: cooperative cancellation of a long step. A caller on another thread (the Python binding's
// watcher, on Ctrl-C) calls cancel_request(); the work polls cancel_requested() between blocks
// (parallel_for does before every block) and throws Cancelled, which unwinds the step without
// writing its results (the steps write their outputs only once they complete). cancel_reset()
// before the next step. One process-wide flag: a step run is the unit cancelled, whatever thread
// runs it.
#pragma once
#include "core/error.hpp"

namespace scurry {

class Cancelled : public Error {
 public:
  Cancelled() : Error("interrupted") {}
};

void cancel_request();
void cancel_reset();
bool cancel_requested();
// Throws Cancelled when a cancellation was requested.
void cancel_check();

}  // namespace scurry
