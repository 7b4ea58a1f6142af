#include "cli/common.hpp"

#include <cstdlib>

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/output.hpp"
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
  if (g.context.device == "cpu") fail_input("--gpus", "needs --device gpu (the GPUs to spread the work over)");
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

GpuContexts select_gpus(const GlobalOptions& g, GlobalOptions& gm) {
  const std::vector<int> devices = selected_gpus(g);
  gm = g;
  if (!devices.empty()) gm.context.cuda.device = devices[0];
  return make_extra_gpu_contexts(gm, devices);
}

std::vector<Context*>& GpuContexts::with_main(Context& main) {
  all.assign(1, &main);
  for (Context& c : extra) all.push_back(&c);
  return all;
}

namespace {

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// The nearest existing directory at or above path's parent ("." for a bare name), and the names of
// the missing directories below it (make_parent_dirs makes them). InputError when a component is not
// a directory or cannot be looked up.
fs::path existing_parent(const std::string& path, std::vector<std::string>* missing) {
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  for (;;) {
    struct stat st;
    if (stat(dir.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        fail_input(path, "cannot be written: ", dir.string(), " is not a directory (", errno_text(ENOTDIR), ")");
      return dir;
    }
    if (errno != ENOENT) fail_input(path, "cannot be written: ", dir.string(), " (", errno_text(errno), ")");
    if (missing) missing->push_back(dir.filename().string());
    dir = dir.parent_path();
    if (dir.empty()) dir = ".";
  }
}

}  // namespace

void check_output_path(const std::string& path, const std::string& ext, const char* what) {
  if (path.empty()) throw InputError(std::string(what) + ": an output path is required");
  if (path.size() < ext.size() || path.compare(path.size() - ext.size(), ext.size(), ext) != 0)
    fail_input(path, what, " must end in ", ext, " (only ", ext, " output is supported)");
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail_input(path, "is a directory; give a file name ending in ", ext);

  std::vector<std::string> missing;
  const fs::path dir = existing_parent(path, &missing);
  long name_max = pathconf(dir.c_str(), _PC_NAME_MAX);
  long path_max = pathconf(dir.c_str(), _PC_PATH_MAX);
  if (name_max <= 0) name_max = NAME_MAX;
  if (path_max <= 0) path_max = PATH_MAX;
  const std::string tmp = temp_name(path);
  const std::string name = fs::path(path).filename().string();
  for (const std::string& m : missing)
    if (static_cast<long>(m.size()) > name_max)
      fail_input(path, "the directory name '", m, "' is ", m.size(), " bytes long, over the filesystem's limit of ",
                 name_max, " (", errno_text(ENAMETOOLONG), ")");
  if (static_cast<long>(name.size() + tmp.size() - path.size()) > name_max)
    fail_input(path, "the file name is ", name.size(), " bytes long; with the suffix of the temporary it is written to (",
               tmp.size() - path.size(), " bytes: ", fs::path(tmp).filename().string().substr(name.size()),
               ") it exceeds the filesystem's limit of ", name_max, " bytes (", errno_text(ENAMETOOLONG),
               "): choose a shorter name");
  if (static_cast<long>(fs::absolute(tmp, ec).string().size()) >= path_max)
    fail_input(path, "the path, with the suffix of its temporary, is over the limit of ", path_max, " bytes (",
               errno_text(ENAMETOOLONG), "): choose a shorter path");
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    fail_input(path, "cannot be written: the directory ", dir.string(), " is not writable (", errno_text(errno), ")");
  if (!missing.empty()) return;
  // The directory exists: create (and remove) the very temporary the writer will use.
  TempOutput t(path);
  const int fd = open(t.name().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail_input(path, "cannot be written: cannot create a file in ", dir.string(), " (", errno_text(errno), ")");
  close(fd);
}

void check_free_space(const std::string& path, int64_t need, bool required) {
  if (need <= 0) return;
  const fs::path dir = existing_parent(path, nullptr);
  struct statvfs v;
  if (statvfs(dir.c_str(), &v) != 0) return;
  const uint64_t avail = static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
  if (avail >= static_cast<uint64_t>(need)) return;
  const std::string msg = detail::concat("only ", mib(avail), " free on ", dir.string(), ", and the output needs at least about ",
                                         mib(static_cast<uint64_t>(need)), " (the input's size)");
  if (required) fail_input(path, msg, " (", errno_text(ENOSPC), "): free some space or choose another directory");
  log::warn(path + ": " + msg + "; the write may fail");
}

int64_t input_bytes(const std::string& input) {
  std::error_code ec;
  if (!fs::is_directory(input, ec)) {
    const auto n = fs::file_size(input, ec);
    return ec ? 0 : static_cast<int64_t>(n);
  }
  int64_t total = 0;
  for (fs::recursive_directory_iterator it(input, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) total += static_cast<int64_t>(it->file_size(ec));
  return total;
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
  write_file_atomic(path, text);
}

}  // namespace scurry::cli
