// scurry harmony-integrate | combat | regress-out | scrublet IN -o OUT.h5ad: the batch-correction and
// doublet steps alone (read, the step on --device's backend, write), issue 21. Harmony, ComBat and
// regress_out run on the GPU under --device gpu; Scrublet its exact kNN (the rest on the CPU).
#include <memory>
#include <sstream>
#include <type_traits>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/integrate_options.hpp"
#include "cli/run.hpp"
#include "core/env_laps.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/h5ad.hpp"
#include "io/read.hpp"
#include "pp/combat.hpp"
#include "pp/regress_out.hpp"

namespace scurry::cli {

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// One subcommand: IN, -o OUT, the step's options, then read -> step (on the --device context) -> write.
// With `gpus` (its help), also --gpus: a step taking (ctx, gpus, d, opt, in) gets every selected
// GPU's context, the main one first (just the main context without --gpus).
template <class Opt, class Bind, class Run>
void add_cmd(CLI::App& app, GlobalOptions& g, const char* name, const char* help, Bind bind, Run run,
             const char* gpus = nullptr) {
  struct Cmd {
    std::string input, output;
    ReadOptions read;
    Opt opt;
  };
  auto o = std::make_shared<Cmd>();
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->add_option("IN", o->input, "Input: an h5ad file, a 10x .h5 file or a 10x mtx directory")->required();
  cmd->add_option("-o,--output", o->output, "Output .h5ad file (written atomically)")->required();
  bind(*cmd, o->opt);
  if (gpus) cmd->add_option("--gpus", g.gpus, gpus);
  cmd->callback([&g, o, run] {
    log::set_quiet(g.quiet);
    check_output_path(o->output, ".h5ad", "-o/--output");
    check_free_space(o->output, input_bytes(o->input), true);
    EnvLaps laps("SCURRY_CMD_TIMES", o->output);  // the context, the read, the step and the write
    auto lap = [&](const char* what) { laps.lap(what); };
    // --gpus: the first listed GPU is the main context's; the others' contexts are made first (making
    // one selects its device on this thread; the main context's must be selected last).
    GlobalOptions gm;
    GpuContexts extra = select_gpus(g, gm);
    Context ctx = make_context(gm);
    const std::vector<Context*>& all = extra.with_main(ctx);
    lap("context");
    Dataset d = read_any(o->input, o->read);
    lap("read");
    if constexpr (std::is_invocable_v<Run, const Context&, const std::vector<Context*>&, Dataset&, const Opt&,
                                      const std::string&>)
      run(ctx, all, d, o->opt, o->input);
    else
      run(ctx, d, o->opt, o->input);
    lap("step");
    make_parent_dirs(o->output);
    write_h5ad(d, o->output);
    lap("write");
    log::info("wrote " + o->output);
  });
}

// InputErrors of a step name the input file first.
template <class F>
void in_file(const std::string& file, F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    throw InputError(file + ": " + e.what());
  }
}

}  // namespace

