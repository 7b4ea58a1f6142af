// scurry: starCAT's projection (see starcat.hpp).
#include "nmf/starcat.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <map>
#include <unordered_map>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"
#include "io/h5ad.hpp"
#include "io/npz.hpp"
#include "io/read.hpp"
#include "nmf/cnmf_files.hpp"
#include "nmf/cnmf_prepare.hpp"
#include "nmf/nmf.hpp"
#include "nmf/nnls_active_set.hpp"

namespace scurry {

std::vector<double> nnls_gram(const DenseD& G, const std::vector<double>& b) {
  const int k = static_cast<int>(G.n_rows);
  std::vector<double> w(k), z(k), L(static_cast<size_t>(k) * (k + 1) / 2);
  std::vector<int> P(k);
  std::vector<unsigned char> passive(k);
  nnls_active_set(G.data.data(), k, b.data(), nnls_tolerance(G.data.data(), k), w.data(), z.data(), P.data(),
                  passive.data(), L.data());
  return w;
}

DenseD spectra_gram(const DenseD& H) {
  const int64_t k = H.n_rows, g = H.n_cols;
  DenseD G(k, k);
  for (int64_t a = 0; a < k; ++a)
    for (int64_t c = 0; c <= a; ++c) {
      double s = 0;
      for (int64_t j = 0; j < g; ++j) s += H(a, j) * H(c, j);
      G(a, c) = G(c, a) = s;
    }
  return G;
}

namespace {

// The exact NNLS per row i of n: b = H x_i gathered by row(i, Ht, b) (b zeroed, Ht = H^T g x k), then
// the active set; a row block per task (fixed blocks: the same bits for any thread count).
template <class Row>
DenseF nnls_rows(const Context& ctx, int64_t n, const DenseD& H, int64_t rows_per_block, const Row& row) {
  const int64_t k = H.n_rows, g = H.n_cols;
  const DenseD G = spectra_gram(H);
  const double tol = nnls_tolerance(G.data.data(), static_cast<int>(k));
  DenseD Ht(g, k);  // H transposed, for the sparse gather b = H x
  for (int64_t a = 0; a < k; ++a)
    for (int64_t j = 0; j < g; ++j) Ht(j, a) = H(a, j);
  DenseF W(n, k);
  const RowBlocks rb = RowBlocks::uniform(n, std::max<int64_t>(1, rows_per_block));
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t blk) {
    std::vector<double> b(k), w(k), z(k), L(static_cast<size_t>(k * (k + 1) / 2));
    std::vector<int> P(k);
    std::vector<unsigned char> passive(k);
    for (int64_t i = rb.begin(blk); i < rb.end(blk); ++i) {
      std::fill(b.begin(), b.end(), 0.0);
      row(i, Ht, b.data());
      nnls_active_set(G.data.data(), static_cast<int>(k), b.data(), tol, w.data(), z.data(), P.data(), passive.data(),
                      L.data());
      for (int64_t a = 0; a < k; ++a) W(i, a) = static_cast<float>(w[a]);
    }
  });
  return W;
}

// b += v H[:, j] (k terms, float64, unfused on every compiler flag the build uses: -O2, no FMA).
inline void add_column(double* b, const double* h, int64_t k, double v) {
  for (int64_t a = 0; a < k; ++a) b[a] += v * h[a];
}

}  // namespace

DenseF nnls_fixed_spectra(const Context& ctx, const CsrF& X, const DenseD& H, int64_t rows_per_block) {
  if (X.n_cols != H.n_cols) fail("nnls_fixed_spectra: X has ", X.n_cols, " genes, the spectra ", H.n_cols);
  const int64_t k = H.n_rows;
  return nnls_rows(ctx, X.n_rows, H, rows_per_block, [&](int64_t i, const DenseD& Ht, double* b) {
    for (int64_t p = X.indptr[i]; p < X.indptr[i + 1]; ++p) add_column(b, Ht.row(X.indices[p]), k, X.data[p]);
  });
}

