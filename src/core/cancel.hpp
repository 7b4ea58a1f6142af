// scurry: cooperative cancellation of a long step. A caller on another thread (the Python binding's
// watcher, on Ctrl-C) calls cancel_request(); the work polls cancel_requested() between blocks
// (parallel_for does before every block) and throws Cancelled, which unwinds the step without
// writing its results (the steps write their outputs only once they complete). cancel_reset()
// before the next step. One process-wide flag: a step run is the unit cancelled, whatever thread
// runs it.
#pragma once
#include <cstdint>

#include "core/error.hpp"

namespace scurry {

class Cancelled : public Error {
 public:
  Cancelled() : Error("interrupted") {}
};

void cancel_request();
void cancel_reset();
bool cancel_requested();
// Throws Cancelled when a cancellation was requested (and no CancelShield is alive).
void cancel_check();

// While one is alive, cancel_check() does not throw: the pass of an in-place step that writes into
// the caller's buffers runs to its end once started, so that a cancelled step leaves its input
// either untouched (cancelled in a read-only pass before) or completely transformed (the request
// then ends the step after it). Process-wide, like the flag.
class CancelShield {
 public:
  CancelShield();
  ~CancelShield();
  CancelShield(const CancelShield&) = delete;
  CancelShield& operator=(const CancelShield&) = delete;
};

// A meter of the work of the running step, for a progress display on another thread (the Python
// binding's bar): parallel_for adds its blocks to the total when it starts and counts each block
// done (outermost calls only: a nested parallel_for is part of its caller's block). Reset with
// cancel_reset(). The fraction done/total is exact for a step made of one parallel loop and a
// lower bound's estimate for steps of several phases.
void work_begin(int64_t blocks);
void work_done(int64_t blocks);
int64_t work_total();
int64_t work_completed();

}  // namespace scurry
