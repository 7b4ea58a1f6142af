// scurry CLI: what every subcommand shares: the global options, the Context built from them, and
// small helpers for output paths.
#pragma once
#include <string>
#include <vector>

#include "exec/context.hpp"

namespace scurry::cli {

struct GlobalOptions {
  ContextOptions context;  // --device, --threads (defaults live in ContextOptions)
  bool quiet = false;      // --quiet: no info messages, no progress bars
  std::vector<std::string> argv;
};

// Applies --quiet and builds the Context (throws InputError for an unusable --device).
Context make_context(const GlobalOptions& g);
// As make_context, with the communicator of all ranks when launched by an MPI launcher (`mpirun -np R
// scurry run ...`; see make_mpi_comm): several ranks run on the CPU (--device auto picks the CPU;
// --device gpu is an InputError: multi-rank GPU runs are not supported yet) and only rank 0 prints
// info messages. One rank: make_context(g).
Context make_distributed_context(const GlobalOptions& g);

// Checks an output path before any work is done: it must end in `ext` and must not be a
// directory. Throws InputError naming the path.
void check_output_path(const std::string& path, const std::string& ext, const char* what);
// Creates the parent directories of `path` (if any).
void make_parent_dirs(const std::string& path);
// Writes `text` to `path` atomically (temporary in the same directory, then rename).
void write_text_atomic(const std::string& path, const std::string& text);

}  // namespace scurry::cli
