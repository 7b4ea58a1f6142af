// scurry: cNMF's verbs over a run folder (see cnmf_steps.hpp).
#include "nmf/cnmf_steps.hpp"
#include "exec/parallel.hpp"

#include <cstdlib>
#include <cstdio>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <future>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <unordered_map>

#include "core/env_laps.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/h5ad.hpp"
#include "io/npz.hpp"
#include "io/read.hpp"
#include "nmf/cnmf_prepare.hpp"
#include "nmf/consensus.hpp"
#include "nmf/nmf.hpp"
#include "nmf/plot_png.hpp"

namespace scurry {

namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

std::vector<std::string> numbered(int k, const std::string& prefix = "") {
  std::vector<std::string> v;
  for (int c = 1; c <= k; ++c) v.push_back(prefix + std::to_string(c));
  return v;
}

CsrD to_csr_d(const CsrF& m) {
  CsrD d;
  d.n_rows = m.n_rows, d.n_cols = m.n_cols;
  d.indptr = m.indptr;
  d.indices = m.indices;
  d.data.assign(m.data.begin(), m.data.end());
  return d;
}

DenseD to_dense_d(const CsrF& m) {
  DenseD d(m.n_rows, m.n_cols);
  for (int64_t i = 0; i < m.n_rows; ++i)
    for (int64_t p = m.indptr[i]; p < m.indptr[i + 1]; ++p) d(i, m.indices[p]) = m.data[p];
  return d;
}

CsrF dense_to_csr(const DenseD& d) {
  CsrF m;
  m.n_rows = d.n_rows, m.n_cols = d.n_cols;
  m.indptr.assign(d.n_rows + 1, 0);
  for (int64_t i = 0; i < d.n_rows; ++i) {
    for (int64_t j = 0; j < d.n_cols; ++j)
      if (d(i, j) != 0) m.indices.push_back(static_cast<int32_t>(j)), m.data.push_back(static_cast<float>(d(i, j)));
    m.indptr[i + 1] = static_cast<int64_t>(m.indices.size());
  }
  return m;
}

struct CountTable {
  CsrF X;
  std::vector<std::string> cells, genes;
};

// cNMF's inputs: .h5ad (and scurry's other formats), a .df.npz frame or a tab-separated text table.
CountTable read_table_any(const std::string& path) {
  if (ends_with(path, ".npz")) {
    DfNpz d = read_df_npz(path);
    return {dense_to_csr(d.data), std::move(d.index), std::move(d.columns)};
  }
  if (!fs::is_directory(path) && !ends_with(path, ".h5ad") && !ends_with(path, ".h5") && !ends_with(path, ".zarr") &&
      !ends_with(path, ".zarr/")) {
    TsvTable t = read_tsv_table(path);
    return {dense_to_csr(t.values), std::move(t.index), std::move(t.columns)};
  }
  Dataset d = read_any(path);
  check_counts(d.X, path);
  return {to_csr_f(d.X), d.obs.index, d.var.index};
}

CountTable load_h5ad_x(const std::string& path) {
  H5adReadOptions ro;
  ro.read_raw = false;
  ro.read_layers = false;
  Dataset d = read_h5ad(path, ro);
  return {to_csr_f(d.X), d.obs.index, d.var.index};
}

Dataset make_ds(Matrix X, const std::vector<std::string>& cells, const std::vector<std::string>& genes) {
  Dataset d;
  d.X = std::move(X);
  d.obs.index = cells;
  d.var.index = genes;
  return d;
}

struct Replicate {
  int k = 0, iter = 0;
  uint64_t seed = 0;
  bool completed = false;
};

std::vector<Replicate> read_replicates(const CnmfPaths& p) {
  const std::string f = p.replicate_params();
  if (!fs::exists(f)) fail_input(f, "not found: run `cnmf prepare` first (or check --output-dir and --name)");
  const DfNpz t = read_df_npz(f);
  auto col = [&](const std::string& name, bool required) -> int64_t {
    for (size_t c = 0; c < t.columns.size(); ++c)
      if (t.columns[c] == name) return static_cast<int64_t>(c);
    if (required) fail_input(f, "has no '", name, "' column (cNMF's nmf_params: n_components, iter, nmf_seed, completed)");
    return -1;
  };
  const int64_t ck = col("n_components", true), ci = col("iter", true), cs = col("nmf_seed", true),
                cc = col("completed", false);
  std::vector<Replicate> r;
  for (int64_t i = 0; i < t.data.n_rows; ++i) {
    Replicate x;
    x.k = static_cast<int>(t.data(i, ck));
    x.iter = static_cast<int>(t.data(i, ci));
    x.seed = static_cast<uint64_t>(t.data(i, cs));
    x.completed = cc >= 0 && t.data(i, cc) != 0;
    r.push_back(x);
  }
  return r;
}

std::vector<int> ks_of(const std::vector<Replicate>& reps, const std::vector<int>& asked) {
  std::set<int> all;
  for (const auto& r : reps) all.insert(r.k);
  if (asked.empty()) return {all.begin(), all.end()};
  for (const int k : asked)
    if (!all.count(k)) {
      std::string s;
      for (const int x : all) s += std::to_string(x) + " ";
      fail_input("-k", "k = ", k, " was not prepared; prepared: ", s);
    }
  std::set<int> s(asked.begin(), asked.end());
  return {s.begin(), s.end()};
}

struct RunParams {
  NmfOptions nmf;
  std::string init = "random";
};

RunParams read_run_params(const CnmfPaths& p) {
  RunParams o;
  const std::string f = p.run_params();
  for (const auto& [k, v] : read_flat_yaml(f)) {
    try {
      if (k == "beta_loss") o.nmf.loss = parse_nmf_loss(v);
      else if (k == "solver") o.nmf.solver = parse_nmf_solver(v);
      else if (k == "tol") o.nmf.tol = std::stod(v);
      else if (k == "max_iter") o.nmf.max_iter = std::stoi(v);
      else if (k == "init") o.init = v;
      else if ((k == "alpha_W" || k == "alpha_H" || k == "l1_ratio") && std::stod(v) != 0)
        fail_input(f, k, " = ", v, ": scurry's NMF has no regularisation (cNMF writes 0.0)");
    } catch (const std::logic_error&) {
      fail_input(f, "'", k, ": ", v, "' is not a number");
    }
  }
  if (o.init != "random" && o.init != "nndsvd") fail_input(f, "init '", o.init, "' is not random or nndsvd");
  return o;
}

std::vector<int64_t> gene_positions(const std::vector<std::string>& all, const std::vector<std::string>& sub,
                                    const std::string& where) {
  std::unordered_map<std::string, int64_t> idx;
  for (int64_t j = static_cast<int64_t>(all.size()) - 1; j >= 0; --j) idx[all[j]] = j;
  std::vector<int64_t> out;
  for (const auto& g : sub) {
    const auto it = idx.find(g);
    if (it == idx.end()) fail_input(where, "gene '", g, "' is not among the TPM matrix's genes");
    out.push_back(it->second);
  }
  return out;
}

std::vector<std::string> read_genes_list(const CnmfPaths& p) {
  std::ifstream in(p.genes_list());
  if (!in) fail_input(p.genes_list(), "cannot open (run `cnmf prepare` first)");
  std::vector<std::string> g;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) g.push_back(line);
  }
  return g;
}

