// scurry: starCAT's projection (see starcat.hpp).
#include "nmf/starcat.hpp"

#include <algorithm>
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

namespace scurry {

namespace {

// Solves G_PP z = b_P by Cholesky (G_PP positive definite on a passive set of independent programs).
// Returns false when G_PP is singular to working precision.
bool solve_sub(const DenseD& G, const std::vector<double>& b, const std::vector<int>& P, std::vector<double>& z) {
  const size_t m = P.size();
  std::vector<double> L(m * m, 0.0);
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j <= i; ++j) {
      double s = G(P[i], P[j]);
      for (size_t q = 0; q < j; ++q) s -= L[i * m + q] * L[j * m + q];
      if (i == j) {
        if (!(s > 1e-14 * std::max(1.0, G(P[i], P[i])))) return false;
        L[i * m + i] = std::sqrt(s);
      } else {
        L[i * m + j] = s / L[j * m + j];
      }
    }
  z.assign(m, 0.0);
  for (size_t i = 0; i < m; ++i) {
    double s = b[P[i]];
    for (size_t q = 0; q < i; ++q) s -= L[i * m + q] * z[q];
    z[i] = s / L[i * m + i];
  }
  for (size_t i = m; i-- > 0;) {
    double s = z[i];
    for (size_t q = i + 1; q < m; ++q) s -= L[q * m + i] * z[q];
    z[i] = s / L[i * m + i];
  }
  return true;
}

}  // namespace

std::vector<double> nnls_gram(const DenseD& G, const std::vector<double>& b) {
  const int k = static_cast<int>(G.n_rows);
  std::vector<double> w(k, 0.0), z;
  std::vector<char> passive(k, 0);
  double scale = 0;
  for (int i = 0; i < k; ++i) scale = std::max(scale, G(i, i));
  const double tol = 1e-12 * std::max(1.0, scale) * k;
  for (int outer = 0; outer < 3 * k + 10; ++outer) {
    // Gradient of the objective's negative half: b - G w.
    int best = -1;
    double gmax = tol;
    for (int j = 0; j < k; ++j) {
      if (passive[j]) continue;
      double g = b[j];
      for (int q = 0; q < k; ++q) g -= G(j, q) * w[q];
      if (g > gmax) gmax = g, best = j;
    }
    if (best < 0) break;
    passive[best] = 1;
    for (int inner = 0; inner < 3 * k + 10; ++inner) {
      std::vector<int> P;
      for (int j = 0; j < k; ++j)
        if (passive[j]) P.push_back(j);
      if (!solve_sub(G, b, P, z)) {  // dependent programs: drop the newest and stop growing
        passive[best] = 0;
        return w;
      }
      bool feasible = true;
      for (const double v : z) feasible &= v > 0;
      if (feasible) {
        for (size_t q = 0; q < P.size(); ++q) w[P[q]] = z[q];
        break;
      }
      double alpha = 1;
      for (size_t q = 0; q < P.size(); ++q)
        if (z[q] <= 0) alpha = std::min(alpha, w[P[q]] / (w[P[q]] - z[q]));
      for (size_t q = 0; q < P.size(); ++q) {
        w[P[q]] += alpha * (z[q] - w[P[q]]);
        if (w[P[q]] <= 1e-15 * std::max(1.0, std::fabs(z[q]))) w[P[q]] = 0, passive[P[q]] = 0;
      }
    }
  }
  return w;
}

