#include "cli/common.hpp"

#include <cstdlib>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/comm_nccl.hpp"
#include "nmf/nmf.hpp"

namespace scurry::cli {

namespace fs = std::filesystem;

Context make_context(const GlobalOptions& g) {
  log::set_quiet(g.quiet);
  return Context::create(g.context);
}

Context make_distributed_context(const GlobalOptions& g) {
  std::shared_ptr<Comm> comm = make_mpi_comm();
  if (comm->size() == 1) return make_context(g);
  GlobalOptions one = g;
  if (g.context.device == "gpu") {
    // One GPU per rank: the rank's place among the ranks of its host (the launcher's local rank:
    // OpenMPI, MPICH/Hydra, Slurm), modulo the host's GPUs. Statistics go through MPI; the large
    // device-resident sums (the PCA Gram) through NCCL when every rank has a GPU of its own.
    const int devices = cuda_device_count();
    if (devices < 1) throw InputError("--device gpu: this host has no usable CUDA device");
    int local = comm->rank();
    for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "PMI_LOCAL_RANK"})
      if (const char* e = std::getenv(v); e && *e) {
        local = std::atoi(e);
        break;
      }
    one.context.cuda.device = local % devices;
  } else {
    one.context.device = "cpu";
  }
  one.quiet = g.quiet || comm->rank() != 0;
  Context ctx = make_context(one);
  ctx.set_comm(comm);
  if (g.context.device == "gpu" && nccl_built()) {
    // NCCL needs distinct GPUs: (host, device) of every rank, all different.
    char name[256] = {0};
    gethostname(name, sizeof name - 1);
    const uint64_t mine[2] = {std::hash<std::string>{}(std::string(name)), static_cast<uint64_t>(one.context.cuda.device)};
    std::vector<uint64_t> all(2 * static_cast<size_t>(comm->size()));
    comm->allgather(mine, sizeof mine, all.data());
    bool distinct = true;
    for (int a = 0; a < comm->size(); ++a)
      for (int b = 0; b < a; ++b) distinct &= !(all[2 * a] == all[2 * b] && all[2 * a + 1] == all[2 * b + 1]);
    if (distinct) ctx.set_device_comm(make_nccl_comm_ranks(comm, one.context.cuda.device));
    else if (comm->rank() == 0) log::info("several ranks share a GPU: the device sums go through MPI, not NCCL");
  }
  return ctx;
}

std::vector<int> selected_gpus(const GlobalOptions& g) {
  if (g.gpus.empty()) return {};
  if (g.context.device == "cpu") fail_input("--gpus", "needs --device gpu (the GPUs to spread the preprocessing over)");
  return parse_gpus(g.gpus, cuda_device_count());
}

GpuContexts make_extra_gpu_contexts(const GlobalOptions& g, const std::vector<int>& devices) {
  GpuContexts out;
  for (size_t i = 1; i < devices.size(); ++i) {
    ContextOptions o = g.context;
    o.device = "gpu";
    o.cuda.device = devices[i];
    out.extra.push_back(Context::create(o));
  }
  return out;
}

std::vector<Context*>& GpuContexts::with_main(Context& main) {
  all.assign(1, &main);
  for (Context& c : extra) all.push_back(&c);
  return all;
}

void check_output_path(const std::string& path, const std::string& ext, const char* what) {
  if (path.empty()) throw InputError(std::string(what) + ": an output path is required");
  if (path.size() < ext.size() || path.compare(path.size() - ext.size(), ext.size(), ext) != 0)
    fail_input(path, what, " must end in ", ext, " (only ", ext, " output is supported)");
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail_input(path, "is a directory; give a file name ending in ", ext);
}

void make_parent_dirs(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) fail_input(parent.string(), "cannot create the output directory (", ec.message(), ")");
}

void write_text_atomic(const std::string& path, const std::string& text) {
  make_parent_dirs(path);
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail_input(path, "cannot be written (", std::strerror(errno), ")");
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  std::error_code ec;
  if (!ok || !closed) {
    fs::remove(tmp, ec);
    fail_input(path, "write failed (disk full?)");
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    fail_input(path, "cannot be written (", ec.message(), ")");
  }
}

}  // namespace scurry::cli