void add_harmony_options(CLI::App& cmd, HarmonyOptions& o, const std::string& p) {
  if (p.empty())
    cmd.add_option("--key", o.keys, "obs column(s) of batches (repeat for several batch variables)")
        ->required()
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd.add_option("--" + p + "basis", o.basis, "obsm embedding to integrate")->capture_default_str();
  cmd.add_option("--" + p + "adjusted-basis", o.adjusted_basis, "obsm key of the result")->capture_default_str();
  cmd.add_option("--" + p + "theta", o.theta, "diversity penalty: one value, or one per key, repeated (harmonypy 0.0.9's default: 1)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->capture_default_str();
  cmd.add_option("--" + p + "lamb", o.lamb, "ridge penalty: one value, or one per key, repeated")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->capture_default_str();
  cmd.add_option("--" + p + "sigma", o.sigma, "soft k-means width")->capture_default_str();
  cmd.add_option("--" + p + "nclust", o.nclust, "clusters (0: min(round(n / 30), 100))")->capture_default_str();
  cmd.add_option("--" + p + "tau", o.tau, "protection of small batches (0: none)")->capture_default_str();
  cmd.add_option("--" + p + "block-size", o.block_size, "share of cells per R update block")->capture_default_str();
  cmd.add_option("--" + p + "max-iter-harmony", o.max_iter_harmony, "Harmony iterations at most")->capture_default_str();
  cmd.add_option("--" + p + "max-iter-kmeans", o.max_iter_kmeans, "k-means iterations per Harmony iteration at most")
      ->capture_default_str();
  cmd.add_option("--" + p + "epsilon-cluster", o.epsilon_cluster, "k-means convergence")->capture_default_str();
  cmd.add_option("--" + p + "epsilon-harmony", o.epsilon_harmony, "Harmony convergence")->capture_default_str();
  cmd.add_option("--" + p + "random-state", o.random_state, "seed of the k-means start and the R update order")
      ->capture_default_str();
}

void add_scrublet_options(CLI::App& cmd, ScrubletOptions& o, const std::string& p) {
  if (p.empty()) cmd.add_option("--batch-key", o.batch_key, "obs column of batches (Scrublet runs per batch)");
  cmd.add_option("--" + p + "sim-doublet-ratio", o.sim_doublet_ratio, "simulated doublets per observed cell")
      ->capture_default_str();
  cmd.add_option("--" + p + "expected-doublet-rate", o.expected_doublet_rate, "expected doublet rate")->capture_default_str();
  cmd.add_option("--" + p + "stdev-doublet-rate", o.stdev_doublet_rate, "its uncertainty")->capture_default_str();
  cmd.add_option("--" + p + "synthetic-doublet-umi-subsampling", o.synthetic_doublet_umi_subsampling,
                 "UMI sampling rate of the simulated doublets (1: their counts summed)")
      ->capture_default_str();
  cmd.add_option("--" + p + "knn-dist-metric", o.knn_dist_metric, "euclidean | cosine")
      ->check(CLI::IsMember({"euclidean", "cosine"}))
      ->capture_default_str();
  cmd.add_option("--" + p + "normalize-variance", o.normalize_variance, "scale genes to unit variance")->capture_default_str();
  cmd.add_option("--" + p + "log-transform", o.log_transform, "log1p before the PCA")->capture_default_str();
  cmd.add_option("--" + p + "mean-center", o.mean_center, "centre genes (PCA; false: truncated SVD)")->capture_default_str();
  cmd.add_option("--" + p + "n-prin-comps", o.n_prin_comps, "principal components of the embedding")->capture_default_str();
  cmd.add_option_function<bool>(
      "--" + p + "use-approx-neighbors", [&o](const bool& v) { o.use_approx_neighbors = v; },
      "approximate kNN (hnsw) instead of the exact search");
  cmd.add_option_function<int>(
      "--" + p + "n-neighbors", [&o](const int& v) { o.n_neighbors = v; },
      "neighbours k (default: round(0.5 sqrt(n_cells)) per batch)");
  cmd.add_option_function<double>(
      "--" + p + "threshold", [&o](const double& v) { o.threshold = v; },
      "doublet score threshold (default: automatic, skimage's threshold_minimum)");
  cmd.add_option("--" + p + "random-state", o.random_state, "seed (numpy RandomState, as scanpy)")->capture_default_str();
}

void add_run_integrate_options(CLI::App& cmd, RunOptions& o) {
  cmd.add_option("--integrate", o.integrate,
                 "Batch integration after PCA: harmony (obsm X_pca_harmony; the kNN then uses it); batches from "
                 "--harmony-key, else --batch-key")
      ->check(CLI::IsMember({"harmony"}));
  cmd.add_option("--harmony-key", o.harmony.keys, "With --integrate harmony: obs column(s) of batches (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  add_harmony_options(cmd, o.harmony, "harmony-");
  cmd.add_flag("--scrublet", o.scrublet,
               "Scrublet doublet scores on the counts before the preprocessing (obs doublet_score, predicted_doublet), "
               "per --batch-key batch");
  add_scrublet_options(cmd, o.scrublet_opt, "scrublet-");
}

void run_scrublet(const Context& ctx, Dataset& d, const RunOptions& o) {
  ScrubletOptions s = o.scrublet_opt;
  s.batch_key = o.preprocess.hvg.batch_key;
  in_file(o.input, [&] { scrublet(ctx, d, s); });  // --device gpu: on the device (scrublet_gpu.hpp)
}

void run_harmony(const Context& ctx, Dataset& d, const RunOptions& o) {
  HarmonyOptions h = o.harmony;
  if (h.keys.empty() && !o.preprocess.hvg.batch_key.empty()) h.keys = {o.preprocess.hvg.batch_key};
  if (h.keys.empty()) fail_input(o.input, "--integrate harmony needs the batches: give --batch-key or --harmony-key");
  if (ctx.comm().size() > 1) fail_input(o.input, "--integrate harmony runs on one rank");
  HarmonyResult r;
  in_file(o.input, [&] {  // on the GPU under --device gpu; --gpus: over those GPUs
    r = o.gpus.size() > 1 ? harmony_integrate(o.gpus, d, h) : harmony_integrate(ctx, d, h);
  });
  log::info(detail::concat("harmony: ", r.iterations, " iteration(s), ", r.converged ? "converged" : "stopped before convergence"));
}

NeighborsOptions integrated(const RunOptions& o) {
  NeighborsOptions n = o.neighbors;
  if (o.integrate == "harmony" && n.use_rep.empty()) n.use_rep = o.harmony.adjusted_basis;
  return n;
}

void add_integrate_commands(CLI::App& app, GlobalOptions& g) {
  add_cmd<HarmonyOptions>(
      app, g, "harmony-integrate", "harmony_integrate: Harmony batch integration of X_pca (obsm X_pca_harmony)",
      [](CLI::App& c, HarmonyOptions& o) { add_harmony_options(c, o, ""); },
      [](const Context& ctx, const std::vector<Context*>& gpus, Dataset& d, const HarmonyOptions& o,
         const std::string& in) {
        HarmonyResult r;
        in_file(in, [&] { r = gpus.size() > 1 ? harmony_integrate(gpus, d, o) : harmony_integrate(ctx, d, o); });
        log::info(detail::concat("harmony: ", r.iterations, " iteration(s), ",
                                 r.converged ? "converged" : "stopped before convergence"));
      },
      "With --device gpu: split the cells over these GPUs of this host: all, a count N, or ordinals 0,2 (default: one "
      "GPU)");
  struct CombatCli {
    CombatOptions opt;
    std::string covariates;
  };
  add_cmd<CombatCli>(
      app, g, "combat", "combat: ComBat batch correction of X (dense result, as scanpy)",
      [](CLI::App& c, CombatCli& o) {
        c.add_option("--key", o.opt.key, "obs column of batches")->capture_default_str();
        c.add_option("--covariates", o.covariates, "comma-separated obs columns to keep in the model");
      },
      [](const Context& ctx, Dataset& d, const CombatCli& o, const std::string& in) {
        CombatOptions c = o.opt;
        c.covariates = split_list(o.covariates);
        in_file(in, [&] { combat(ctx, d, c); });
      });
  struct RegressCli {
    RegressOutOptions opt;
    std::string keys;
  };
  add_cmd<RegressCli>(
      app, g, "regress-out", "regress_out: least-squares residuals of X (or a layer) on obs columns",
      [](CLI::App& c, RegressCli& o) {
        c.add_option("--keys", o.keys, "comma-separated obs columns (numeric, or one categorical)")->required();
        c.add_option("--layer", o.opt.layer, "regress this layer instead of X");
      },
      [](const Context& ctx, Dataset& d, const RegressCli& o, const std::string& in) {
        RegressOutOptions r = o.opt;
        r.keys = split_list(o.keys);
        in_file(in, [&] { regress_out(ctx, d, r); });
      });
  add_cmd<ScrubletOptions>(
      app, g, "scrublet", "scrublet: doublet scores of the raw counts in X (obs doublet_score, predicted_doublet)",
      [](CLI::App& c, ScrubletOptions& o) { add_scrublet_options(c, o, ""); },
      [](const Context& ctx, Dataset& d, const ScrubletOptions& o, const std::string& in) {
        in_file(in, [&] { scrublet(ctx, d, o); });  // --device gpu: on the device (scrublet_gpu.hpp)
      });
}

}  // namespace scurry::cli