DenseF nnls_fixed_spectra_mapped(const Context& ctx, const CsrF& query, const std::vector<int32_t>& map,
                                 const std::vector<double>& sd, const DenseD& H, int64_t rows_per_block) {
  const int64_t k = H.n_rows;
  const bool scale = !sd.empty();
  return nnls_rows(ctx, query.n_rows, H, rows_per_block, [&](int64_t i, const DenseD& Ht, double* b) {
    // The row's mapped entries gathered first without a branch (a quarter of a query's entries are
    // typically outside the fit, interleaved at random: a branch per entry mispredicts), in order.
    thread_local std::vector<int32_t> cj;
    thread_local std::vector<float> cv;
    const int64_t p0 = query.indptr[i], len = query.indptr[i + 1] - p0;
    if (static_cast<int64_t>(cj.size()) < len) cj.resize(static_cast<size_t>(len)), cv.resize(static_cast<size_t>(len));
    int64_t c = 0;
    for (int64_t p = p0; p < p0 + len; ++p) {
      const int32_t j = map[query.indices[p]];
      cj[c] = j, cv[c] = query.data[p];
      c += j >= 0;
    }
    for (int64_t q = 0; q < c; ++q) {
      const float v = scale ? static_cast<float>(cv[q] / sd[cj[q]]) : cv[q];
      add_column(b, Ht.row(cj[q]), k, v);
    }
  });
}

int64_t starcat_first_bad_value(const Context& ctx, const CsrF& query) {
  constexpr int64_t kBlock = int64_t(1) << 16;
  const int64_t nnz = query.nnz(), blocks = (nnz + kBlock - 1) / kBlock;
  std::vector<int64_t> first(static_cast<size_t>(blocks), nnz);
  const float* v = query.data.data();
  parallel_for(ctx.threads(), blocks, [&](int64_t blk) {
    const int64_t lo = blk * kBlock, hi = std::min(nnz, lo + kBlock);
    bool ok = true;
    for (int64_t p = lo; p < hi; ++p) ok &= v[p] >= 0.0f;  // branch-free: vectorised
    if (ok) return;
    for (int64_t p = lo; p < hi; ++p)
      if (!(v[p] >= 0.0f)) {
        first[blk] = p;
        return;
      }
  });
  for (const int64_t p : first)
    if (p < nnz) return p;
  return nnz;
}

void starcat_bad_value(const std::string& where, float v) {
  fail_input(where, "the query has the value ", v, "; starCAT needs non-negative counts");
}

std::vector<double> starcat_gene_sums(const Context& ctx, const CsrF& query, const std::vector<int32_t>& map, int64_t h) {
  const RowBlocks sb = RowBlocks::uniform(query.n_rows, kStarcatStatRows);
  std::vector<double> acc;
  // Entries outside the fit go to two spare slots (2h, 2h + 1; dropped): no branch per entry.
  reduce_blocks(ctx.threads(), sb.n_blocks(), static_cast<size_t>(2 * h + 2), acc, [&](int64_t blk, double* part) {
    for (int64_t p = query.indptr[sb.begin(blk)]; p < query.indptr[sb.end(blk)]; ++p) {
      const int32_t j = map[query.indices[p]];
      const int64_t s1 = j >= 0 ? j : 2 * h, s2 = j >= 0 ? h + j : 2 * h + 1;
      const double v = query.data[p];
      part[s1] += v;
      part[s2] += v * v;
    }
  });
  acc.resize(static_cast<size_t>(2 * h));
  return acc;
}

std::vector<double> starcat_sd(const std::vector<double>& sums, int64_t h, int64_t n_cells) {
  std::vector<double> sd(static_cast<size_t>(h));
  int64_t zero = 0;
  const double nn = static_cast<double>(n_cells);
  for (int64_t j = 0; j < h; ++j) {
    const double mean = sums[j] / nn;
    sd[j] = std::sqrt(std::max(0.0, sums[h + j] / nn - mean * mean));
    if (sd[j] == 0) sd[j] = 1, ++zero;
  }
  if (zero) log::warn("starCAT: " + std::to_string(zero) + " shared genes have 0 counts in the query; their values stay 0");
  return sd;
}