DenseF nnls_fixed_spectra(const Context& ctx, const CsrF& X, const DenseD& H, int64_t rows_per_block) {
  const int64_t n = X.n_rows, k = H.n_rows, g = H.n_cols;
  if (X.n_cols != g) fail("nnls_fixed_spectra: X has ", X.n_cols, " genes, the spectra ", g);
  DenseD G(k, k);
  for (int64_t a = 0; a < k; ++a)
    for (int64_t c = 0; c <= a; ++c) {
      double s = 0;
      for (int64_t j = 0; j < g; ++j) s += H(a, j) * H(c, j);
      G(a, c) = G(c, a) = s;
    }
  DenseD Ht(g, k);  // H transposed, for the sparse gather b = H x
  for (int64_t a = 0; a < k; ++a)
    for (int64_t j = 0; j < g; ++j) Ht(j, a) = H(a, j);
  DenseF W(n, k);
  const RowBlocks rb = RowBlocks::uniform(n, std::max<int64_t>(1, rows_per_block));
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t blk) {
    std::vector<double> b(k);
    for (int64_t i = rb.begin(blk); i < rb.end(blk); ++i) {
      std::fill(b.begin(), b.end(), 0.0);
      for (int64_t p = X.indptr[i]; p < X.indptr[i + 1]; ++p) {
        const double v = X.data[p];
        const double* h = Ht.row(X.indices[p]);
        for (int64_t a = 0; a < k; ++a) b[a] += v * h[a];
      }
      const std::vector<double> w = nnls_gram(G, b);
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
  // query[:, shared genes], CSR.
  std::vector<int64_t> pos(query.n_cols, -1);
  for (int64_t q = 0; q < h; ++q) pos[qj[q]] = q;
  CsrF X;
  X.n_rows = query.n_rows, X.n_cols = h;
  X.indptr.assign(query.n_rows + 1, 0);
  std::vector<std::pair<int32_t, float>> row;
  for (int64_t i = 0; i < query.n_rows; ++i) {
    row.clear();
    for (int64_t p = query.indptr[i]; p < query.indptr[i + 1]; ++p)
      if (pos[query.indices[p]] >= 0) row.emplace_back(static_cast<int32_t>(pos[query.indices[p]]), query.data[p]);
    std::sort(row.begin(), row.end());
    for (const auto& [j, v] : row) X.indices.push_back(j), X.data.push_back(v);
    X.indptr[i + 1] = static_cast<int64_t>(X.indices.size());
  }
  if (opt.scale) {
    std::vector<double> mean, sd;
    column_mean_std(X, mean, sd);
    int64_t zero = 0;
    for (double& s : sd)
      if (s == 0) s = 1, ++zero;
    if (zero) log::warn("starCAT: " + std::to_string(zero) + " shared genes have 0 counts in the query; their values stay 0");
    for (size_t p = 0; p < X.data.size(); ++p) X.data[p] = static_cast<float>(X.data[p] / sd[X.indices[p]]);
  }
  DenseD H(k, h);
  for (int64_t a = 0; a < k; ++a)
    for (int64_t q = 0; q < h; ++q) H(a, q) = static_cast<double>(static_cast<float>(reference(a, rj[q])));
  if (opt.exact) {
    r.usages = nnls_fixed_spectra(ctx, X, H, opt.rows_per_block);
  } else {
    NmfOptions mu;
    mu.solver = NmfSolver::mu;
    mu.loss = NmfLoss::frobenius;
    DenseF Hf(k, h);
    for (size_t q = 0; q < H.data.size(); ++q) Hf.data[q] = static_cast<float>(H.data[q]);
    r.usages = nmf_fit_w_fixed_h(ctx, X, Hf, mu);
  }
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
  StarcatResult r = starcat_fit(ctx, X, d.var.index, ref, ref_genes, opt, query);
  if (opt.normalize)
    for (int64_t i = 0; i < r.usages.n_rows; ++i) {
      double s = 0;
      for (int64_t a = 0; a < r.usages.n_cols; ++a) s += r.usages(i, a);
      for (int64_t a = 0; a < r.usages.n_cols; ++a) r.usages(i, a) = static_cast<float>(s > 0 ? r.usages(i, a) / s : 0.0);
    }
  if (ends(out, ".npz")) write_df_npz(out, d.obs.index, false, programs, false, r.usages);
  else write_tsv_table(out, d.obs.index, programs, r.usages);
  log::info("starCAT: " + std::to_string(r.usages.n_rows) + " cells x " + std::to_string(r.usages.n_cols) +
            " programs -> " + out);
}

}  // namespace scurry
