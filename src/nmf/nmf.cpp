// scurry: batched NMF on the CPU (see nmf.hpp for the semantics).
#include "nmf/nmf.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"
#include "nmf/numpy_random.hpp"

namespace scurry {

namespace {

constexpr double kEps32 = 1.1920928955078125e-07;  // np.finfo(np.float32).eps: sklearn's EPSILON
constexpr double kEps64 = 2.220446049250313e-16;   // np.finfo(np.float64).eps

void check_input(const CsrF& X) {
  for (int64_t i = 0; i < X.n_rows; ++i)
    for (int64_t p = X.indptr[i]; p < X.indptr[i + 1]; ++p) {
      const float v = X.data[p];
      if (!std::isfinite(v) || v < 0)
        fail_input("NMF input", "X has the value ", v, " at row ", i, ", column ", X.indices[p],
                   "; NMF needs finite non-negative values (pass counts, not log/scaled-and-centred data)");
    }
}

double sum_of_squares(const CsrF& X) {
  double s = 0;
  for (const float v : X.data) s += static_cast<double>(v) * v;
  return s;
}

// Per-replicate Gram of the k columns of an interleaved [m, R*k] matrix: out[r*k*k + a*k + b].
void grams(int threads, const std::vector<float>& A, int64_t m, int R, int k, int64_t bs, std::vector<double>& out) {
  const RowBlocks rb = RowBlocks::uniform(m, bs);
  const size_t kk = static_cast<size_t>(k) * k;
  reduce_blocks(threads, rb.n_blocks(), static_cast<size_t>(R) * kk, out, [&](int64_t b, double* p) {
    for (int64_t i = rb.begin(b); i < rb.end(b); ++i)
      for (int r = 0; r < R; ++r) {
        const float* a = A.data() + static_cast<size_t>(i * R + r) * k;
        double* o = p + r * kk;
        for (int x = 0; x < k; ++x) {
          const double ax = a[x];
          if (ax == 0) continue;
          for (int y = 0; y < k; ++y) o[x * k + y] += ax * a[y];
        }
      }
  });
}

// Per-replicate column sums of an interleaved [m, R*k] matrix: out[r*k + c].
void colsums(int threads, const std::vector<float>& A, int64_t m, int64_t rk, int64_t bs, std::vector<double>& out) {
  const RowBlocks rb = RowBlocks::uniform(m, bs);
  reduce_blocks(threads, rb.n_blocks(), static_cast<size_t>(rk), out, [&](int64_t b, double* p) {
    for (int64_t i = rb.begin(b); i < rb.end(b); ++i) {
      const float* a = A.data() + static_cast<size_t>(i) * rk;
      for (int64_t c = 0; c < rk; ++c) p[c] += a[c];
    }
  });
}

// acc[0..rk) = sum over the nonzeros (j, x) of row i of M: x * B[j, 0..rk)  (float64).
inline void gather_row(const CsrF& M, int64_t i, const std::vector<float>& B, int64_t rk, double* acc) {
  std::fill(acc, acc + rk, 0.0);
  for (int64_t p = M.indptr[i]; p < M.indptr[i + 1]; ++p) {
    const double x = M.data[p];
    const float* b = B.data() + static_cast<size_t>(M.indices[p]) * rk;
    for (int64_t c = 0; c < rk; ++c) acc[c] += x * b[c];
  }
}

struct Fit {
  const Context& ctx;
  const CsrF& X;
  CsrF Xt;  // X transposed (genes x cells), built when H is updated
  NmfBatch& f;
  const NmfOptions& opt;
  int R, k;
  int64_t rk;
  int64_t cell_bs, gene_bs;
  std::vector<uint8_t> active;

  Fit(const Context& c, const CsrF& x, NmfBatch& fb, const NmfOptions& o)
      : ctx(c), X(x), f(fb), opt(o), R(fb.R), k(fb.k), rk(fb.rk()) {
    cell_bs = std::max<int64_t>(1, opt.rows_per_block);
    gene_bs = std::max<int64_t>(1, opt.rows_per_block / 4);
    active.assign(R, 1);
  }

