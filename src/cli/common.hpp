// scurry CLI: what every subcommand shares: the global options, the Context built from them, and
// small helpers for output paths.
#pragma once
#include <cstdint>
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

// --gpus (run, bench, harmony-integrate): the CUDA devices to spread the work over (parse_gpus: all, N, or a
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
// --gpus (selected_gpus): gm = g with the main context on the first selected GPU, and the other
// selected GPUs' contexts (make_extra_gpu_contexts), made now: the caller makes the main context from
// gm afterwards. No --gpus: gm = g, no contexts.
GpuContexts select_gpus(const GlobalOptions& g, GlobalOptions& gm);

// Checks an output path before any work is done: it must end in `ext` and must not be a
// directory; its directory must be writable (the nearest existing one when directories are still to
// be made: make_parent_dirs makes them when writing; an existing one is tested by creating and
// removing the writers' temporary, core/output.hpp, which also removes stale temporaries of dead
// processes there); every name, the temporary's included, must be within the filesystem's NAME_MAX
// and the whole within PATH_MAX. Throws InputError naming the path and the cause (strerror).
void check_output_path(const std::string& path, const std::string& ext, const char* what);
// Checks the free space (statvfs) of the filesystem `path` will be written to against `need` bytes
// (0: unknown, nothing checked). `required`: less is an InputError ("No space left on device"),
// else a warning. The CLI's estimate is input_bytes(INPUT): an output that holds the input's X (run
// without streaming, convert, the steps that keep every cell and gene) takes at least about as much
// (it is written uncompressed and keeps the counts); for outputs that may be smaller (filter-cells,
// filter-genes, --subset, a streamed run without X) it is only a warning.
void check_free_space(const std::string& path, int64_t need, bool required);
// The size of an input on disk: a file's size, the sum of a directory's files (10x mtx, zarr); 0
// when it cannot be read (the reader reports that).
int64_t input_bytes(const std::string& input);
// Creates the parent directories of `path` (if any).
void make_parent_dirs(const std::string& path);
// Writes `text` to `path` atomically (temporary in the same directory, then rename).
void write_text_atomic(const std::string& path, const std::string& text);

}  // namespace scurry::cli
