// scurry cnmf prepare|factorize|combine|consensus|k-selection|run: consensus NMF gene programs as
// dylkot/cNMF (Kotliar et al. 2019), with its file layout (nmf/cnmf_files.hpp). `run` does every step.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
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
#include "nmf/cnmf_prepare.hpp"
#include "nmf/consensus.hpp"
#include "nmf/nmf.hpp"
#include "nmf/plot_png.hpp"

namespace scurry::cli {

namespace {

struct CnmfCli {
  std::string output_dir = ".";  // cNMF --output-dir
  std::string name = "cNMF";     // cNMF --name
  std::string input;             // counts: h5ad, 10x .h5 or mtx directory
  std::vector<int> ks;           // -k
  int n_iter = 100;              // cNMF --n-iter: replicates per k
  uint64_t seed = 0;             // cNMF --seed (cNMF's default None is unseeded; ours is 0)
  std::string genes_file;        // cNMF --genes-file
  std::string beta_loss = "frobenius";
  int worker_index = 0, total_workers = 1;
  std::string write_h5ad;        // run: input + obsm['cnmf_usages_k<K>']
  std::string gpus = "all";      // --gpus (with --device gpu): all | N | 0,1,...
  CudaOptions cuda;              // the global --device options, for the extra GPUs' resources
  CnmfPrepareOptions prep;
  CnmfConsensusOptions cons;
  NmfOptions nmf;
};

std::vector<std::string> numbered(int k) {
  std::vector<std::string> v;
  for (int c = 1; c <= k; ++c) v.push_back(std::to_string(c));
  return v;
}

Dataset make_ds(CsrF X, const std::vector<std::string>& cells, const std::vector<std::string>& genes) {
  Dataset d;
  d.X = Matrix(std::move(X));
  d.obs.index = cells;
  d.var.index = genes;
  return d;
}

struct Loaded {
  CsrF X;
  std::vector<std::string> cells, genes;
};
Loaded load_h5ad(const std::string& path) {
  H5adReadOptions ro;
  ro.read_raw = false;
  ro.read_layers = false;
  Dataset d = read_h5ad(path, ro);
  return {to_csr_f(d.X), d.obs.index, d.var.index};
}

struct Replicate {
  int k, iter;
  uint64_t seed;
};
std::vector<Replicate> read_replicates(const CnmfPaths& p) {
  const TsvTable t = read_tsv_table(p.replicate_params());
  if (t.columns.size() != 3) fail_input(p.replicate_params(), "expected columns n_components, iter, nmf_seed");
  std::vector<Replicate> r;
  for (int64_t i = 0; i < t.values.n_rows; ++i)
    r.push_back({static_cast<int>(t.values(i, 0)), static_cast<int>(t.values(i, 1)),
                 static_cast<uint64_t>(t.values(i, 2))});
  return r;
}

std::vector<int> ks_of(const std::vector<Replicate>& reps, const std::vector<int>& asked) {
  std::set<int> all;
  for (const auto& r : reps) all.insert(r.k);
  if (asked.empty()) return {all.begin(), all.end()};
  for (const int k : asked)
    if (!all.count(k)) fail_input("-k", "k = ", k, " was not prepared; prepared: ", [&] {
        std::string s;
        for (const int x : all) s += std::to_string(x) + " ";
        return s;
      }());
  std::set<int> s(asked.begin(), asked.end());
  return {s.begin(), s.end()};
}

NmfOptions read_run_params(const CnmfPaths& p) {
  NmfOptions o;
  for (const auto& [k, v] : read_key_values(p.run_params())) {
    if (k == "beta_loss") o.loss = parse_nmf_loss(v);
    else if (k == "solver") o.solver = parse_nmf_solver(v);
    else if (k == "tol") o.tol = std::stod(v);
    else if (k == "max_iter") o.max_iter = std::stoi(v);
  }
  return o;
}

// ---- the steps ---------------------------------------------------------------------------------

void do_prepare(const Context& ctx, const CnmfCli& o, const CnmfPaths& p, const Dataset& d) {
  check_counts(d.X, o.input);
  if (o.ks.empty()) fail_input("-k", "give at least one number of components, e.g. -k 5 6 7");
  for (const int k : o.ks)
    if (k < 1) fail_input("-k", "each k must be at least 1 (got ", k, ")");
  if (o.n_iter < 1) fail_input("--n-iter", "must be at least 1 (got ", o.n_iter, ")");
  const NmfLoss loss = parse_nmf_loss(o.beta_loss);
  CnmfPrepareOptions prep = o.prep;
  if (!o.genes_file.empty()) {
    std::ifstream in(o.genes_file);
    if (!in) fail_input(o.genes_file, "cannot open the genes file");
    std::string line;
    while (std::getline(in, line)) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (!line.empty()) prep.genes.push_back(line);
    }
    if (prep.genes.empty()) fail_input(o.genes_file, "the genes file lists no genes (one gene name a line)");
  }
  const CsrF counts = to_csr_f(d.X);
  CnmfPrepared pr = cnmf_prepare(ctx, counts, d.obs.index, d.var.index, prep, o.input);
  p.make_dirs();
  std::vector<std::string> hvg;
  for (const int64_t j : pr.genes) hvg.push_back(d.var.index[j]);
  std::string gl;
  for (size_t q = 0; q < hvg.size(); ++q) gl += (q ? "\n" : "") + hvg[q];
  write_text_file(p.genes_list(), gl);
  write_h5ad(make_ds(std::move(pr.norm_counts), d.obs.index, hvg), p.normalized_counts());
  write_h5ad(make_ds(std::move(pr.tpm), d.obs.index, d.var.index), p.tpm());
  DenseD st(static_cast<int64_t>(pr.tpm_mean.size()), 2);
  std::vector<std::string> gi;
  for (size_t j = 0; j < pr.tpm_mean.size(); ++j) {
    st(j, 0) = pr.tpm_mean[j], st(j, 1) = pr.tpm_std[j];
    gi.push_back(std::to_string(j));
  }
  write_tsv_table(p.tpm_stats(), gi, {"__mean", "__std"}, st);
  // Replicates: (k sorted, iter) with cNMF's seed list.
  std::set<int> kset(o.ks.begin(), o.ks.end());
  const std::vector<int> ks(kset.begin(), kset.end());
  const auto seeds = nmf_replicate_seeds(o.seed, static_cast<int64_t>(ks.size()) * o.n_iter);
  DenseD rp(static_cast<int64_t>(seeds.size()), 3);
  std::vector<std::string> ri;
  size_t q = 0;
  for (const int k : ks)
    for (int it = 0; it < o.n_iter; ++it, ++q) {
      rp(q, 0) = k, rp(q, 1) = it, rp(q, 2) = static_cast<double>(seeds[q]);
      ri.push_back(std::to_string(q));
    }
  // Integers as such (not "5.0"): write this table by hand.
  std::string s = "\tn_components\titer\tnmf_seed\n";
  for (size_t i = 0; i < seeds.size(); ++i)
    s += ri[i] + "\t" + std::to_string(static_cast<int64_t>(rp(i, 0))) + "\t" + std::to_string(static_cast<int64_t>(rp(i, 1))) +
         "\t" + std::to_string(seeds[i]) + "\n";
  write_text_file(p.replicate_params(), s);
  const NmfSolver solver = loss == NmfLoss::frobenius ? NmfSolver::cd : NmfSolver::mu;  // as cNMF
  write_key_values(p.run_params(), {{"alpha_W", "0.0"},
                                    {"l1_ratio", "0.0"},
                                    {"beta_loss", nmf_loss_name(loss)},
                                    {"solver", nmf_solver_name(solver)},
                                    {"tol", py_float_repr(o.nmf.tol)},
                                    {"max_iter", std::to_string(o.nmf.max_iter)},
                                    {"init", "random"}});
  log::info("cnmf prepare: " + std::to_string(hvg.size()) + " genes, " + std::to_string(counts.n_rows) + " cells, " +
            std::to_string(seeds.size()) + " replicates");
}

void do_factorize(const Context& ctx, const CnmfCli& o, const CnmfPaths& p) {
  if (ctx.backend() == Backend::cuda) parse_gpus(o.gpus, cuda_device_count());  // a bad --gpus fails before any work
  if (o.total_workers < 1 || o.worker_index < 0 || o.worker_index >= o.total_workers)
    fail_input("--worker-index", "must be in [0, --total-workers) (got ", o.worker_index, " of ", o.total_workers, ")");
  const auto reps = read_replicates(p);
  const NmfOptions nmf = read_run_params(p);
  const Loaded nc = load_h5ad(p.normalized_counts());
  std::map<int, std::vector<Replicate>> by_k;
  for (size_t i = 0; i < reps.size(); ++i)
    if ((static_cast<int64_t>(i) - o.worker_index) % o.total_workers == 0) by_k[reps[i].k].push_back(reps[i]);
  for (const auto& [k, jobs] : by_k) {
    std::vector<uint64_t> seeds;
    for (const auto& j : jobs) seeds.push_back(j.seed);
    NmfBatch init = nmf_random_init(nc.X, k, seeds);
    const NmfResult r =
        ctx.backend() == Backend::cuda
            ? nmf_fit_gpus(nc.X, std::move(init), nmf, parse_gpus(o.gpus, cuda_device_count()), o.cuda)
            : nmf_fit(ctx, nc.X, std::move(init), nmf);
    int lo = nmf.max_iter, hi = 0;
    for (size_t q = 0; q < jobs.size(); ++q) {
      write_tsv_table(p.iter_spectra(k, jobs[q].iter), numbered(k), nc.genes, r.f.h_of(static_cast<int>(q)));
      lo = std::min(lo, r.n_iter[q]), hi = std::max(hi, r.n_iter[q]);
    }
    log::info("cnmf factorize: k=" + std::to_string(k) + ", " + std::to_string(jobs.size()) + " replicates, " +
              std::to_string(lo) + ".." + std::to_string(hi) + " iterations");
  }
}

void do_combine(const CnmfCli& o, const CnmfPaths& p) {
  const auto reps = read_replicates(p);
  for (const int k : ks_of(reps, o.ks)) {
    std::vector<Replicate> rk;
    for (const auto& r : reps)
      if (r.k == k) rk.push_back(r);
    std::sort(rk.begin(), rk.end(), [](const Replicate& a, const Replicate& b) { return a.iter < b.iter; });
    DenseF merged;
    std::vector<std::string> labels, genes;
    for (size_t q = 0; q < rk.size(); ++q) {
      const TsvTable t = read_tsv_table(p.iter_spectra(k, rk[q].iter));
      if (t.values.n_rows != k) fail_input(p.iter_spectra(k, rk[q].iter), "expected ", k, " spectra");
      if (q == 0) {
        genes = t.columns;
        merged = DenseF(static_cast<int64_t>(rk.size()) * k, static_cast<int64_t>(genes.size()));
      } else if (t.columns != genes) {
        fail_input(p.iter_spectra(k, rk[q].iter), "genes differ from the other replicates'");
      }
      for (int c = 0; c < k; ++c) {
        for (size_t j = 0; j < genes.size(); ++j) merged(q * k + c, j) = static_cast<float>(t.values(c, j));
        labels.push_back("iter" + std::to_string(rk[q].iter) + "_topic" + std::to_string(c + 1));
      }
    }
    write_tsv_table(p.merged_spectra(k), labels, genes, merged);
    log::info("cnmf combine: k=" + std::to_string(k) + ", " + std::to_string(rk.size()) + " replicates");
  }
}

DenseF read_merged(const CnmfPaths& p, int k) {
  const TsvTable t = read_tsv_table(p.merged_spectra(k));
  DenseF m(t.values.n_rows, t.values.n_cols);
  for (size_t q = 0; q < m.data.size(); ++q) m.data[q] = static_cast<float>(t.values.data[q]);
  return m;
}

// Returns the usages per k (for --write-h5ad).
std::map<int, DenseF> do_consensus(const Context& ctx, const CnmfCli& o, const CnmfPaths& p) {
  const auto reps = read_replicates(p);
  CnmfConsensusOptions cons = o.cons;
  cons.refit = read_run_params(p);
  const Loaded nc = load_h5ad(p.normalized_counts());
  const Loaded tpm = load_h5ad(p.tpm());
  const TsvTable ts = read_tsv_table(p.tpm_stats());
  std::vector<double> mean(ts.values.n_rows), sd(ts.values.n_rows);
  for (int64_t j = 0; j < ts.values.n_rows; ++j) mean[j] = ts.values(j, 0), sd[j] = ts.values(j, 1);
  const std::string dt = cnmf_dt_tag(cons.density_threshold);
  std::map<int, DenseF> usages;
  for (const int k : ks_of(reps, o.ks)) {
    const DenseF merged = read_merged(p, k);
    CnmfConsensus c = cnmf_consensus(ctx, merged, k, nc.X, cons);
    write_tsv_table(p.consensus_spectra_txt(k, dt), numbered(k), nc.genes, c.spectra);
    write_tsv_table(p.consensus_usages_txt(k, dt), nc.cells, numbered(k), c.usages);
    DenseD st(4, 1);
    st(0, 0) = k, st(1, 0) = cons.density_threshold, st(2, 0) = c.stability, st(3, 0) = c.prediction_error;
    write_tsv_table(p.consensus_stats(k, dt), {"k", "local_density_threshold", "stability", "prediction_error"},
                    {"stats"}, st);
    write_tsv_table(p.gene_spectra_score_txt(k, dt), numbered(k), tpm.genes,
                    cnmf_gene_spectra_score(ctx, c.usages, tpm.X, mean, sd));
    write_tsv_table(p.gene_spectra_tpm_txt(k, dt), numbered(k), tpm.genes,
                    cnmf_gene_spectra_tpm(ctx, c.usages, tpm.X, cons.refit));
    int64_t kept = 0;
    for (const auto v : c.kept) kept += v;
    log::info("cnmf consensus: k=" + std::to_string(k) + ", " + std::to_string(kept) + "/" +
              std::to_string(c.kept.size()) + " spectra kept, stability " + py_float_repr(c.stability) +
              ", error " + py_float_repr(c.prediction_error));
    usages[k] = std::move(c.usages);
  }
  return usages;
}

void do_k_selection(const Context& ctx, const CnmfCli& o, const CnmfPaths& p) {
  const auto reps = read_replicates(p);
  CnmfConsensusOptions cons = o.cons;
  cons.refit = read_run_params(p);
  cons.skip_density = true;
  cons.density_threshold = 2.0;  // recorded in the stats: no filter (cNMF records its default 0.5 here)
  const Loaded nc = load_h5ad(p.normalized_counts());
  const std::vector<int> ks = ks_of(reps, {});
  std::vector<double> stab, err;
  DenseD st(static_cast<int64_t>(ks.size()), 4);
  std::vector<std::string> idx;
  for (size_t q = 0; q < ks.size(); ++q) {
    const CnmfConsensus c = cnmf_consensus(ctx, read_merged(p, ks[q]), ks[q], nc.X, cons);
    stab.push_back(c.stability);
    err.push_back(c.prediction_error);
    st(q, 0) = ks[q], st(q, 1) = cons.density_threshold, st(q, 2) = c.stability, st(q, 3) = c.prediction_error;
    idx.push_back(std::to_string(q));
  }
  write_tsv_table(p.k_selection_stats(), idx, {"k", "local_density_threshold", "stability", "prediction_error"}, st);
  write_text_file(p.k_selection_plot(), encode_png(k_selection_canvas(ks, stab, err)));
  log::info("cnmf k-selection: " + p.k_selection_plot());
}

void add_common(CLI::App* c, CnmfCli& o) {
  c->add_option("--output-dir", o.output_dir, "Output directory; results go to DIR/NAME/")->capture_default_str();
  c->add_option("--name", o.name, "Name of the analysis (prefix of every file)")->capture_default_str();
  c->fallthrough();
}
void add_prepare_opts(CLI::App* c, CnmfCli& o) {
  c->add_option("-k,--components", o.ks, "Numbers of components, e.g. -k 5 6 7")->required()->expected(1, -1);
  c->add_option("-n,--n-iter", o.n_iter, "Factorisation replicates per k")->capture_default_str();
  c->add_option("--seed", o.seed, "Seed of the replicate seeds")->capture_default_str();
  c->add_option("--numgenes", o.prep.num_highvar_genes, "Over-dispersed genes to factorise")->capture_default_str();
  c->add_option("--genes-file", o.genes_file, "Factorise these genes instead (one var name a line)");
  c->add_option("--beta-loss", o.beta_loss, "NMF loss: frobenius (HALS, cNMF's cd) or kullback-leibler (mu)")
      ->check(CLI::IsMember({"frobenius", "kullback-leibler"}))
      ->capture_default_str();
  c->add_option("--max-iter", o.nmf.max_iter, "Most NMF iterations per replicate")->capture_default_str();
  c->add_option("--tol", o.nmf.tol, "NMF stopping tolerance (sklearn's)")->capture_default_str();
}
void add_consensus_opts(CLI::App* c, CnmfCli& o) {
  c->add_option("--local-density-threshold", o.cons.density_threshold,
                "Keep spectra whose mean distance to their neighbours is below this (2: keep all)")
      ->capture_default_str();
  c->add_option("--local-neighborhood-size", o.cons.local_neighborhood_size,
                "Neighbours for the density, as a fraction of the replicates")
      ->capture_default_str();
}

void add_gpus_opt(CLI::App* c, CnmfCli& o) {
  c->add_option("--gpus", o.gpus,
                "With --device gpu: replicates spread over these GPUs: all, a count N (the first N), or ordinals "
                "0,2 (a comma makes a list: '1,' is device 1)")
      ->capture_default_str();
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

}  // namespace

void add_cnmf_command(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<CnmfCli>();
  CLI::App* cnmf = app.add_subcommand("cnmf", "Consensus NMF gene programs (cNMF: prepare, factorize, combine, consensus)");
  cnmf->require_subcommand(1);
  cnmf->fallthrough();

  CLI::App* prep = cnmf->add_subcommand("prepare", "TPM, over-dispersed genes, scaled counts, replicate seeds");
  prep->add_option("INPUT", o->input, "Counts: .h5ad, 10x .h5 or 10x mtx directory")->required();
  add_common(prep, *o);
  add_prepare_opts(prep, *o);
  prep->callback([&g, o] {
    Context ctx = make_context(g);
    const CnmfPaths p(o->output_dir, o->name);
    do_prepare(ctx, *o, p, read_any(o->input));
  });

  CLI::App* fact = cnmf->add_subcommand("factorize", "Run the NMF replicates (batched per k)");
  add_common(fact, *o);
  fact->add_option("--worker-index", o->worker_index, "This worker's index (0-based)")->capture_default_str();
  fact->add_option("--total-workers", o->total_workers, "Workers sharing the replicates")->capture_default_str();
  add_gpus_opt(fact, *o);
  fact->callback([&g, o] {
    Context ctx = make_context(g);
    o->cuda = g.context.cuda;
    do_factorize(ctx, *o, CnmfPaths(o->output_dir, o->name));
  });

  CLI::App* comb = cnmf->add_subcommand("combine", "Merge the replicates' spectra per k");
  add_common(comb, *o);
  comb->add_option("-k,--components", o->ks, "Only these k (default: all prepared)")->expected(1, -1);
  comb->callback([&g, o] {
    make_context(g);
    do_combine(*o, CnmfPaths(o->output_dir, o->name));
  });

  CLI::App* cons = cnmf->add_subcommand("consensus", "Consensus spectra, usages and gene scores per k");
  add_common(cons, *o);
  cons->add_option("-k,--components", o->ks, "Only these k (default: all prepared)")->expected(1, -1);
  add_consensus_opts(cons, *o);
  cons->callback([&g, o] {
    Context ctx = make_context(g);
    do_consensus(ctx, *o, CnmfPaths(o->output_dir, o->name));
  });

  CLI::App* ksel = cnmf->add_subcommand("k-selection", "Stability and error against k (TSV and PNG)");
  add_common(ksel, *o);
  ksel->callback([&g, o] {
    Context ctx = make_context(g);
    do_k_selection(ctx, *o, CnmfPaths(o->output_dir, o->name));
  });

  add_bench_subcommand(cnmf, g);

  CLI::App* run = cnmf->add_subcommand("run", "prepare, factorize, combine, consensus and k-selection in one go");
  run->add_option("INPUT", o->input, "Counts: .h5ad, 10x .h5 or 10x mtx directory")->required();
  add_common(run, *o);
  add_prepare_opts(run, *o);
  add_consensus_opts(run, *o);
  run->add_option("--write-h5ad", o->write_h5ad, "Also write the input with obsm['cnmf_usages_k<K>'] to this .h5ad");
  add_gpus_opt(run, *o);
  run->callback([&g, o] {
    Context ctx = make_context(g);
    o->cuda = g.context.cuda;
    if (!o->write_h5ad.empty()) check_output_path(o->write_h5ad, ".h5ad", "--write-h5ad");
    const CnmfPaths p(o->output_dir, o->name);
    Dataset d = read_any(o->input);
    do_prepare(ctx, *o, p, d);
    CnmfCli all = *o;
    all.ks.clear();
    do_factorize(ctx, all, p);
    do_combine(all, p);
    auto usages = do_consensus(ctx, all, p);
    do_k_selection(ctx, all, p);
    if (!o->write_h5ad.empty()) {
      for (auto& [k, u] : usages) d.obsm["cnmf_usages_k" + std::to_string(k)] = Matrix(std::move(u));
      make_parent_dirs(o->write_h5ad);
      write_h5ad(d, o->write_h5ad);
    }
  });
}

}  // namespace scurry::cli
