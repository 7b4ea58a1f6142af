// scurry: starCAT's projection (see starcat.hpp).
#include "nmf/starcat.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
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

namespace {
constexpr int64_t kStatRows = 16384;  // cells per partial of the query's gene statistics
}  // namespace

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

DenseF nnls_fixed_spectra(const Context& ctx, const CsrF& X, const DenseD& H, int64_t rows_per_block) {
  const int64_t n = X.n_rows, k = H.n_rows, g = H.n_cols;
  if (X.n_cols != g) fail("nnls_fixed_spectra: X has ", X.n_cols, " genes, the spectra ", g);
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
      for (int64_t p = X.indptr[i]; p < X.indptr[i + 1]; ++p) {
        const double v = X.data[p];
        const double* h = Ht.row(X.indices[p]);
        for (int64_t a = 0; a < k; ++a) b[a] += v * h[a];
      }
      nnls_active_set(G.data.data(), static_cast<int>(k), b.data(), tol, w.data(), z.data(), P.data(), passive.data(),
                      L.data());
      for (int64_t a = 0; a < k; ++a) W(i, a) = static_cast<float>(w[a]);
    }
  });
  return W;
}

StarcatResult starcat_fit(const Context& ctx, const CsrF& query, const std::vector<std::string>& query_genes,
                          const DenseD& reference, const std::vector<std::string>& reference_genes,
                          const StarcatOptions& opt, const std::string& where) {
  const int64_t k = reference.n_rows;
  if (k < 1) fail_input(where, "the reference holds no programs");
  for (int64_t p = 0; p < query.nnz(); ++p)
    if (!(query.data[p] >= 0)) fail_input(where, "the query has the value ", query.data[p], "; starCAT needs non-negative counts");
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
  if (r.genes.empty()) fail_input(where, "no gene of the reference is in the query (compare their var names)");
  const int64_t h = static_cast<int64_t>(r.genes.size());
  // query[:, shared genes], CSR: a count pass and a fill pass over fixed row blocks. The fit's columns
  // are the shared genes in the query's column order (a row's entries keep their order: no sort per
  // cell); the spectra's columns follow (col_ref). r.genes stays sorted by name, as starCAT's.
  std::vector<int64_t> by_query(static_cast<size_t>(h));
  for (int64_t q = 0; q < h; ++q) by_query[q] = q;
  std::sort(by_query.begin(), by_query.end(), [&](int64_t a, int64_t b) { return qj[a] < qj[b]; });
  std::vector<int32_t> pos(query.n_cols, -1);
  std::vector<int64_t> col_ref(static_cast<size_t>(h));
  for (int64_t t = 0; t < h; ++t) pos[qj[by_query[t]]] = static_cast<int32_t>(t), col_ref[t] = rj[by_query[t]];
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
      for (int64_t p = query.indptr[i]; p < query.indptr[i + 1]; ++p)
        if (pos[query.indices[p]] >= 0) X.indices[o] = pos[query.indices[p]], X.data[o] = query.data[p], ++o;
    }
  });
  if (opt.scale) {
    // sklearn's scale(with_mean=False): population std per gene (0 -> 1); sums and sums of squares
    // over fixed row blocks added in block order (the same bits for any thread count).
    const RowBlocks sb = RowBlocks::uniform(X.n_rows, kStatRows);
    std::vector<double> acc;
    reduce_blocks(ctx.threads(), sb.n_blocks(), static_cast<size_t>(2 * h), acc, [&](int64_t blk, double* part) {
      for (int64_t p = X.indptr[sb.begin(blk)]; p < X.indptr[sb.end(blk)]; ++p) {
        const double v = X.data[p];
        part[X.indices[p]] += v;
        part[h + X.indices[p]] += v * v;
      }
    });
    std::vector<double> sd(static_cast<size_t>(h));
    int64_t zero = 0;
    const double nn = static_cast<double>(X.n_rows);
    for (int64_t j = 0; j < h; ++j) {
      const double mean = acc[j] / nn;
      sd[j] = std::sqrt(std::max(0.0, acc[h + j] / nn - mean * mean));
      if (sd[j] == 0) sd[j] = 1, ++zero;
    }
    if (zero) log::warn("starCAT: " + std::to_string(zero) + " shared genes have 0 counts in the query; their values stay 0");
    parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t blk) {
      for (int64_t p = X.indptr[rb.begin(blk)]; p < X.indptr[rb.end(blk)]; ++p)
        X.data[p] = static_cast<float>(X.data[p] / sd[X.indices[p]]);
    });
  }
  DenseD H(k, h);
  for (int64_t a = 0; a < k; ++a)
    for (int64_t q = 0; q < h; ++q) H(a, q) = static_cast<double>(static_cast<float>(reference(a, col_ref[q])));
  const auto t0 = std::chrono::steady_clock::now();
  const bool gpu = ctx.backend() == Backend::cuda;
  if (opt.exact) {
    r.usages = gpu ? nnls_fixed_spectra_gpu(ctx, X, H, opt.gpu_rows_per_block) : nnls_fixed_spectra(ctx, X, H, opt.rows_per_block);
  } else {
    NmfOptions mu;
    mu.solver = NmfSolver::mu;
    mu.loss = NmfLoss::frobenius;
    DenseF Hf(k, h);
    for (size_t q = 0; q < H.data.size(); ++q) Hf.data[q] = static_cast<float>(H.data[q]);
    r.usages = nmf_fit_w_fixed_h(ctx, X, Hf, mu, nullptr, gpu);
  }
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
  Dataset d = read_any(query);
  check_counts(d.X, query);
  const CsrF X = to_csr_f(d.X);
  const auto t0 = std::chrono::steady_clock::now();
  StarcatResult r = starcat_fit(ctx, X, d.var.index, ref, ref_genes, opt, query);
  if (opt.normalize)
    for (int64_t i = 0; i < r.usages.n_rows; ++i) {
      double s = 0;
      for (int64_t a = 0; a < r.usages.n_cols; ++a) s += r.usages(i, a);
      for (int64_t a = 0; a < r.usages.n_cols; ++a) r.usages(i, a) = static_cast<float>(s > 0 ? r.usages(i, a) / s : 0.0);
    }
  // starCAT's fit_transform: overlap, scaling, the fit and the normalisation (the read and write apart).
  const double fit_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (ends(out, ".npz")) write_df_npz(out, d.obs.index, false, programs, false, r.usages);
  else write_tsv_table(out, d.obs.index, programs, r.usages);
  log::info("starCAT: " + std::to_string(r.usages.n_rows) + " cells x " + std::to_string(r.usages.n_cols) +
            " programs -> " + out + " (fit " + std::to_string(fit_seconds) + " s: overlap, scaling, normalisation and the solve, " +
            std::to_string(r.solve_seconds) + " s on the " + (ctx.backend() == Backend::cuda ? "GPU" : "CPU") + ")");
}

}  // namespace scurry