  // Frobenius update of the rows of A ([m, rk]) given M (m x other, CSR), B ([other, rk]) and the
  // per-replicate Gram G of B. cd: HALS; mu: multiplicative. Returns per-replicate violations (cd).
  std::vector<double> frob_rows(const CsrF& M, std::vector<float>& A, const std::vector<float>& B,
                                const std::vector<double>& G, int64_t bs, const std::vector<double>* cached) {
    const int64_t m = M.n_rows;
    const RowBlocks rb = RowBlocks::uniform(m, bs);
    const size_t kk = static_cast<size_t>(k) * k;
    const bool cd = opt.solver == NmfSolver::cd;
    std::vector<double> viol;
    reduce_blocks(ctx.threads(), rb.n_blocks(), static_cast<size_t>(R), viol, [&](int64_t b, double* part) {
      std::vector<double> acc(rk), row(k), tmp(k);
      for (int64_t i = rb.begin(b); i < rb.end(b); ++i) {
        const double* xr_all;
        if (cached) {
          xr_all = cached->data() + static_cast<size_t>(i) * rk;
        } else {
          gather_row(M, i, B, rk, acc.data());
          xr_all = acc.data();
        }
        for (int r = 0; r < R; ++r) {
          if (!active[r]) continue;
          float* a = A.data() + static_cast<size_t>(i * R + r) * k;
          const double* Gr = G.data() + r * kk;
          const double* xr = xr_all + static_cast<size_t>(r) * k;
          for (int t = 0; t < k; ++t) row[t] = a[t];
          if (cd) {
            double v = 0;
            for (int t = 0; t < k; ++t) {
              double grad = -xr[t];
              for (int s = 0; s < k; ++s) grad += Gr[t * k + s] * row[s];
              const double pg = row[t] == 0 ? std::min(0.0, grad) : grad;
              v += std::fabs(pg);
              const double hess = Gr[t * k + t];
              if (hess != 0) row[t] = std::max(row[t] - grad / hess, 0.0);
            }
            part[r] += v;
            for (int t = 0; t < k; ++t) a[t] = static_cast<float>(row[t]);
          } else {
            for (int t = 0; t < k; ++t) {
              double den = 0;
              for (int s = 0; s < k; ++s) den += row[s] * Gr[s * k + t];
              if (den == 0) den = kEps32;
              tmp[t] = row[t] * (xr[t] / den);
            }
            for (int t = 0; t < k; ++t) a[t] = static_cast<float>(tmp[t]);
          }
        }
      }
    });
    return viol;
  }

  // Kullback-Leibler multiplicative update of the rows of A given M, B and the per-replicate column
  // sums of B. is_h: sklearn's H update (zero sums -> 1, entries < float64 eps -> 0).
  void kl_rows(const CsrF& M, std::vector<float>& A, const std::vector<float>& B, const std::vector<double>& bsum,
               int64_t bs, bool is_h) {
    const RowBlocks rb = RowBlocks::uniform(M.n_rows, bs);
    parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
      std::vector<double> acc(rk);
      for (int64_t i = rb.begin(b); i < rb.end(b); ++i) {
        std::fill(acc.begin(), acc.end(), 0.0);
        const float* arow = A.data() + static_cast<size_t>(i) * rk;
        for (int64_t p = M.indptr[i]; p < M.indptr[i + 1]; ++p) {
          const double x = M.data[p];
          const float* brow = B.data() + static_cast<size_t>(M.indices[p]) * rk;
          for (int r = 0; r < R; ++r) {
            if (!active[r]) continue;
            const float* ar = arow + r * k;
            const float* br = brow + r * k;
            double wh = 0;
            for (int c = 0; c < k; ++c) wh += static_cast<double>(ar[c]) * br[c];
            const double q = x / std::max(wh, kEps32);
            double* o = acc.data() + r * k;
            for (int c = 0; c < k; ++c) o[c] += q * br[c];
          }
        }
        float* aw = A.data() + static_cast<size_t>(i) * rk;
        for (int r = 0; r < R; ++r) {
          if (!active[r]) continue;
          for (int c = 0; c < k; ++c) {
            double den = bsum[r * k + c];
            if (is_h && den == 0) den = 1.0;
            if (den == 0) den = kEps32;
            double v = aw[r * k + c] * (acc[r * k + c] / den);
            if (is_h && v < kEps64) v = 0;
            aw[r * k + c] = static_cast<float>(v);
          }
        }
      }
    });
  }

