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
  std::string gpus;        // --gpus of run and bench: all | N | 0,1,... ("" = one GPU, the Context's)
  std::vector<std::string> argv;
};

// Applies --quiet and builds the Context (throws InputError for an unusable --device).
Context make_context(const GlobalOptions& g);
// As make_context, with the communicator of all ranks when launched by an MPI launcher (`mpirun -np R
// scurry run ...`; see make_mpi_comm): several ranks run on the CPU (--device auto picks the CPU;
// --device gpu is an InputError: multi-rank GPU runs are not supported yet) and only rank 0 prints
// info messages. One rank: make_context(g).
Context make_distributed_context(const GlobalOptions& g);

// --gpus (run, bench): the CUDA devices to spread the preprocessing over (parse_gpus: all, N, or a
// list); empty when --gpus was not given. InputError for a bad list or --gpus with --device cpu.
std::vector<int> selected_gpus(const GlobalOptions& g);
// The CUDA contexts of a multi-GPU run: one per device of `devices` (their first is `main`'s device;
// the others the same options on their own device). Make them BEFORE `main`:
// making a context selects its device on the calling thread, and the main thread must end on main's.
struct GpuContexts {
  std::vector<Context> extra;  // devices[1...]
  std::vector<Context*> all;   // main first; filled by with_main()
  std::vector<Context*>& with_main(Context& main);
};
GpuContexts make_extra_gpu_contexts(const GlobalOptions& g, const std::vector<int>& devices);

// Checks an output path before any work is done: it must end in `ext` and must not be a
// directory. Throws InputError naming the path.
void check_output_path(const std::string& path, const std::string& ext, const char* what);
// Creates the parent directories of `path` (if any).
void make_parent_dirs(const std::string& path);
// Writes `text` to `path` atomically (temporary in the same directory, then rename).
void write_text_atomic(const std::string& path, const std::string& text);

}  // namespace scurry::cli
