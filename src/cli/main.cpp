// scurry: the command line. Parses, dispatches to the subcommands (cmd_*.cpp) and turns errors into
// one line on stderr and an exit code: 2 for bad input or arguments, 1 for anything else.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <exception>
#include <functional>
#include <new>
#include <string>

#include "cli/commands.hpp"
#include "cli/step_options.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/output.hpp"
#include "core/trace_point.hpp"
#include "exec/blas_core.hpp"
#include "exec/context.hpp"
#include "exec/device_release.hpp"
#include "io/hdf5_guard.hpp"

namespace {

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

int report(const char* what, int code) {
  scurry::wait_if_interrupted();  // an error caused by the signal handler removing the temporaries
  std::fflush(stdout);
  std::fprintf(stderr, "scurry: error: %s\n", one_line(what).c_str());
  return code;
}

std::string version_string() {
  std::string v = "scurry " SCURRY_VERSION;
  if (scurry::cuda_built()) {
    const int n = scurry::cuda_device_count();
    v += " (CUDA backend built in; " + std::to_string(n) + " CUDA device" + (n == 1 ? "" : "s") + " visible)";
  } else {
    v += " (CPU only: built without CUDA)";
  }
  return v + "\nBLAS: " + scurry::blas_core_status();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace scurry;
  trace_point("main starts");
  // A GPU command starts the CUDA driver beside the parsing and the checks of its arguments.
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--device" && i + 1 < argc && (std::string(argv[i + 1]) == "gpu" || std::string(argv[i + 1]) == "auto")) ||
        a == "--device=gpu" || a == "--device=auto") {
      start_cuda_driver_early();
      break;
    }
  }
  // OpenBLAS on a CPU model it does not know runs its SSE3 kernels: switched to the CPU's own ones.
  use_fast_blas_core();
  // Large vectors come and go step after step: freed memory kept in the heap for reuse rather than
  // returned to the kernel (each fresh page costs a fault, dear on virtual machines).
  keep_freed_memory();
  // SIGINT, SIGTERM, SIGHUP: remove the temporary of an output being written, say so, exit 128 + signal.
  install_signal_cleanup();
  // A crash inside libhdf5 on a corrupt input: one line naming the file, exit 2, temporaries removed.
  h5::install_hdf5_crash_guard();
  CLI::App app{"scurry: single-cell RNA-seq analysis (scanpy's pipeline, faster)", "scurry"};
  cli::GlobalOptions g;
  g.argv.assign(argv, argv + argc);
  try {
    // (the string made only when asked for: it starts the CUDA driver, ~0.2 s)
    app.set_version_flag("--version", std::function<std::string()>(version_string),
                         "Print the version and whether CUDA is built in");
    const CLI::Validator non_negative_int(
        [](std::string& s) -> std::string {
          int v = -1;
          const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
          if (ec != std::errc() || p != s.data() + s.size() || v < 0)
            return "'" + s + "' is not a non-negative integer";
          return {};
        },
        "NONNEGATIVE");
    app.add_option("--threads", g.context.threads, "CPU threads (0 = all hardware threads)")
        ->check(non_negative_int)
        ->capture_default_str();
    app.add_option("--device", g.context.device, "Where to compute: cpu, gpu or auto (the GPU when one is usable)")
        ->check(CLI::IsMember({"cpu", "gpu", "auto"}))
        ->capture_default_str();
    app.add_option_function<std::string>(
           "--memory", [&g](const std::string& m) { g.context.cuda.memory = scurry::parse_memory_mode(m); },
           "GPU memory: pool (stream-ordered pool), managed (unified memory: arrays over the device budget, --max-pool-size or what is free, are placed in host RAM and read in place over PCIe), managed-pool or plain")
        ->default_str("pool");
    app.add_option_function<std::string>(
           "--pool-size", [&g](const std::string& v) { g.context.cuda.pool_size = cli::parse_size(v, "--pool-size"); },
           "GPU pool: bytes reserved up front (e.g. 40G)");
    app.add_option_function<std::string>(
           "--max-pool-size",
           [&g](const std::string& v) { g.context.cuda.max_pool_size = cli::parse_size(v, "--max-pool-size"); },
           "GPU: most bytes scurry may hold at once (e.g. 80G; default: no cap)");
    app.add_flag("-q,--quiet", g.quiet, "No progress bars or info messages (errors are still printed)");
    app.fallthrough();  // global options are also accepted after the subcommand
    app.require_subcommand(1);

    cli::add_info_command(app, g);
    cli::add_convert_command(app, g);
    cli::add_run_command(app, g);
    cli::add_step_commands(app, g);
    cli::add_simulate_command(app, g);
    cli::add_bench_command(app, g);
    cli::add_cnmf_command(app, g);
    cli::add_report_command(app, g);
    cli::add_integrate_commands(app, g);
    cli::add_tl_commands(app, g);
  } catch (const std::exception& e) {
    return report(e.what(), 1);
  }

  try {
    app.parse(argc, argv);  // the chosen subcommand's callback runs inside
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return report((std::string(e.what()) + " (see scurry --help)").c_str(), 2);
  } catch (const InputError& e) {
    return report(e.what(), 2);
  } catch (const Error& e) {
    return report(e.what(), 1);
  } catch (const std::bad_alloc&) {
    return report("out of memory", 1);
  } catch (const std::exception& e) {
    return report(e.what(), 1);
  } catch (...) {
    return report("unknown internal error", 1);
  }
  trace_point("main returns");
  // Every output is written and closed by now. Leave without the CUDA runtime's exit-time teardown
  // (it synchronises and frees a context that may hold tens of GiB: ~0.3 s measured on the H200 after
  // a 1.3M-cell run); the driver releases the device at process exit. Under MPI, MPI_Finalize must
  // run at exit, so the normal path is kept there.
  wait_if_interrupted();  // a signal during the last moments: its handler sets the exit status
  if (!launched_by_mpi()) {
    std::fflush(nullptr);
    std::_Exit(0);
  }
  return 0;
}
