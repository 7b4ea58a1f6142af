// scurry cnmf: consensus NMF gene programs as dylkot/cNMF (Kotliar et al. 2019), a drop-in for cNMF's
// command line: the verbs prepare, factorize, combine, k_selection_plot and consensus with cNMF's
// option names and defaults (every verb accepts every cNMF option, as cNMF's single argparse parser
// does), cNMF's file layout and formats (nmf/cnmf_steps.hpp); plus scurry's own `run` (every step),
// `bench`, `project` (starCAT), --device gpu / --gpus / --tf32, the TrynkaLab fork's --engine gpu and
// --gpu-batch, and the old scurry spellings (positional INPUT, k-selection, --max-iter).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/h5ad.hpp"
#include "io/read.hpp"
#include "nmf/cnmf_bench.hpp"
#include "nmf/cnmf_files.hpp"
#include "nmf/cnmf_steps.hpp"
#include "nmf/nmf.hpp"
#include "nmf/starcat.hpp"

namespace scurry::cli {

namespace {

// Every cNMF option, for every verb (cNMF parses one option set for all verbs).
struct CnmfCli {
  std::string output_dir = ".";  // --output-dir
  std::string name = "cNMF";     // --name
  std::string counts;            // -c/--counts (or the positional INPUT of scurry's old spelling)
  std::string input;
  CnmfPrepareArgs prep;
  int64_t seed = -1;             // --seed (unset: cNMF's None)
  std::vector<int> ks;           // -k/--components
  CnmfFactorizeArgs fact;
  bool skip_missing_files = false;
  CnmfConsensusArgs cons;
  std::string engine;            // TrynkaLab's --engine cpu|gpu: alias of --device
  int gpu_batch = 0;             // TrynkaLab's --gpu-batch: replicates per GPU batch (0: R * k ~ 1,200 a device)
  std::string gpus = "all";      // --gpus (with --device gpu)
  bool tf32 = false;             // --tf32: dense GPU layout on TF32 tensor cores
  std::string write_h5ad;        // run: input + obsm['cnmf_usages_k<K>']
};

void add_cnmf_options(CLI::App* c, CnmfCli& o, bool input_positional) {
  c->add_option("--output-dir", o.output_dir, "[all] Output directory; results go to DIR/NAME/")->capture_default_str();
  c->add_option("--name", o.name, "[all] Name of the analysis (prefix of every file)")->capture_default_str();
  c->add_option("-c,--counts", o.counts,
                "[prepare] Counts (cells x genes): .h5ad, 10x .h5 or mtx directory, zarr, .df.npz or a TSV");
  if (input_positional) c->add_option("INPUT", o.input, "[prepare] The counts (scurry's older spelling of -c)");
  c->add_option("-k,--components", o.ks, "[prepare, combine, consensus] Numbers of components, e.g. -k 5 6 7")
      ->expected(1, -1);
  c->add_option("-n,--n-iter", o.prep.n_iter, "[prepare] Factorisation replicates per k")->capture_default_str();
  c->add_option("--total-workers", o.fact.total_workers, "[all] Workers sharing the replicates")->capture_default_str();
  c->add_option("--seed", o.seed, "[prepare] Seed of the replicate seeds (0 .. 2^32-1; unset: drawn and logged)");
  c->add_option("--genes-file", o.prep.genes_file, "[prepare] Factorise these genes (one var name a line)");
  c->add_option("--numgenes", o.prep.numgenes, "[prepare] Over-dispersed genes to factorise")->capture_default_str();
  c->add_option("--tpm", o.prep.tpm_file, "[prepare] Precomputed TPM (cells x genes: .h5ad, .df.npz or TSV)");
  c->add_option("--beta-loss", o.prep.beta_loss, "[prepare] NMF loss")
      ->check(CLI::IsMember({"frobenius", "kullback-leibler", "itakura-saito"}))
      ->capture_default_str();
  c->add_option("--init", o.prep.init, "[prepare] NMF initialisation")
      ->check(CLI::IsMember({"random", "nndsvd"}))
      ->capture_default_str();
  c->add_flag("--densify", o.prep.densify, "[prepare] Store the normalised counts and TPM dense");
  c->add_option("--max-nmf-iter,--max-iter", o.prep.max_nmf_iter, "[prepare] Most NMF iterations per replicate")
      ->capture_default_str();
  c->add_option("--tol", o.prep.tol, "[prepare] NMF stopping tolerance (sklearn's; cNMF fixes 1e-4)")->capture_default_str();
  c->add_option("--worker-index", o.fact.worker_index, "[factorize] This worker's index (0-based)")->capture_default_str();
  c->add_flag("--skip-completed-runs", o.fact.skip_completed_runs,
              "[factorize] Skip replicates marked completed or whose spectra file exists");
  c->add_flag("--skip-missing-files", o.skip_missing_files, "[combine] Leave out replicates whose spectra are missing");
  c->add_option("--local-density-threshold", o.cons.local_density_threshold,
                "[consensus] Keep spectra whose mean distance to their neighbours is below this (2.0: keep all)")
      ->capture_default_str();
  c->add_option("--local-neighborhood-size", o.cons.local_neighborhood_size,
                "[consensus] Neighbours for the density, as a fraction of the replicates")
      ->capture_default_str();
  c->add_flag("--show-clustering", o.cons.show_clustering, "[consensus] Draw the clustergram PNG");
  c->add_flag("--build-reference", o.cons.build_reference, "[consensus] Write the starCAT reference spectra");
  c->add_option("--gpus", o.gpus,
                "[factorize] With --device gpu: replicates spread over these GPUs: all, a count N, or ordinals 0,2")
      ->capture_default_str();
  c->add_flag("--tf32", o.tf32, "[factorize] GPU dense layout: GEMMs on TF32 tensor cores");
  c->add_option("--engine", o.engine, "[factorize] TrynkaLab cNMF's spelling of --device: cpu or gpu")
      ->check(CLI::IsMember({"cpu", "gpu"}));
  c->add_option("--gpu-batch", o.gpu_batch,
                "[factorize] Replicates per GPU batch (TrynkaLab cNMF's option; 0: R * k ~ 1,200 per GPU, as `cnmf bench`)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->fallthrough();
}

Context cnmf_context(GlobalOptions& g, const CnmfCli& o) {
  if (!o.engine.empty()) g.context.device = o.engine;
  return make_context(g);
}

CnmfPrepareArgs prepare_args(const CnmfCli& o) {
  CnmfPrepareArgs a = o.prep;
  a.components = o.ks;
  if (o.seed >= 0) a.seed = static_cast<uint64_t>(o.seed);
  return a;
}

std::string counts_of(const CnmfCli& o) {
  if (!o.counts.empty() && !o.input.empty() && o.counts != o.input)
    fail_input("-c", "the counts are given twice ('", o.counts, "' and '", o.input, "')");
  const std::string c = o.counts.empty() ? o.input : o.counts;
  if (c.empty()) fail_input("prepare", "give the counts with -c/--counts FILE");
  return c;
}

CnmfFactorizeArgs factorize_args(const Context& ctx, const GlobalOptions& g, const CnmfCli& o) {
  CnmfFactorizeArgs a = o.fact;
  a.cuda = g.context.cuda;
  a.tf32 = o.tf32;
  a.gpu_batch = o.gpu_batch;
  if (ctx.backend() == Backend::cuda) a.gpus = parse_gpus(o.gpus, cuda_device_count());  // bad --gpus fails first
  return a;
}

CnmfConsensusArgs consensus_args(const CnmfCli& o) {
  CnmfConsensusArgs a = o.cons;
  a.components = o.ks;
  return a;
}

// ---- bench -------------------------------------------------------------------------------------

struct BenchCli {
  CnmfBenchOptions b;
  std::string gpus = "all";
  std::string layout = "auto";
  std::string json;
};

void print_bench(const CnmfBenchResult& r, const CnmfBenchOptions& o) {
  std::printf("cnmf bench: %s, %s (%d device%s)\n", r.backend.c_str(), r.device.c_str(), r.n_devices,
              r.n_devices == 1 ? "" : "s");
  std::printf("  %lld cells x %lld genes, nnz %lld (density %.3f), %d planted programs\n",
              static_cast<long long>(r.cells), static_cast<long long>(r.genes), static_cast<long long>(r.nnz), r.density,
              o.programs);
  std::printf("  generate %.3f s, scale %.3f s, layout %.3f s; %d iterations per replicate (tol 0)%s\n",
              r.generate_seconds, r.scale_seconds, r.layout_seconds, o.iterations, o.tf32 ? ", TF32 GEMMs" : "");
  std::printf("  %4s %5s %7s %10s %10s %9s %9s %10s %10s %10s %9s %9s\n", "k", "R", "layout", "time_s", "s/iter",
              "rep/s", "x_ref", "TFLOP/s", "floor_f_s", "floor_b_s", "peak_GiB", "rel_err");
  for (const auto& k : r.ks) {
    double peak = 0;
    for (const double p : k.peak_bytes) peak = std::max(peak, p);
    std::printf("  %4d %5d %7s %10.3f %10.4f %9.3f %9.2f %10.3f %10.4f %10.4f %9.2f %9.4f\n", k.k, k.replicates,
                k.layout.c_str(), k.seconds, k.seconds_per_iteration, k.replicates_per_second,
                k.replicates_per_second * kCnmfReferenceSecondsPerReplicate, k.achieved_flops / 1e12,
                k.floor_flops_seconds, k.floor_bytes_seconds, peak / (1ull << 30), k.relative_error);
  }
  std::printf("  x_ref: replicates/s over the published GPU cNMF's (%.1f s per replicate at 2.4M cells, A100; "
              "meaningful at 2.4M cells); target >= 20\n",
              kCnmfReferenceSecondsPerReplicate);
}

nlohmann::json bench_json(const CnmfBenchResult& r, const CnmfBenchOptions& o) {
  nlohmann::json j;
  j["backend"] = r.backend;
  j["device"] = r.device;
  j["n_devices"] = r.n_devices;
  j["cells"] = r.cells;
  j["genes"] = r.genes;
  j["nnz"] = r.nnz;
  j["density"] = r.density;
  j["programs"] = o.programs;
  j["iterations"] = o.iterations;
  j["warmup"] = o.warmup;
  j["tf32"] = o.tf32;
  j["seed"] = o.seed;
  j["generate_seconds"] = r.generate_seconds;
  j["scale_seconds"] = r.scale_seconds;
  j["layout_seconds"] = r.layout_seconds;
  j["reference_seconds_per_replicate"] = kCnmfReferenceSecondsPerReplicate;
  nlohmann::json ks = nlohmann::json::array();
  for (const auto& k : r.ks) {
    nlohmann::json e;
    e["k"] = k.k;
    e["replicates"] = k.replicates;
    e["layout"] = k.layout;
    e["seconds"] = k.seconds;
    e["seconds_per_iteration"] = k.seconds_per_iteration;
    e["replicates_per_second"] = k.replicates_per_second;
    e["speedup_vs_reference"] = k.replicates_per_second * kCnmfReferenceSecondsPerReplicate;
    e["flops_per_iteration"] = k.flops_per_iteration;
    e["achieved_flops"] = k.achieved_flops;
    e["floor_flops_seconds_per_iteration"] = k.floor_flops_seconds;
    e["floor_bytes_seconds_per_iteration"] = k.floor_bytes_seconds;
    e["peak_bytes_per_device"] = k.peak_bytes;
    e["relative_error"] = k.relative_error;
    ks.push_back(e);
  }
  j["ks"] = ks;
  return j;
}

void add_bench_subcommand(CLI::App* cnmf, GlobalOptions& g) {
  auto o = std::make_shared<BenchCli>();
  CLI::App* b = cnmf->add_subcommand(
      "bench", "Benchmark the replicates' factorisation on synthetic counts with planted programs (--device cpu|gpu)");
  b->add_option("--cells", o->b.cells, "Cells")->capture_default_str();
  b->add_option("--genes", o->b.genes, "Genes")->capture_default_str();
  b->add_option("-k,--components", o->b.ks, "Numbers of components")->expected(1, -1)->capture_default_str();
  b->add_option("--replicates", o->b.replicates, "Replicates per k over all GPUs (0: as many as fit; CPU: 2)")
      ->capture_default_str();
  b->add_option("--iterations", o->b.iterations, "Timed HALS iterations per replicate (no early stop)")->capture_default_str();
  b->add_option("--warmup", o->b.warmup, "GPU: untimed iterations first")->capture_default_str();
  b->add_option("--programs", o->b.programs, "Planted programs (1..32)")->capture_default_str();
  b->add_option("--library-size", o->b.library_size, "Median counts per cell")->capture_default_str();
  b->add_option("--seed", o->b.seed, "Seed of the data and of the inits")->capture_default_str();
  b->add_option("--gpus", o->gpus, "With --device gpu: all, a count N, or ordinals 0,2")->capture_default_str();
  b->add_option("--layout", o->layout, "GPU layout of X: auto (by density and memory), sparse or dense")
      ->check(CLI::IsMember({"auto", "sparse", "dense"}))
      ->capture_default_str();
  b->add_flag("--tf32", o->b.tf32, "GPU dense layout: GEMMs on TF32 tensor cores");
  b->add_option("--json", o->json, "Also write the results as JSON to this file");
  b->callback([&g, o] {
    Context ctx = make_context(g);
    if (!o->json.empty()) check_output_path(o->json, ".json", "--json");
    CnmfBenchOptions bo = o->b;
    bo.layout = o->layout == "dense" ? NmfGpuLayout::dense
                : o->layout == "sparse" ? NmfGpuLayout::sparse
                                        : NmfGpuLayout::automatic;
    CnmfBenchResult r;
    if (ctx.backend() == Backend::cuda) {
      bo.devices = parse_gpus(o->gpus, cuda_device_count());
      r = cnmf_bench_gpu(bo, g.context.cuda);
    } else {
      r = cnmf_bench_cpu(ctx, bo);
    }
    print_bench(r, bo);
    if (!o->json.empty()) write_text_atomic(o->json, bench_json(r, bo).dump(2) + "\n");
  });
}

// ---- simulate (the benchmark's counts as a file) ------------------------------------------------

// `cnmf bench`'s planted-program counts (nmf/cnmf_bench.hpp, the CPU generator) written as an .h5ad,
// so that the drop-in verbs can run on the issue-6 data from a file. Cells cell0.., genes gene0...
void add_simulate_subcommand(CLI::App* cnmf, GlobalOptions& g) {
  auto o = std::make_shared<std::pair<CnmfBenchOptions, std::string>>();
  CLI::App* s = cnmf->add_subcommand("simulate", "Write `cnmf bench`'s counts with planted programs as an .h5ad");
  s->add_option("OUT", o->second, "Output .h5ad")->required();
  s->add_option("--cells", o->first.cells, "Cells")->capture_default_str();
  s->add_option("--genes", o->first.genes, "Genes")->capture_default_str();
  s->add_option("--programs", o->first.programs, "Planted programs (1..32)")->capture_default_str();
  s->add_option("--library-size", o->first.library_size, "Median counts per cell")->capture_default_str();
  s->add_option("--seed", o->first.seed, "Seed")->capture_default_str();
  s->callback([&g, o] {
    Context ctx = make_context(g);
    check_output_path(o->second, ".h5ad", "OUT");
    Dataset d;
    d.X = Matrix(cnmf_bench_counts(ctx, o->first));
    d.obs.index.resize(static_cast<size_t>(o->first.cells));
    for (int64_t i = 0; i < o->first.cells; ++i) d.obs.index[i] = "cell" + std::to_string(i);
    d.var.index.resize(static_cast<size_t>(o->first.genes));
    for (int64_t j = 0; j < o->first.genes; ++j) d.var.index[j] = "gene" + std::to_string(j);
    make_parent_dirs(o->second);
    write_h5ad(d, o->second);
    log::info("cnmf simulate: " + std::to_string(o->first.cells) + " cells x " + std::to_string(o->first.genes) +
              " genes, " + std::to_string(o->first.programs) + " planted programs -> " + o->second);
  });
}

// ---- project (starCAT) -------------------------------------------------------------------------

struct ProjectCli {
  std::string reference, query, out;
  StarcatOptions opt;
  std::string solver = "nnls";
};

void add_project_subcommand(CLI::App* cnmf, GlobalOptions& g) {
  auto o = std::make_shared<ProjectCli>();
  CLI::App* pr = cnmf->add_subcommand(
      "project", "starCAT: fit the usages of a reference's programs (a starcat_spectra file) on new counts");
  pr->add_option("REF", o->reference, "Reference spectra: cNMF's starcat_spectra .txt or .df.npz (programs x genes)")
      ->required();
  pr->add_option("QUERY", o->query, "Query counts: .h5ad, 10x .h5 or mtx directory, zarr")->required();
  pr->add_option("-o,--output", o->out, "Usages: a TSV (.txt/.tsv) or .df.npz, cells x programs")->required();
  pr->add_flag("!--no-scale", o->opt.scale, "Do not scale the query genes to unit variance (starCAT scales)");
  pr->add_flag("!--unnormalized", o->opt.normalize, "Write the raw usages (default: normalised to sum 1, starCAT's)");
  pr->add_option("--solver", o->solver, "nnls (exact, default) or mu (starCAT's sklearn multiplicative updates)")
      ->check(CLI::IsMember({"nnls", "mu"}))
      ->capture_default_str();
  pr->callback([&g, o] {
    Context ctx = make_context(g);
    o->opt.exact = o->solver == "nnls";
    check_output_path(o->out, o->out.size() >= 4 && o->out.compare(o->out.size() - 4, 4, ".npz") == 0 ? ".npz"
                              : o->out.size() >= 4 && o->out.compare(o->out.size() - 4, 4, ".tsv") == 0 ? ".tsv" : ".txt",
                      "-o");
    starcat_project_files(ctx, o->reference, o->query, o->out, o->opt);
  });
}

}  // namespace

void add_cnmf_command(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<CnmfCli>();
  CLI::App* cnmf = app.add_subcommand("cnmf", "Consensus NMF gene programs, a drop-in for cNMF's command line");
  cnmf->require_subcommand(1);
  cnmf->fallthrough();

  CLI::App* prep = cnmf->add_subcommand("prepare", "TPM, over-dispersed genes, scaled counts, replicate seeds");
  add_cnmf_options(prep, *o, true);
  prep->callback([&g, o] {
    Context ctx = cnmf_context(g, *o);
    cnmf_prepare_step(ctx, CnmfPaths(o->output_dir, o->name), counts_of(*o), prepare_args(*o));
  });

  CLI::App* fact = cnmf->add_subcommand("factorize", "Run the NMF replicates of this worker (batched per k)");
  add_cnmf_options(fact, *o, false);
  fact->callback([&g, o] {
    Context ctx = cnmf_context(g, *o);
    cnmf_factorize_step(ctx, CnmfPaths(o->output_dir, o->name), factorize_args(ctx, g, *o));
  });

  CLI::App* comb = cnmf->add_subcommand("combine", "Merge the replicates' spectra per k");
  add_cnmf_options(comb, *o, false);
  comb->callback([&g, o] {
    const Context ctx = cnmf_context(g, *o);
    cnmf_combine_step(CnmfPaths(o->output_dir, o->name), o->ks, o->skip_missing_files, ctx.threads());
  });

  CLI::App* cons = cnmf->add_subcommand("consensus", "Consensus spectra, usages, gene scores (and starCAT reference) per k");
  add_cnmf_options(cons, *o, false);
  cons->callback([&g, o] {
    Context ctx = cnmf_context(g, *o);
    cnmf_consensus_step(ctx, CnmfPaths(o->output_dir, o->name), consensus_args(*o));
  });

  CLI::App* ksel = cnmf->add_subcommand("k_selection_plot", "Stability and error against k (stats .df.npz and PNG)");
  ksel->alias("k-selection");
  add_cnmf_options(ksel, *o, false);
  ksel->callback([&g, o] {
    Context ctx = cnmf_context(g, *o);
    cnmf_k_selection_step(ctx, CnmfPaths(o->output_dir, o->name), o->cons.local_neighborhood_size);
  });

  add_bench_subcommand(cnmf, g);
  add_project_subcommand(cnmf, g);
  add_simulate_subcommand(cnmf, g);

  CLI::App* run = cnmf->add_subcommand("run", "prepare, factorize, combine, consensus and k_selection_plot in one go");
  add_cnmf_options(run, *o, true);
  run->add_option("--write-h5ad", o->write_h5ad, "Also write the input with obsm['cnmf_usages_k<K>'] to this .h5ad");
  run->callback([&g, o] {
    Context ctx = cnmf_context(g, *o);
    if (!o->write_h5ad.empty()) check_output_path(o->write_h5ad, ".h5ad", "--write-h5ad");
    const CnmfPaths p(o->output_dir, o->name);
    const std::string counts = counts_of(*o);
    cnmf_prepare_step(ctx, p, counts, prepare_args(*o));
    CnmfFactorizeArgs fa = factorize_args(ctx, g, *o);
    fa.worker_index = 0, fa.total_workers = 1;
    cnmf_factorize_step(ctx, p, fa);
    cnmf_combine_step(p, {}, false, ctx.threads());
    CnmfConsensusArgs ca = consensus_args(*o);
    ca.components.clear();
    auto usages = cnmf_consensus_step(ctx, p, ca);
    cnmf_k_selection_step(ctx, p, o->cons.local_neighborhood_size);
    if (!o->write_h5ad.empty()) {
      Dataset d = read_any(counts);
      for (auto& [k, u] : usages) d.obsm["cnmf_usages_k" + std::to_string(k)] = Matrix(std::move(u));
      make_parent_dirs(o->write_h5ad);
      write_h5ad(d, o->write_h5ad);
    }
  });
}

}  // namespace scurry::cli