  // Itakura-Saito (beta 0) multiplicative update of the rows of A, sklearn's general-beta rule:
  // numerator = sum_j x (WH)^-2 b, denominator = sum_j (WH)^-1 b (WH floored at float32 eps), delta
  // = (numerator / denominator)^(1 / (2 - beta)) = sqrt(.). X holds every entry (no zeros).
  void is_rows(const CsrF& M, std::vector<float>& A, const std::vector<float>& B, int64_t bs, bool is_h) {
    const RowBlocks rb = RowBlocks::uniform(M.n_rows, bs);
    parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
      std::vector<double> num(rk), den(rk);
      for (int64_t i = rb.begin(b); i < rb.end(b); ++i) {
        std::fill(num.begin(), num.end(), 0.0);
        std::fill(den.begin(), den.end(), 0.0);
        const float* arow = A.data() + static_cast<size_t>(i) * rk;
        for (int64_t p = M.indptr[i]; p < M.indptr[i + 1]; ++p) {
          const double x = M.data[p];
          const float* brow = B.data() + static_cast<size_t>(M.indices[p]) * rk;
          for (int r = 0; r < R; ++r) {
            if (!active[r]) continue;
            const float* ar = arow + r * k;
            const float* br = brow + r * k;
            double wh = 0;
            for (int c = 0; c < k; ++c) wh += static_cast<double>(ar[c]) * br[c];
            wh = std::max(wh, kEps32);
            const double qn = x / (wh * wh), qd = 1.0 / wh;
            for (int c = 0; c < k; ++c) num[r * k + c] += qn * br[c], den[r * k + c] += qd * br[c];
          }
        }
        float* aw = A.data() + static_cast<size_t>(i) * rk;
        for (int r = 0; r < R; ++r) {
          if (!active[r]) continue;
          for (int c = 0; c < k; ++c) {
            const double d = den[r * k + c] == 0 ? kEps32 : den[r * k + c];
            double v = aw[r * k + c] * std::sqrt(num[r * k + c] / d);
            if (is_h && v < kEps64) v = 0;
            aw[r * k + c] = static_cast<float>(v);
          }
        }
      }
    });
  }

  NmfResult run() {
    NmfResult res;
    res.n_iter.assign(R, 0);
    const bool upd_h = opt.update_h;
    if (upd_h) Xt = transpose(X);
    const bool kl = opt.loss == NmfLoss::kullback_leibler;
    const bool is = opt.loss == NmfLoss::itakura_saito;
    const bool cd = opt.solver == NmfSolver::cd;
    if ((kl || is) && cd)
      fail_input("NMF", "the cd solver supports only the frobenius loss; use --solver mu for ", nmf_loss_name(opt.loss));
    if (is) {  // sklearn: "When beta_loss <= 0 and X contains zeros, the solver may diverge."
      bool zeros = X.nnz() != X.n_rows * X.n_cols;
      for (int64_t p = 0; p < X.nnz() && !zeros; ++p) zeros = !(X.data[p] > 0);
      if (zeros)
        fail_input("NMF", "beta loss itakura-saito needs a matrix without zeros (sklearn: the solver may diverge); "
                   "add small values to the counts or use frobenius or kullback-leibler");
    }

    // H fixed and Frobenius: X Ht is constant, computed once (as sklearn reuses XHt).
    std::vector<double> cached;
    if (!upd_h && !kl && !is) {
      cached.resize(static_cast<size_t>(X.n_rows) * rk);
      const RowBlocks rb = RowBlocks::uniform(X.n_rows, cell_bs);
      parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
        for (int64_t i = rb.begin(b); i < rb.end(b); ++i)
          gather_row(X, i, f.Ht, rk, cached.data() + static_cast<size_t>(i) * rk);
      });
    }

    std::vector<double> err_init, prev_err, viol_init(R, 0.0);
    if (!cd) {
      err_init = nmf_objective(ctx, X, f, opt.loss, cell_bs);
      prev_err = err_init;
    }
    std::vector<double> G, sums;
    for (int it = 1; it <= opt.max_iter; ++it) {
      if (std::none_of(active.begin(), active.end(), [](uint8_t a) { return a != 0; })) break;
      std::vector<double> viol(R, 0.0);
      // W half-step.
      if (kl) {
        colsums(ctx.threads(), f.Ht, f.g, rk, gene_bs, sums);
        kl_rows(X, f.W, f.Ht, sums, cell_bs, false);
      } else if (is) {
        is_rows(X, f.W, f.Ht, cell_bs, false);
      } else {
        grams(ctx.threads(), f.Ht, f.g, R, k, gene_bs, G);
        const auto v = frob_rows(X, f.W, f.Ht, G, cell_bs, cached.empty() ? nullptr : &cached);
        for (int r = 0; r < R; ++r) viol[r] += v[r];
      }
      // H half-step.
      if (upd_h) {
        if (kl) {
          colsums(ctx.threads(), f.W, f.n, rk, cell_bs, sums);
          kl_rows(Xt, f.Ht, f.W, sums, gene_bs, true);
        } else if (is) {
          is_rows(Xt, f.Ht, f.W, gene_bs, true);
        } else {
          grams(ctx.threads(), f.W, f.n, R, k, cell_bs, G);
          const auto v = frob_rows(Xt, f.Ht, f.W, G, gene_bs, nullptr);
          for (int r = 0; r < R; ++r) viol[r] += v[r];
        }
      }
      for (int r = 0; r < R; ++r)
        if (active[r]) res.n_iter[r] = it;
      if (cd) {
        for (int r = 0; r < R; ++r) {
          if (!active[r]) continue;
          if (it == 1) viol_init[r] = viol[r];
          if (viol_init[r] == 0 || viol[r] / viol_init[r] <= opt.tol) active[r] = 0;
        }
      } else if (opt.tol > 0 && it % 10 == 0) {
        const auto err = nmf_objective(ctx, X, f, opt.loss, cell_bs);
        for (int r = 0; r < R; ++r) {
          if (!active[r]) continue;
          if ((prev_err[r] - err[r]) / err_init[r] < opt.tol) active[r] = 0;
          prev_err[r] = err[r];
        }
      }
    }
    res.error = nmf_objective(ctx, X, f, opt.loss, cell_bs);
    return res;
  }
};

}  // namespace