StarcatResult starcat_fit(const Context& ctx, const CsrF& query, const std::vector<std::string>& query_genes,
                          const DenseD& reference, const std::vector<std::string>& reference_genes,
                          const StarcatOptions& opt, const std::string& where) {
  const int64_t k = reference.n_rows;
  if (k < 1) fail_input(where, "the reference holds no programs");
  const bool gpu = ctx.backend() == Backend::cuda;
  const bool device_check = gpu && opt.exact;  // starcat_fit_gpu checks the values itself
  auto check_values = [&] {
    const int64_t bad = starcat_first_bad_value(ctx, query);
    if (bad < query.nnz()) starcat_bad_value(where, query.data[bad]);
  };
  // Reference genes without NaN, as float32 (starCAT's astype(np.float32)).
  std::map<std::string, int64_t> ref_col;
  int64_t dropped = 0;
  for (int64_t j = 0; j < reference.n_cols; ++j) {
    bool nan = false;
    for (int64_t a = 0; a < k; ++a) nan |= std::isnan(reference(a, j));
    if (nan) ++dropped;
    else ref_col.emplace(reference_genes[j], j);
  }
  if (dropped) log::warn("starCAT: left out " + std::to_string(dropped) + " reference genes with NaN in a program");
  std::unordered_map<std::string, int64_t> qcol;
  for (int64_t j = static_cast<int64_t>(query_genes.size()) - 1; j >= 0; --j) qcol[query_genes[j]] = j;
  StarcatResult r;
  std::vector<int64_t> qj, rj;
  for (const auto& [name, j] : ref_col) {  // std::map: sorted by name, as starCAT's sorted(set(...))
    const auto it = qcol.find(name);
    if (it == qcol.end()) continue;
    r.genes.push_back(name);
    qj.push_back(it->second);
    rj.push_back(j);
  }
  log::info("starCAT: " + std::to_string(r.genes.size()) + " out of " + std::to_string(ref_col.size()) +
            " genes in the reference overlap with the query");
  if (r.genes.empty()) {
    check_values();  // a bad value is reported first, as before
    fail_input(where, "no gene of the reference is in the query (compare their var names)");
  }
  const int64_t h = static_cast<int64_t>(r.genes.size());
  // query[:, shared genes]: the fit's columns are the shared genes in the query's column order (a
  // row's entries keep their order: no sort per cell), map[query column] = fit column or -1; the
  // spectra's columns follow (col_ref). r.genes stays sorted by name, as starCAT's.
  std::vector<int64_t> by_query(static_cast<size_t>(h));
  for (int64_t q = 0; q < h; ++q) by_query[q] = q;
  std::sort(by_query.begin(), by_query.end(), [&](int64_t a, int64_t b) { return qj[a] < qj[b]; });
  std::vector<int32_t> pos(query.n_cols, -1);
  std::vector<int64_t> col_ref(static_cast<size_t>(h));
  for (int64_t t = 0; t < h; ++t) pos[qj[by_query[t]]] = static_cast<int32_t>(t), col_ref[t] = rj[by_query[t]];
  DenseD H(k, h);
  for (int64_t a = 0; a < k; ++a)
    for (int64_t q = 0; q < h; ++q) H(a, q) = static_cast<double>(static_cast<float>(reference(a, col_ref[q])));
  if (device_check) {  // the exact fit on the device from the raw query (its phases timed there)
    r.usages = starcat_fit_gpu(ctx, query, pos, h, H, opt.scale, opt.gpu_rows_per_block, where, r);
    return r;
  }
  check_values();
  // sklearn's scale(with_mean=False): population std per gene (0 -> 1).
  const std::vector<double> sd = opt.scale ? starcat_sd(starcat_gene_sums(ctx, query, pos, h), h, query.n_rows)
                                           : std::vector<double>();
  if (opt.exact) {  // straight from the query through the map: no compacted copy
    const auto t0 = std::chrono::steady_clock::now();
    r.usages = nnls_fixed_spectra_mapped(ctx, query, pos, sd, H, opt.rows_per_block);
    r.solve_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  // starCAT's mu iterations (nmf_fit_w_fixed_h) take a CSR: the compacted, scaled copy, a count pass
  // and a fill pass over fixed row blocks.
  CsrF X;
  X.n_rows = query.n_rows, X.n_cols = h;
  X.indptr.assign(query.n_rows + 1, 0);
  const RowBlocks rb = RowBlocks::uniform(query.n_rows, std::max<int64_t>(1, opt.rows_per_block));
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t blk) {
    for (int64_t i = rb.begin(blk); i < rb.end(blk); ++i) {
      int64_t c = 0;
      for (int64_t p = query.indptr[i]; p < query.indptr[i + 1]; ++p) c += pos[query.indices[p]] >= 0;
      X.indptr[i + 1] = c;
    }
  });
  for (int64_t i = 0; i < query.n_rows; ++i) X.indptr[i + 1] += X.indptr[i];
  X.indices.resize(static_cast<size_t>(X.indptr[query.n_rows]));
  X.data.resize(X.indices.size());
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t blk) {
    for (int64_t i = rb.begin(blk); i < rb.end(blk); ++i) {
      int64_t o = X.indptr[i];
      for (int64_t p = query.indptr[i]; p < query.indptr[i + 1]; ++p) {
        const int32_t j = pos[query.indices[p]];
        if (j < 0) continue;
        X.indices[o] = j;
        X.data[o++] = opt.scale ? static_cast<float>(query.data[p] / sd[j]) : query.data[p];
      }
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  NmfOptions mu;
  mu.solver = NmfSolver::mu;
  mu.loss = NmfLoss::frobenius;
  DenseF Hf(k, h);
  for (size_t q = 0; q < H.data.size(); ++q) Hf.data[q] = static_cast<float>(H.data[q]);
  r.usages = nmf_fit_w_fixed_h(ctx, X, Hf, mu, nullptr, gpu);
  r.solve_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void starcat_project_files(const Context& ctx, const std::string& reference, const std::string& query,
                           const std::string& out, const StarcatOptions& opt) {
  auto ends = [](const std::string& s, const std::string& e) {
    return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
  };
  DenseD ref;
  std::vector<std::string> programs, ref_genes;
  if (ends(reference, ".npz")) {
    DfNpz d = read_df_npz(reference);
    ref = std::move(d.data), programs = std::move(d.index), ref_genes = std::move(d.columns);
  } else {
    TsvTable t = read_tsv_table(reference);
    ref = std::move(t.values), programs = std::move(t.index), ref_genes = std::move(t.columns);
  }
  // The device's one-time setup (pinned staging) on another thread while the query is read.
  std::future<void> warm;
  if (ctx.backend() == Backend::cuda && opt.exact) warm = std::async(std::launch::async, [&] { starcat_gpu_warm_up(ctx); });
  Dataset d = read_any(query);
  if (warm.valid()) warm.get();
  check_counts(d.X, query);
  const CsrF X = to_csr_f(d.X);
  const auto t0 = std::chrono::steady_clock::now();
  StarcatResult r = starcat_fit(ctx, X, d.var.index, ref, ref_genes, opt, query);
  if (opt.normalize) {  // per cell: a row block per task
    const RowBlocks nb = RowBlocks::uniform(r.usages.n_rows, 8192);
    parallel_for(ctx.threads(), nb.n_blocks(), [&](int64_t blk) {
      for (int64_t i = nb.begin(blk); i < nb.end(blk); ++i) {
        double s = 0;
        for (int64_t a = 0; a < r.usages.n_cols; ++a) s += r.usages(i, a);
        for (int64_t a = 0; a < r.usages.n_cols; ++a)
          r.usages(i, a) = static_cast<float>(s > 0 ? r.usages(i, a) / s : 0.0);
      }
    });
  }
  // starCAT's fit_transform: overlap, scaling, the fit and the normalisation (the read and write apart).
  const double fit_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (ends(out, ".npz")) write_df_npz(out, d.obs.index, false, programs, false, r.usages);
  else write_tsv_table(out, d.obs.index, programs, r.usages);
  log::info("starCAT: " + std::to_string(r.usages.n_rows) + " cells x " + std::to_string(r.usages.n_cols) +
            " programs -> " + out + " (fit " + std::to_string(fit_seconds) + " s: overlap, scaling, normalisation and the solve, " +
            std::to_string(r.solve_seconds) + " s on the " + (ctx.backend() == Backend::cuda ? "GPU" : "CPU") + ")" +
            (opt.exact && ctx.backend() == Backend::cuda
                 ? "; of the fit on the device: upload " + std::to_string(r.upload_seconds) + " s, check and gene sums " +
                       std::to_string(r.prep_seconds) + " s (" + (r.device_prep ? "device" : "host threads") +
                       "), solve and download " + std::to_string(r.solve_seconds) + " s"
                 : std::string()));
}

}  // namespace scurry
