// scurry: writing an output safely. Every writer (h5ad, zarr, the text files of the CLI and cNMF)
// writes to a temporary next to the output, "PATH.tmp-HHHHHHHH-PID" (HHHHHHHH: a hash of the host
// name; PID: the writing process), and renames it over PATH when it is complete, so a failed or
// interrupted write never leaves a partial PATH and never touches an existing one:
//  - while it exists the temporary is registered (TempOutput); the handler of SIGINT, SIGTERM and
//    SIGHUP (install_signal_cleanup, called by the CLI's main) removes the registered temporaries,
//    prints one line and ends the process with 128 + the signal (130, 143, 129);
//  - temporaries of processes that died otherwise (SIGKILL, a crash, a power cut) are removed by the
//    next write to the same directory (the first of each process there; remove_stale_temps): the
//    exact name pattern, same host (the hash), same user (the file's owner), the process no longer
//    running (kill(pid, 0) fails with ESRCH);
//  - a write failing for lack of space (ENOSPC, EDQUOT) throws Error "PATH: disk full ..." (fail_write:
//    the one place where the errno of a failed write becomes an error).
#pragma once
#include <string>

namespace scurry {

// The temporary name of `path` for this process: path + ".tmp-HHHHHHHH-PID".
std::string temp_name(const std::string& path);

// A temporary output being written. The constructor removes stale temporaries of dead processes in
// path's directory (the first time this process writes there) and registers the temporary (for the signal handler) before the caller creates
// it; the destructor removes the temporary (recursively for a directory, a zarr store) unless it was
// committed or released, then forgets it.
class TempOutput {
 public:
  explicit TempOutput(std::string path, bool directory = false);
  ~TempOutput();
  TempOutput(const TempOutput&) = delete;
  TempOutput& operator=(const TempOutput&) = delete;
  const std::string& name() const { return temp_; }  // the temporary
  const std::string& path() const { return path_; }  // the output
  // Renames the temporary over the output (throws via fail_write naming the output).
  void commit();
  // The caller moved the temporary into place itself: forget it without removing anything.
  void release();

 private:
  std::string path_, temp_;
  bool directory_ = false;
  bool done_ = false;
  int slot_ = -1;  // in the signal handler's registry (-1: not registered, the registry was full)
};

// Removes the temporaries of dead scurry processes in the directory of `path` (see above); reports
// each removal with log::info. Never throws.
void remove_stale_temps(const std::string& path);

// Throws the error of a failed write of `path` (the output's name) with errno `err`:
// ENOSPC or EDQUOT: Error "PATH: disk full: WHAT (No space left on device); ..." (exit code 1);
// any other: InputError "PATH: WHAT (strerror)" when `at_open` (the location is unusable: a missing
// or read-only directory, a name too long; exit code 2), else Error.
[[noreturn]] void fail_write(const std::string& path, int err, const std::string& what, bool at_open = false);

// Inside a catch block of a writer: rethrows the exception being handled (same type) with every
// mention of the temporary `temp` replaced by the output's name `path`.
[[noreturn]] void rethrow_naming_output(const std::string& temp, const std::string& path);

// Writes `bytes` to `path` atomically (a TempOutput, then rename); path's directory must exist.
void write_file_atomic(const std::string& path, const std::string& bytes);

// Installs the handler of SIGINT, SIGTERM and SIGHUP (a signal ignored at start, as under nohup,
// stays ignored). It is async-signal-safe: it removes the registered temporaries with unlink(2)
// (directories with getdents64/unlinkat), writes "scurry: interrupted (SIGTERM); removed T" with
// write(2) and calls _exit(128 + signal).
void install_signal_cleanup();
// Whether that handler is running (a signal arrived); an error path that sees it should wait for
// the handler to end the process (wait_if_interrupted) rather than report the error it caused.
bool interrupted();
// For a fatal-signal handler (io/hdf5_guard.cpp): removes every registered temporary, writing
// "; removed T, ..." to stderr (async-signal-safe: unlink, getdents64, write; no allocation).
void remove_temps_from_signal();
void wait_if_interrupted();

}  // namespace scurry