NmfSolver parse_nmf_solver(const std::string& s) {
  if (s == "cd") return NmfSolver::cd;
  if (s == "mu") return NmfSolver::mu;
  fail_input("--solver", "unknown NMF solver '", s, "'; use cd or mu");
}
NmfLoss parse_nmf_loss(const std::string& s) {
  if (s == "frobenius") return NmfLoss::frobenius;
  if (s == "kullback-leibler") return NmfLoss::kullback_leibler;
  if (s == "itakura-saito") return NmfLoss::itakura_saito;
  fail_input("--beta-loss", "unknown NMF loss '", s, "'; use frobenius, kullback-leibler or itakura-saito");
}
const char* nmf_solver_name(NmfSolver s) { return s == NmfSolver::cd ? "cd" : "mu"; }
const char* nmf_loss_name(NmfLoss l) {
  return l == NmfLoss::frobenius ? "frobenius" : l == NmfLoss::kullback_leibler ? "kullback-leibler" : "itakura-saito";
}

DenseF NmfBatch::w_of(int r) const {
  DenseF out(n, k);
  for (int64_t i = 0; i < n; ++i)
    for (int c = 0; c < k; ++c) out(i, c) = w(r, i, c);
  return out;
}
DenseF NmfBatch::h_of(int r) const {
  DenseF out(k, g);
  for (int c = 0; c < k; ++c)
    for (int64_t j = 0; j < g; ++j) out(c, j) = h(r, c, j);
  return out;
}
NmfBatch NmfBatch::from(const DenseF& W, const DenseF& H) {
  if (W.n_cols != H.n_rows) fail("NmfBatch::from: W has ", W.n_cols, " columns but H has ", H.n_rows, " rows");
  NmfBatch b;
  b.n = W.n_rows, b.g = H.n_cols, b.k = static_cast<int>(H.n_rows), b.R = 1;
  b.W = W.data;
  b.Ht.resize(static_cast<size_t>(b.g) * b.k);
  for (int c = 0; c < b.k; ++c)
    for (int64_t j = 0; j < b.g; ++j) b.h(0, c, j) = H(c, j);
  return b;
}

NmfBatch nmf_batch_slice(const NmfBatch& b, int r0, int r1) {
  if (r0 < 0 || r1 > b.R || r0 >= r1) fail("nmf_batch_slice: replicates [", r0, ", ", r1, ") of ", b.R);
  NmfBatch o;
  o.n = b.n, o.g = b.g, o.k = b.k, o.R = r1 - r0;
  const size_t k = static_cast<size_t>(b.k), w = static_cast<size_t>(o.R) * k;
  o.W.resize(static_cast<size_t>(b.n) * w);
  o.Ht.resize(static_cast<size_t>(b.g) * w);
  for (int64_t i = 0; i < b.n; ++i)
    std::copy_n(b.W.data() + static_cast<size_t>(i * b.R + r0) * k, w, o.W.data() + static_cast<size_t>(i) * w);
  for (int64_t j = 0; j < b.g; ++j)
    std::copy_n(b.Ht.data() + static_cast<size_t>(j * b.R + r0) * k, w, o.Ht.data() + static_cast<size_t>(j) * w);
  return o;
}