DenseF read_merged(const CnmfPaths& p, int k, std::vector<std::string>* labels, std::vector<std::string>* genes) {
  const std::string f = p.merged_spectra(k);
  if (!fs::exists(f)) fail_input(f, "not found: run `cnmf combine` first");
  DfNpz t = read_df_npz(f);
  DenseF m(t.data.n_rows, t.data.n_cols);
  for (size_t q = 0; q < m.data.size(); ++q) m.data[q] = static_cast<float>(t.data.data[q]);
  if (labels) *labels = std::move(t.index);
  if (genes) *genes = std::move(t.columns);
  return m;
}

DenseD to_d(const DenseF& f) {
  DenseD d(f.n_rows, f.n_cols);
  for (size_t q = 0; q < f.data.size(); ++q) d.data[q] = f.data[q];
  return d;
}

}  // namespace

// ---- prepare -----------------------------------------------------------------------------------

void cnmf_prepare_step(const Context& ctx, const CnmfPaths& p, const std::string& counts_path, const CnmfPrepareArgs& a) {
  if (a.components.empty()) fail_input("-k", "give at least one number of components, e.g. -k 5 6 7");
  for (const int k : a.components)
    if (k < 1) fail_input("-k", "each k must be at least 1 (got ", k, ")");
  if (a.n_iter < 1) fail_input("--n-iter", "must be at least 1 (got ", a.n_iter, ")");
  if (a.max_nmf_iter < 1) fail_input("--max-nmf-iter", "must be at least 1 (got ", a.max_nmf_iter, ")");
  if (a.seed && *a.seed > 0xffffffffull) fail_input("--seed", "must be between 0 and 2**32 - 1 (numpy's range; got ", *a.seed, ")");
  const NmfLoss loss = parse_nmf_loss(a.beta_loss);
  if (a.init != "random" && a.init != "nndsvd") fail_input("--init", "'", a.init, "' is not random or nndsvd");
  CnmfPrepareOptions prep;
  prep.num_highvar_genes = a.numgenes;
  if (!a.genes_file.empty()) {
    std::ifstream in(a.genes_file);
    if (!in) fail_input(a.genes_file, "cannot open the genes file");
    std::string line;
    while (std::getline(in, line)) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (!line.empty()) prep.genes.push_back(line);
    }
    if (prep.genes.empty()) fail_input(a.genes_file, "the genes file lists no genes (one gene name a line)");
  }
  const CountTable counts = read_table_any(counts_path);
  std::optional<CountTable> tpm_in;
  if (!a.tpm_file.empty()) {
    tpm_in = read_table_any(a.tpm_file);
    if (tpm_in->cells != counts.cells || tpm_in->genes != counts.genes)
      fail_input(a.tpm_file, "the TPM table's cells and genes differ from the counts' (", tpm_in->cells.size(), " x ",
                 tpm_in->genes.size(), " against ", counts.cells.size(), " x ", counts.genes.size(), ")");
  }
  CnmfPrepared pr = cnmf_prepare(ctx, counts.X, counts.cells, counts.genes, prep, counts_path,
                                 tpm_in ? &tpm_in->X : nullptr);
  p.make_dirs();
  std::vector<std::string> hvg;
  for (const int64_t j : pr.genes) hvg.push_back(counts.genes[j]);
  std::string gl;
  for (size_t q = 0; q < hvg.size(); ++q) gl += (q ? "\n" : "") + hvg[q];
  write_text_file(p.genes_list(), gl);  // '\n'.join, no final newline, as cNMF
  // cNMF stores the normalised counts as float64 (sparse, or dense with --densify).
  write_h5ad(make_ds(a.densify ? Matrix(to_dense_d(pr.norm_counts)) : Matrix(to_csr_d(pr.norm_counts)), counts.cells, hvg),
             p.normalized_counts());
  if (a.densify) {
    DenseD t = to_dense_d(pr.tpm);
    DenseF tf(t.n_rows, t.n_cols);
    for (size_t q = 0; q < t.data.size(); ++q) tf.data[q] = static_cast<float>(t.data[q]);
    write_h5ad(make_ds(Matrix(std::move(tf)), counts.cells, counts.genes), p.tpm());
  } else {
    write_h5ad(make_ds(Matrix(std::move(pr.tpm)), counts.cells, counts.genes), p.tpm());
  }
  DenseD st(static_cast<int64_t>(pr.tpm_mean.size()), 2);
  for (size_t j = 0; j < pr.tpm_mean.size(); ++j) st(j, 0) = pr.tpm_mean[j], st(j, 1) = pr.tpm_std[j];
  write_df_npz(p.tpm_stats(), counts.genes, false, {"__mean", "__std"}, false, st, NpzDtype::f64);
  // Replicates: itertools.product(ks as given, range(n_iter)) with numpy's seeds, as cNMF.
  uint64_t seed;
  if (a.seed) {
    seed = *a.seed;
  } else {
    std::random_device rd;
    seed = rd() & 0x7fffffffu;
    log::info("cnmf prepare: no --seed given; drew seed " + std::to_string(seed) + " (pass --seed to reproduce)");
  }
  std::vector<int> ks;  // cNMF keeps the order given; repeated k would repeat replicates: refused
  std::set<int> seen;
  for (const int k : a.components) {
    if (!seen.insert(k).second) fail_input("-k", "k = ", k, " is given twice");
    ks.push_back(k);
  }
  const auto seeds = nmf_replicate_seeds(seed, static_cast<int64_t>(ks.size()) * a.n_iter);
  std::vector<PyValue> rows;
  std::vector<std::string> idx;
  size_t q = 0;
  for (const int k : ks)
    for (int it = 0; it < a.n_iter; ++it, ++q) {
      rows.push_back(PyValue::of(static_cast<int64_t>(k)));
      rows.push_back(PyValue::of(static_cast<int64_t>(it)));
      rows.push_back(PyValue::of(static_cast<int64_t>(seeds[q])));
      rows.push_back(PyValue::of_bool(false));
      idx.push_back(std::to_string(q));
    }
  write_df_npz_objects(p.replicate_params(), idx, true, {"n_components", "iter", "nmf_seed", "completed"}, false,
                       static_cast<int64_t>(seeds.size()), rows);
  const char* solver = loss == NmfLoss::frobenius ? "cd" : "mu";  // as cNMF
  write_flat_yaml(p.run_params(), {{"alpha_H", "0.0"},
                                   {"alpha_W", "0.0"},
                                   {"l1_ratio", "0.0"},
                                   {"beta_loss", nmf_loss_name(loss)},
                                   {"solver", solver},
                                   {"tol", py_float_repr(a.tol)},
                                   {"max_iter", std::to_string(a.max_nmf_iter)},
                                   {"init", a.init}});
  log::info("cnmf prepare: " + std::to_string(hvg.size()) + " genes, " + std::to_string(counts.X.n_rows) + " cells, " +
            std::to_string(seeds.size()) + " replicates");
}