NmfBatch nmf_batch_concat(const std::vector<NmfBatch>& parts) {
  if (parts.empty()) fail("nmf_batch_concat: no batches");
  NmfBatch o;
  o.n = parts[0].n, o.g = parts[0].g, o.k = parts[0].k, o.R = 0;
  for (const auto& p : parts) {
    if (p.n != o.n || p.g != o.g || p.k != o.k) fail("nmf_batch_concat: batches of different shapes");
    o.R += p.R;
  }
  const size_t k = static_cast<size_t>(o.k), w = static_cast<size_t>(o.R) * k;
  o.W.resize(static_cast<size_t>(o.n) * w);
  o.Ht.resize(static_cast<size_t>(o.g) * w);
  size_t off = 0;
  for (const auto& p : parts) {
    const size_t pw = static_cast<size_t>(p.R) * k;
    for (int64_t i = 0; i < o.n; ++i)
      std::copy_n(p.W.data() + static_cast<size_t>(i) * pw, pw, o.W.data() + static_cast<size_t>(i) * w + off);
    for (int64_t j = 0; j < o.g; ++j)
      std::copy_n(p.Ht.data() + static_cast<size_t>(j) * pw, pw, o.Ht.data() + static_cast<size_t>(j) * w + off);
    off += pw;
  }
  return o;
}

std::vector<int> parse_gpus(const std::string& spec, int available) {
  auto number = [&](const std::string& t) {
    size_t used = 0;
    int v = -1;
    try {
      v = std::stoi(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != t.size() || t.empty() || v < 0)
      fail_input("--gpus", "'", spec, "' is not all, a count N, or a comma-separated list of device ordinals");
    return v;
  };
  std::vector<int> out;
  if (spec == "all") {
    for (int d = 0; d < available; ++d) out.push_back(d);
  } else if (spec.find(',') == std::string::npos) {
    const int n = number(spec);
    if (n > available) fail_input("--gpus", "asks for ", n, " GPUs but ", available, " are visible");
    for (int d = 0; d < n; ++d) out.push_back(d);
  } else {
    std::stringstream ss(spec);
    std::string t;
    while (std::getline(ss, t, ',')) {
      if (t.empty()) continue;
      const int d = number(t);
      if (d >= available) fail_input("--gpus", "device ", d, " is not visible (", available, " GPUs: 0..", available - 1, ")");
      if (std::find(out.begin(), out.end(), d) != out.end()) fail_input("--gpus", "device ", d, " is listed twice");
      out.push_back(d);
    }
  }
  if (out.empty()) fail_input("--gpus", "'", spec, "' selects no GPU (", available, " visible); give all, N >= 1 or a list");
  return out;
}

namespace {
// numpy takes seeds 0 .. 2^32 - 1 (the CLI checks --seed); wider seeds (the tests' fresh seeds) are
// folded to 32 bits.
uint32_t numpy_seed(uint64_t s) { return static_cast<uint32_t>(s <= 0xffffffffull ? s : (s ^ (s >> 32))); }
}  // namespace

std::vector<uint64_t> nmf_replicate_seeds(uint64_t seed, int64_t n) {
  // cNMF's get_nmf_iter_params: np.random.seed(seed); np.random.randint(1, 2**31 - 1, size=n).
  NumpyRandomState rng(numpy_seed(seed));
  std::vector<uint64_t> out(static_cast<size_t>(n));
  for (auto& v : out) v = static_cast<uint64_t>(rng.randint(1, (int64_t(1) << 31) - 1));
  return out;
}

namespace {

// sklearn's init='random' in bulk (nmf_random_init). A replicate's normals are its numpy stream's
// polar-method pairs in order: pair p gives normal 2p (f x2, what legacy_gauss returns) and 2p + 1
// (f x1, what it caches for the next call); normal t < k g is H's (c, j) = (t / g, t % g) and the
// rest W's, row by row: (i, c) = ((t - k g) / k, (t - k g) % k). So the cached value carries from H
// into W and from row to row exactly as in sklearn's serial calls.
constexpr int64_t kInitPiecePairs = 4096;            // pairs per conversion task
constexpr int64_t kInitMaxBlockPairs = 65536;        // pairs per replicate and round, at most
constexpr size_t kInitPairBytes = size_t(64) << 20;  // both rounds' pair buffers, at most

// Normals t0 .. t0 + m - 1 of replicate r (as |avg z| floats) into their places in b.
void store_normals(NmfBatch& b, int r, int64_t t0, const float* v, int64_t m) {
  const int64_t k = b.k, g = b.g, kg = k * g, R = b.R;
  int64_t t = t0;
  if (t < kg) {
    int64_t c = t / g, j = t % g;
    const int64_t e = std::min(m, kg - t);
    float* H = b.Ht.data();
    for (int64_t q = 0; q < e; ++q) {
      H[static_cast<size_t>((j * R + r) * k + c)] = v[q];
      if (++j == g) j = 0, ++c;
    }
    v += e, m -= e, t += e;
  }
  int64_t i = (t - kg) / k, c = (t - kg) % k;
  while (m > 0) {
    const int64_t e = std::min(k - c, m);
    std::copy_n(v, e, b.W.data() + static_cast<size_t>((i * R + r) * k + c));
    v += e, m -= e, c = 0, ++i;
  }
}

// The polar method's per-pair part for pairs p0 .. p0 + np - 1 of replicate r (N normals in all):
// numpy's two normals of each pair (NumpyRandomState::polar_normals), |avg z| as sklearn stores them.
void convert_pairs(NmfBatch& b, int r, const PolarPair* pairs, int64_t p0, int64_t np, double avg, int64_t N) {
  constexpr int64_t kChunk = 256;
  float v[2 * kChunk];
  for (int64_t q0 = 0; q0 < np; q0 += kChunk) {
    const int64_t m = std::min(kChunk, np - q0);
    for (int64_t q = 0; q < m; ++q) {
      double z0, z1;
      NumpyRandomState::polar_normals(pairs[q0 + q], z0, z1);
      v[2 * q] = static_cast<float>(std::fabs(avg * z0));
      v[2 * q + 1] = static_cast<float>(std::fabs(avg * z1));
    }
    const int64_t t0 = 2 * (p0 + q0);
    store_normals(b, r, t0, v, std::min(2 * m, N - t0));
  }
}

}  // namespace

NmfBatch nmf_random_init(const CsrF& X, int k, const std::vector<uint64_t>& seeds, int threads, double x_sum,
                         std::vector<float>* w_storage) {
  if (k < 1) fail_input("NMF", "the number of components k must be at least 1 (got ", k, ")");
  if (seeds.empty()) fail("nmf_random_init: no seeds");
  NmfBatch b;
  b.n = X.n_rows, b.g = X.n_cols, b.k = k, b.R = static_cast<int>(seeds.size());
  double total = x_sum;
  if (total < 0) {
    total = 0;
    for (const float v : X.data) total += v;
  }
  const double cells = static_cast<double>(X.n_rows) * static_cast<double>(X.n_cols);
  const double avg = std::sqrt(cells > 0 ? total / cells / k : 0.0);
  const size_t nw = static_cast<size_t>(b.n) * b.rk();
  if (w_storage) {  // its storage reused where it is large enough (a smaller one freed first)
    if (w_storage->capacity() >= nw) b.W = std::move(*w_storage);
    std::vector<float>().swap(*w_storage);
  }
  resize_large(b.W, nw);  // (a fresh W's pages faulted in on the threads first)
  resize_large(b.Ht, static_cast<size_t>(b.g) * b.rk());
  // Every replicate's own stream (sklearn: check_random_state(seed)), in sklearn's order: H, then W
  // row by row. Marsaglia's polar method split in two (NumpyRandomState::polar_pairs and
  // polar_normals): in round q each replicate's next block of accepted pairs is drawn (its stream's
  // sequential part: MT19937 words and rejections, ~1/3 of the cost) while the block of round q - 1
  // is turned into normals and stored, in pieces, by any thread (logs, square roots, stores). The
  // work of a round spreads over all threads even when R is below the thread count, and the values
  // are the serial draw's, for any thread count.
  const int R = b.R;
  const int64_t N = static_cast<int64_t>(k) * (b.g + b.n);  // normals per replicate
  const int64_t P = (N + 1) / 2;  // pairs per replicate (an odd N leaves the last f x1 cached, unused)
  if (P == 0) return b;
  int64_t B = static_cast<int64_t>(kInitPairBytes / (2 * sizeof(PolarPair) * static_cast<size_t>(R)));
  B = std::clamp(B / kInitPiecePairs * kInitPiecePairs, kInitPiecePairs, kInitMaxBlockPairs);
  B = std::min(B, (P + kInitPiecePairs - 1) / kInitPiecePairs * kInitPiecePairs);
  const int64_t blocks = (P + B - 1) / B, pieces = B / kInitPiecePairs;
  std::vector<NumpyRandomState> rng;
  rng.reserve(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) rng.emplace_back(numpy_seed(seeds[r]));
  std::unique_ptr<PolarPair[]> buf(new PolarPair[2 * static_cast<size_t>(R) * static_cast<size_t>(B)]);
  auto pairs = [&](int64_t round, int r) { return buf.get() + (static_cast<size_t>(round % 2) * R + r) * B; };
  // (at most one worker a hardware thread: the values do not depend on the count, and an OpenMP team
  // above the machine's thread count leaves libomp's extra thread records unreachable at exit, which
  // LeakSanitizer reports)
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int workers = std::clamp(threads, 1, hw);
  for (int64_t q = 0; q <= blocks; ++q) {
    const int64_t draws = q < blocks ? R : 0, converts = q > 0 ? R * pieces : 0;
    parallel_for(workers, draws + converts, [&](int64_t t) {
      if (t < draws) {  // block q of replicate t: the stream's next pairs
        rng[t].polar_pairs(pairs(q, static_cast<int>(t)), std::min(B, P - q * B));
        return;
      }
      t -= draws;
      const int r = static_cast<int>(t / pieces);
      const int64_t blk = q - 1, s = t % pieces;
      const int64_t p0 = blk * B + s * kInitPiecePairs, p1 = std::min({p0 + kInitPiecePairs, (blk + 1) * B, P});
      if (p0 < p1) convert_pairs(b, r, pairs(blk, r) + s * kInitPiecePairs, p0, p1 - p0, avg, N);
    });
  }
  return b;
}

std::vector<double> nmf_objective(const Context& ctx, const CsrF& X, const NmfBatch& f, NmfLoss loss,
                                  int64_t rows_per_block) {
  const int R = f.R, k = f.k;
  const int64_t rk = f.rk();
  const RowBlocks rb = RowBlocks::uniform(X.n_rows, std::max<int64_t>(1, rows_per_block));
  std::vector<double> out(R);
  if (loss == NmfLoss::frobenius) {
    std::vector<double> cross;
    reduce_blocks(ctx.threads(), rb.n_blocks(), static_cast<size_t>(R), cross, [&](int64_t b, double* p) {
      std::vector<double> acc(rk);
      for (int64_t i = rb.begin(b); i < rb.end(b); ++i) {
        gather_row(X, i, f.Ht, rk, acc.data());
        const float* w = f.W.data() + static_cast<size_t>(i) * rk;
        for (int r = 0; r < R; ++r) {
          double s = 0;
          for (int c = 0; c < k; ++c) s += acc[r * k + c] * w[r * k + c];
          p[r] += s;
        }
      }
    });
    std::vector<double> wtw, hht;
    grams(ctx.threads(), f.W, f.n, R, k, rows_per_block, wtw);
    grams(ctx.threads(), f.Ht, f.g, R, k, rows_per_block, hht);
    const double nx = sum_of_squares(X);
    const size_t kk = static_cast<size_t>(k) * k;
    for (int r = 0; r < R; ++r) {
      double nwh = 0;
      for (size_t q = 0; q < kk; ++q) nwh += wtw[r * kk + q] * hht[r * kk + q];
      const double res = (nx + nwh - 2.0 * cross[r]) / 2.0;
      out[r] = std::sqrt(2.0 * std::max(res, 0.0));
    }
    return out;
  }
  if (loss == NmfLoss::itakura_saito) {
    // sklearn's beta = 0: over the entries x > eps, div = x / max(WH, eps); sum(div) - n g - sum(log div).
    std::vector<double> part;
    reduce_blocks(ctx.threads(), rb.n_blocks(), static_cast<size_t>(R), part, [&](int64_t b, double* p) {
      for (int64_t i = rb.begin(b); i < rb.end(b); ++i) {
        const float* w = f.W.data() + static_cast<size_t>(i) * rk;
        for (int64_t q = X.indptr[i]; q < X.indptr[i + 1]; ++q) {
          const double x = X.data[q];
          if (!(x > kEps32)) continue;
          const float* h = f.Ht.data() + static_cast<size_t>(X.indices[q]) * rk;
          for (int r = 0; r < R; ++r) {
            double wh = 0;
            for (int c = 0; c < k; ++c) wh += static_cast<double>(w[r * k + c]) * h[r * k + c];
            const double div = x / std::max(wh, kEps32);
            p[r] += div - std::log(div);
          }
        }
      }
    });
    const double ng = static_cast<double>(X.n_rows) * static_cast<double>(X.n_cols);
    for (int r = 0; r < R; ++r) out[r] = std::sqrt(2.0 * std::max(part[r] - ng, 0.0));
    return out;
  }
  // Kullback-Leibler: sum over nonzeros x > eps of x log(x / max(WH, eps)) + sum(WH) - sum(x).
  std::vector<double> part;
  reduce_blocks(ctx.threads(), rb.n_blocks(), static_cast<size_t>(R) + 1, part, [&](int64_t b, double* p) {
    for (int64_t i = rb.begin(b); i < rb.end(b); ++i) {
      const float* w = f.W.data() + static_cast<size_t>(i) * rk;
      for (int64_t q = X.indptr[i]; q < X.indptr[i + 1]; ++q) {
        const double x = X.data[q];
        if (!(x > kEps32)) continue;
        p[R] += x;
        const float* h = f.Ht.data() + static_cast<size_t>(X.indices[q]) * rk;
        for (int r = 0; r < R; ++r) {
          double wh = 0;
          for (int c = 0; c < k; ++c) wh += static_cast<double>(w[r * k + c]) * h[r * k + c];
          p[r] += x * std::log(x / std::max(wh, kEps32));
        }
      }
    }
  });
  std::vector<double> ws, hs;
  colsums(ctx.threads(), f.W, f.n, rk, rows_per_block, ws);
  colsums(ctx.threads(), f.Ht, f.g, rk, rows_per_block, hs);
  for (int r = 0; r < R; ++r) {
    double swh = 0;
    for (int c = 0; c < k; ++c) swh += ws[r * k + c] * hs[r * k + c];
    const double res = part[r] + swh - part[R];
    out[r] = std::sqrt(2.0 * std::max(res, 0.0));
  }
  return out;
}

double frobenius_error_sq(const Context& ctx, const CsrF& X, const DenseF& W, const DenseF& H) {
  const NmfBatch b = NmfBatch::from(W, H);
  const double e = nmf_objective(ctx, X, b, NmfLoss::frobenius)[0];
  return e * e;
}

NmfResult nmf_fit(const Context& ctx, const CsrF& X, NmfBatch init, const NmfOptions& opt) {
  check_input(X);
  if (init.n != X.n_rows || init.g != X.n_cols)
    fail("nmf_fit: factors are for ", init.n, " x ", init.g, " but X is ", X.n_rows, " x ", X.n_cols);
  if (opt.max_iter < 1) fail_input("--max-iter", "must be at least 1 (got ", opt.max_iter, ")");
  if (!(opt.tol >= 0)) fail_input("--tol", "must be >= 0 (got ", opt.tol, ")");
  Fit fit(ctx, X, init, opt);
  NmfResult res = fit.run();
  res.f = std::move(init);
  return res;
}

DenseF nmf_fit_w_fixed_h(const Context& ctx, const CsrF& X, const DenseF& H, NmfOptions opt, int* n_iter, bool on_gpu) {
  if (H.n_cols != X.n_cols)
    fail("nmf_fit_w_fixed_h: H has ", H.n_cols, " columns but X has ", X.n_cols);
  const int k = static_cast<int>(H.n_rows);
  float fill = 0;
  if (opt.solver == NmfSolver::mu) {
    double total = 0;
    for (const float v : X.data) total += v;
    const double cells = static_cast<double>(X.n_rows) * static_cast<double>(X.n_cols);
    fill = static_cast<float>(std::sqrt(cells > 0 ? total / cells / k : 0.0));
  }
  DenseF W0(X.n_rows, k, fill);
  opt.update_h = false;
  NmfResult r = on_gpu ? nmf_fit_gpu(ctx, X, NmfBatch::from(W0, H), opt) : nmf_fit(ctx, X, NmfBatch::from(W0, H), opt);
  if (n_iter) *n_iter = r.n_iter[0];
  return r.f.w_of(0);
}

}  // namespace scurry