// ---- factorize ---------------------------------------------------------------------------------

void cnmf_factorize_step(const Context& ctx, const CnmfPaths& p, const CnmfFactorizeArgs& a) {
  if (a.total_workers < 1 || a.worker_index < 0 || a.worker_index >= a.total_workers)
    fail_input("--worker-index", "must be in [0, --total-workers) (got ", a.worker_index, " of ", a.total_workers, ")");
  const auto reps = read_replicates(p);
  RunParams rp = read_run_params(p);
  rp.nmf.gpu_tf32 = a.tf32;
  const CountTable nc = load_h5ad_x(p.normalized_counts());
  std::map<int, std::vector<Replicate>> by_k;
  int64_t skipped = 0;
  for (size_t i = 0; i < reps.size(); ++i) {
    if ((static_cast<int64_t>(i) - a.worker_index) % a.total_workers != 0) continue;
    const Replicate& r = reps[i];
    if (a.skip_completed_runs && (r.completed || fs::exists(p.iter_spectra(r.k, r.iter)))) {
      ++skipped;
      continue;
    }
    by_k[r.k].push_back(r);
  }
  if (skipped) log::info("cnmf factorize: skipped " + std::to_string(skipped) + " completed replicates");
  // Batches: on the CPU every replicate of a k in one batch (one read of X serves them all); on the
  // GPU batches of R replicates with R * k ~ gpu_batch_rk per device (`cnmf bench`'s size), or
  // --gpu-batch replicates.
  const bool gpu = ctx.backend() == Backend::cuda;
  const int devices = std::max<int>(1, static_cast<int>(a.gpus.size()));
  struct Job {
    int k;
    std::vector<Replicate> reps;
  };
  std::vector<Job> batches;
  int64_t max_rk = 0;
  for (const auto& [k, jobs] : by_k) {
    const size_t per = !gpu ? jobs.size()
                       : a.gpu_batch > 0 ? static_cast<size_t>(a.gpu_batch)
                                         : static_cast<size_t>(std::max(1, a.gpu_batch_rk * devices / k));
    for (size_t q = 0; q < jobs.size(); q += per) {
      const auto first = jobs.begin() + static_cast<std::ptrdiff_t>(q);
      batches.push_back({k, std::vector<Replicate>(first, first + static_cast<std::ptrdiff_t>(std::min(per, jobs.size() - q)))});
      max_rk = std::max<int64_t>(max_rk, static_cast<int64_t>(batches.back().reps.size()) * k);
    }
  }
  if (batches.empty()) return;
  double x_sum = 0;
  for (const float v : nc.X.data) x_sum += v;
  const char* pe = std::getenv("SCURRY_NMF_BATCH_TIMES");
  const bool prof = pe && std::string(pe) == "1";
  // spare: a done-with host W whose storage the random init reuses (nmf_fit_gpu_batches).
  auto make = [&](int b, std::vector<float>& spare) {
    const auto t0 = std::chrono::steady_clock::now();
    const Job& jb = batches[b];
    std::vector<uint64_t> seeds;
    for (const auto& j : jb.reps) seeds.push_back(j.seed);
    NmfBatch nb = rp.init == "nndsvd" ? nmf_nndsvd_init(ctx, nc.X, jb.k, seeds)
                                      : nmf_random_init(nc.X, jb.k, seeds, ctx.threads(), x_sum, &spare);
    if (prof)
      std::fprintf(stderr, "[cnmf factorize] batch %d init %.3f s\n", b,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return nb;
  };
  auto last = std::chrono::steady_clock::now();
  auto write = [&](int b, const NmfResult& r) {
    const auto now = std::chrono::steady_clock::now();
    const double secs = std::chrono::duration<double>(now - last).count();  // this batch (the first: + X's layout)
    last = now;
    const Job& jb = batches[b];
    int lo = rp.nmf.max_iter, hi = 0;
    const std::vector<std::string> comps = numbered(jb.k);
    parallel_for(ctx.threads(), static_cast<int64_t>(jb.reps.size()), [&](int64_t q) {  // one file each
      write_df_npz(p.iter_spectra(jb.k, jb.reps[q].iter), comps, true, nc.genes, false,
                   to_d(r.f.h_of(static_cast<int>(q))), NpzDtype::f64);
    });
    for (size_t q = 0; q < jb.reps.size(); ++q) lo = std::min(lo, r.n_iter[q]), hi = std::max(hi, r.n_iter[q]);
    log::info("cnmf factorize: k=" + std::to_string(jb.k) + ", " + std::to_string(jb.reps.size()) + " replicates, " +
              std::to_string(lo) + ".." + std::to_string(hi) + " iterations (batch " + std::to_string(b + 1) + "/" +
              std::to_string(batches.size()) + ", " + std::to_string(secs) + " s)");
  };
  if (gpu && (a.gpus.empty() || (a.gpus.size() == 1 && a.gpus[0] == a.cuda.device))) {
    // One device: X laid out once, each batch's init drawn while the previous one fits.
    nmf_fit_gpu_batches(ctx, nc.X, static_cast<int>(batches.size()), max_rk, make, rp.nmf,
                        [&](int b, NmfResult& r) { write(b, r); });
    return;
  }
  for (int b = 0; b < static_cast<int>(batches.size()); ++b) {
    std::vector<float> none;
    const NmfResult r = gpu ? nmf_fit_gpus(nc.X, make(b, none), rp.nmf, a.gpus, a.cuda) : nmf_fit(ctx, nc.X, make(b, none), rp.nmf);
    write(b, r);
  }
}

// ---- combine -----------------------------------------------------------------------------------

void cnmf_combine_step(const CnmfPaths& p, const std::vector<int>& asked, bool skip_missing_files, int threads) {
  const auto reps = read_replicates(p);
  const std::vector<int> ks = ks_of(reps, asked);
  // One k per task (its replicates read, merged and deflated: at 2.4M cells x 30 k that was 105 s on
  // one thread); errors and the log lines reported in k order.
  std::vector<std::exception_ptr> err(ks.size());
  std::vector<std::string> said(ks.size());
  parallel_for(std::max(1, threads), static_cast<int64_t>(ks.size()), [&](int64_t q) {
    try {
      const int k = ks[q];
      std::vector<Replicate> rk;
      for (const auto& r : reps)
        if (r.k == k) rk.push_back(r);
      std::stable_sort(rk.begin(), rk.end(), [](const Replicate& a, const Replicate& b) { return a.iter < b.iter; });
      std::vector<DenseD> parts;
      std::vector<std::string> labels, genes;
      for (const auto& r : rk) {
        const std::string f = p.iter_spectra(k, r.iter);
        if (!fs::exists(f)) {
          if (skip_missing_files) continue;
          fail_input(f, "missing: run `cnmf factorize` for every worker, or combine with --skip-missing-files");
        }
        DfNpz t = read_df_npz(f);
        if (t.data.n_rows != k) fail_input(f, "holds ", t.data.n_rows, " spectra, not k = ", k);
        if (genes.empty()) genes = t.columns;
        else if (t.columns != genes) fail_input(f, "genes differ from the other replicates'");
        for (int c = 0; c < k; ++c) labels.push_back("iter" + std::to_string(r.iter) + "_topic" + std::to_string(c + 1));
        parts.push_back(std::move(t.data));
      }
      if (parts.empty()) fail_input(p.iter_spectra(k, 0), "no replicate spectra for k = ", k, " exist");
      DenseD merged(static_cast<int64_t>(parts.size()) * k, static_cast<int64_t>(genes.size()));
      for (size_t q2 = 0; q2 < parts.size(); ++q2)
        std::copy(parts[q2].data.begin(), parts[q2].data.end(), merged.data.begin() + static_cast<std::ptrdiff_t>(q2 * parts[q2].data.size()));
      const size_t n_merged = parts.size();
      std::vector<DenseD>().swap(parts);
      write_df_npz(p.merged_spectra(k), labels, false, genes, false, merged, NpzDtype::f64);
      said[q] = "cnmf combine: k=" + std::to_string(k) + ", " + std::to_string(n_merged) + " replicates";
    } catch (...) {
      err[q] = std::current_exception();
    }
  });
  for (size_t q = 0; q < ks.size(); ++q) {
    if (err[q]) std::rethrow_exception(err[q]);
    log::info(said[q]);
  }
}

// ---- consensus ---------------------------------------------------------------------------------

std::map<int, DenseF> cnmf_consensus_step(const Context& ctx, const CnmfPaths& p, const CnmfConsensusArgs& a) {
  if (!(a.local_density_threshold > 0)) fail_input("--local-density-threshold", "must be > 0 (2.0: no filter)");
  const auto reps = read_replicates(p);
  const RunParams rp = read_run_params(p);
  CnmfConsensusOptions cons;
  cons.density_threshold = a.local_density_threshold;
  cons.local_neighborhood_size = a.local_neighborhood_size;
  cons.refit = rp.nmf;
  cons.keep_filtered_spectra = a.show_clustering;
  EnvLaps laps("SCURRY_CNMF_TIMES", "cnmf consensus");
  const CountTable nc = load_h5ad_x(p.normalized_counts());
  const CountTable tpm = load_h5ad_x(p.tpm());
  laps.lap("read norm_counts and tpm");
  const DfNpz ts = read_df_npz(p.tpm_stats());
  if (ts.data.n_rows != tpm.X.n_cols || ts.data.n_cols < 2)
    fail_input(p.tpm_stats(), "holds ", ts.data.n_rows, " genes but the TPM matrix has ", tpm.X.n_cols);
  std::vector<double> mean(ts.data.n_rows), sd(ts.data.n_rows);
  for (int64_t j = 0; j < ts.data.n_rows; ++j) mean[j] = ts.data(j, 0), sd[j] = ts.data(j, 1);
  const std::vector<std::string> hvg = read_genes_list(p);
  const std::vector<int64_t> hvg_pos = gene_positions(tpm.genes, hvg, p.genes_list());
  const std::string dt = cnmf_dt_tag(a.local_density_threshold);
  std::map<int, DenseF> usages;
  const std::vector<int> ks = ks_of(reps, a.components);
  std::unique_ptr<NmfGpuRefits> gpu;
  if (cnmf_refits_on_device(ctx, cons.refit) && !ks.empty())
    gpu = std::make_unique<NmfGpuRefits>(ctx, nc.X, cons.refit, *std::max_element(ks.begin(), ks.end()));
  for (const int k : ks) {
    std::vector<std::string> labels, genes;
    const DenseF merged = read_merged(p, k, &labels, &genes);
    if (genes != nc.genes) fail_input(p.merged_spectra(k), "the spectra's genes differ from the normalised counts'");
    laps.lap("read merged");
    CnmfConsensus c = cnmf_consensus(ctx, merged, k, nc.X, cons, gpu.get());
    laps.lap("consensus");
    {
      DenseD ld(static_cast<int64_t>(c.local_density.size()), 1);
      std::copy(c.local_density.begin(), c.local_density.end(), ld.data.begin());
      write_df_npz(p.local_density_cache(k), labels, false, {"local_density"}, false, ld, NpzDtype::f64);
    }
    // Spectra in TPM units (all genes) from the row-normalised usages; z-score coefficients from the
    // usages; then the final usages refit on the unit-variance TPM of the factorised genes.
    const DenseF spectra_tpm = cnmf_gene_spectra_tpm(ctx, c.usages, tpm.X, cons.refit);
    laps.lap("gene spectra tpm");
    const DenseD score = cnmf_gene_spectra_score(ctx, c.usages, tpm.X, mean, sd);
    laps.lap("gene spectra score");
    DenseF final_usages = cnmf_refit_usages_tpm(ctx, tpm.X, hvg_pos, spectra_tpm, sd, cons.refit);
    laps.lap("usages refit on tpm");
    const DenseD spectra_d = to_d(c.spectra);
    // The files are written side by side (at 2.4M cells the usages' .npz and .txt took ~20 s one after
    // the other); every writer is joined before the next k or an error leaves this scope.
    {
      std::vector<std::future<void>> writes;
      const auto bg = [&writes](std::function<void()> fn) { writes.push_back(std::async(std::launch::async, std::move(fn))); };
      bg([&] { write_df_npz(p.consensus_spectra(k, dt), numbered(k), true, nc.genes, false, spectra_d, NpzDtype::f64); });
      bg([&] { write_df_npz(p.consensus_usages(k, dt), nc.cells, false, numbered(k), true, final_usages); });
      bg([&] { write_tsv_table(p.consensus_spectra_txt(k, dt), numbered(k), nc.genes, spectra_d); });
      bg([&] { write_tsv_table(p.consensus_usages_txt(k, dt), nc.cells, numbered(k), final_usages); });
      bg([&] { write_df_npz(p.gene_spectra_tpm(k, dt), numbered(k), true, tpm.genes, false, spectra_tpm); });
      bg([&] { write_tsv_table(p.gene_spectra_tpm_txt(k, dt), numbered(k), tpm.genes, spectra_tpm); });
      bg([&] { write_df_npz(p.gene_spectra_score(k, dt), numbered(k), true, tpm.genes, false, score, NpzDtype::f64); });
      bg([&] { write_tsv_table(p.gene_spectra_score_txt(k, dt), numbered(k), tpm.genes, score); });
      if (a.show_clustering)
        bg([&] {
          write_text_file(p.clustering_plot(k, dt),
                          encode_png(cnmf_clustergram_canvas(c.filtered_l2, c.labels, c.local_density, a.local_density_threshold)));
        });
      if (a.build_reference)
        bg([&] {
          const DenseD ref = cnmf_starcat_reference(to_d(spectra_tpm), sd, hvg_pos);
          write_df_npz(p.starcat_spectra(k, dt), numbered(k, "GEP"), false, hvg, false, ref, NpzDtype::f64);
          write_tsv_table(p.starcat_spectra_txt(k, dt), numbered(k, "GEP"), hvg, ref);
        });
      std::exception_ptr first;
      for (auto& w : writes) {
        try {
          w.get();
        } catch (...) {
          if (!first) first = std::current_exception();
        }
      }
      if (first) std::rethrow_exception(first);
    }
    laps.lap("write");
    int64_t kept = 0;
    for (const auto v : c.kept) kept += v;
    log::info("cnmf consensus: k=" + std::to_string(k) + ", " + std::to_string(kept) + "/" +
              std::to_string(c.kept.size()) + " spectra kept, stability " + py_float_repr(c.stability) +
              ", error " + py_float_repr(c.prediction_error));
    usages[k] = std::move(final_usages);
  }
  return usages;
}

// ---- k_selection_plot --------------------------------------------------------------------------

void cnmf_k_selection_step(const Context& ctx, const CnmfPaths& p, double local_neighborhood_size) {
  const auto reps = read_replicates(p);
  CnmfConsensusOptions cons;
  cons.refit = read_run_params(p).nmf;
  cons.skip_density = true;
  cons.local_neighborhood_size = local_neighborhood_size;
  const double recorded_threshold = 0.5;  // cNMF records consensus()'s default here
  EnvLaps laps("SCURRY_CNMF_TIMES", "cnmf k_selection_plot");
  const CountTable nc = load_h5ad_x(p.normalized_counts());
  laps.lap("read norm_counts");
  const std::vector<int> ks = ks_of(reps, {});
  // On a CUDA context the normalised counts go to the device once for all k's refits.
  std::unique_ptr<NmfGpuRefits> gpu;
  if (cnmf_refits_on_device(ctx, cons.refit) && !ks.empty()) {
    gpu = std::make_unique<NmfGpuRefits>(ctx, nc.X, cons.refit, *std::max_element(ks.begin(), ks.end()));
    laps.lap("norm_counts on the device");
  }
  std::vector<double> stab, err;
  DenseD st(static_cast<int64_t>(ks.size()), 4);
  std::vector<std::string> idx;
  for (size_t q = 0; q < ks.size(); ++q) {
    const CnmfConsensus c = cnmf_consensus(ctx, read_merged(p, ks[q], nullptr, nullptr), ks[q], nc.X, cons, gpu.get());
    stab.push_back(c.stability);
    err.push_back(c.prediction_error);
    st(q, 0) = ks[q], st(q, 1) = recorded_threshold, st(q, 2) = c.stability, st(q, 3) = c.prediction_error;
    idx.push_back(std::to_string(q));
  }
  write_df_npz(p.k_selection_stats(), idx, true, {"k", "local_density_threshold", "silhouette", "prediction_error"}, false,
               st, NpzDtype::f64);
  write_text_file(p.k_selection_plot(), encode_png(k_selection_canvas(ks, stab, err)));
  log::info("cnmf k_selection_plot: " + p.k_selection_plot());
}

CnmfKSelectionStats read_k_selection_stats(const std::string& path) {
  std::vector<std::string> cols;
  DenseD v;
  if (ends_with(path, ".npz")) {
    DfNpz d = read_df_npz(path);
    cols = std::move(d.columns), v = std::move(d.data);
  } else {
    TsvTable t = read_tsv_table(path);
    cols = std::move(t.columns), v = std::move(t.values);
  }
  auto col = [&](std::initializer_list<const char*> names) -> int64_t {
    for (const char* n : names)
      for (size_t c = 0; c < cols.size(); ++c)
        if (cols[c] == n) return static_cast<int64_t>(c);
    fail_input(path, "no column '", *names.begin(), "' (expected cNMF's k_selection_stats: k, silhouette, prediction_error)");
  };
  const int64_t ck = col({"k"}), cs = col({"silhouette", "stability"}), ce = col({"prediction_error"});
  CnmfKSelectionStats out;
  for (int64_t r = 0; r < v.n_rows; ++r) {
    out.k.push_back(static_cast<int>(v(r, ck)));
    out.stability.push_back(v(r, cs));
    out.prediction_error.push_back(v(r, ce));
  }
  return out;
}

}  // namespace scurry
