// GPU tests (label gpu): each preprocessing kernel against a simple exact CPU computation in float64.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>

#include "exec/device_csr.cuh"
#include "pp/kernels.cuh"
#include "testlib.hpp"

using namespace scurry;

namespace {
Context gpu_ctx() {
  ContextOptions o;
  o.device = "gpu";
  return Context::create(o);
}
// Counts with a few long rows (beyond the shared-memory sort) and repeated values (ties).
CsrF counts(uint64_t seed, int64_t rows = 700, int64_t cols = 9000) {
  CsrF m = test::random_counts(rows, cols, 0.05, seed, 6);
  std::mt19937_64 rng(seed + 1);
  for (int64_t r : {int64_t(3), rows - 1}) {  // make two rows dense (> 4096 entries)
    std::vector<float> dense(cols);
    for (auto& x : dense) x = static_cast<float>(rng() % 9);
    CsrF one = CsrF::zeros(1, cols);
    for (int64_t c = 0; c < cols; ++c)
      if (dense[c] != 0) one.indices.push_back(static_cast<int32_t>(c)), one.data.push_back(dense[c]);
    one.indptr[1] = one.nnz();
    CsrF out = CsrF::zeros(0, cols);
    out.indptr = {0};
    for (int64_t i = 0; i < rows; ++i) {
      const CsrF& src = i == r ? one : m;
      const int64_t s = i == r ? 0 : m.indptr[i], e = i == r ? one.nnz() : m.indptr[i + 1];
      for (int64_t p = s; p < e; ++p) out.indices.push_back(src.indices[p]), out.data.push_back(src.data[p]);
      out.indptr.push_back(out.nnz());
    }
    out.n_rows = rows;
    m = out;
  }
  return m;
}
double rel(double a, double b) { return std::abs(a - b) / std::max(1e-12, std::abs(b)); }
}  // namespace

static void check_row_qc(CudaResources& r, const CsrF& m, const char* what) {
  std::vector<uint8_t> sets(m.n_cols, 0);
  for (int64_t g = 0; g < m.n_cols; g += 7) sets[g] |= 1;
  for (int64_t g = 0; g < 300; ++g) sets[g] |= 2;
  DeviceArray<uint8_t> dsets(r, sets.size(), "sets");
  SCURRY_CUDA(cudaMemcpy(dsets.data(), sets.data(), sets.size(), cudaMemcpyHostToDevice));
  DeviceCsr d = upload(r, m);
  const std::vector<int> top = {100, 50, 500, 200};  // any order
  gpu::RowQc q = gpu::row_qc(r, d, dsets.data(), 2, top);
  for (int64_t i = 0; i < m.n_rows; ++i) {
    std::vector<double> v(m.data.begin() + m.indptr[i], m.data.begin() + m.indptr[i + 1]);
    double tot = std::accumulate(v.begin(), v.end(), 0.0), s0 = 0, s1 = 0;
    for (int64_t p = m.indptr[i]; p < m.indptr[i + 1]; ++p) {
      if (sets[m.indices[p]] & 1) s0 += m.data[p];
      if (sets[m.indices[p]] & 2) s1 += m.data[p];
    }
    ASSERT_NEAR(q.total[i], tot, 1e-9 * tot) << what << " row " << i;
    ASSERT_EQ(q.n_genes[i], static_cast<double>(v.size())) << what;
    ASSERT_NEAR(q.set_total[0][i], s0, 1e-9 * tot) << what;
    ASSERT_NEAR(q.set_total[1][i], s1, 1e-9 * tot) << what;
    std::sort(v.begin(), v.end(), std::greater<>());
    for (size_t t = 0; t < top.size(); ++t) {
      const double want = std::accumulate(v.begin(), v.begin() + std::min<size_t>(top[t], v.size()), 0.0);
      ASSERT_NEAR(q.top_sum[t][i], want, 1e-9 * tot)
          << what << ": row " << i << " (length " << v.size() << ") top " << top[t];
    }
  }
}

// Integer counts take the histogram route; large counts (>= 256) are kept apart and sorted, and a row
// with more than 1024 of them, non-integer values and negative values take the radix route.
TEST(KernelsGpu, RowQcMatchesCpu) {
  SCURRY_REQUIRE_GPU();
  Context ctx = gpu_ctx();
  CudaResources& r = *ctx.cuda();
  const uint64_t seed = test::fresh_seed();
  const CsrF m = counts(seed);
  check_row_qc(r, m, "small counts");
  std::mt19937_64 rng(seed + 7);
  CsrF big = m;  // every third row multiplied by 100 (values up to 600); row 3 (dense) by 300
  for (int64_t i = 0; i < big.n_rows; i += 3)
    for (int64_t p = big.indptr[i]; p < big.indptr[i + 1]; ++p) big.data[p] *= (i == 3 ? 300.f : 100.f);
  for (int64_t i = 1; i < big.n_rows; i += 5)  // a few large counts in otherwise small rows
    for (int64_t p = big.indptr[i]; p < big.indptr[i + 1]; p += 11) big.data[p] = static_cast<float>(256 + rng() % 5000);
  check_row_qc(r, big, "large counts");
  CsrF frac = m;  // non-integer values in every other row, one negative value in row 1
  for (int64_t i = 0; i < frac.n_rows; i += 2)
    for (int64_t p = frac.indptr[i]; p < frac.indptr[i + 1]; ++p) frac.data[p] *= 0.37f;
  if (frac.indptr[2] > frac.indptr[1]) frac.data[frac.indptr[1]] = -1.f;
  check_row_qc(r, frac, "non-integer values");
}

TEST(KernelsGpu, GeneSumsMatchCpuForEachTransform) {
  SCURRY_REQUIRE_GPU();
  Context ctx = gpu_ctx();
  CudaResources& r = *ctx.cuda();
  CsrF m = counts(test::fresh_seed(), 3000, 20000);  // several gene tiles
  DeviceCsr d = upload(r, m);
  std::vector<float> clip(m.n_cols);
  for (int64_t g = 0; g < m.n_cols; ++g) clip[g] = 1.5f + static_cast<float>(g % 5);
  DeviceArray<float> dclip(r, clip.size(), "clip");
  SCURRY_CUDA(cudaMemcpy(dclip.data(), clip.data(), clip.size() * 4, cudaMemcpyHostToDevice));
  for (auto f : {gpu::GeneTransform::identity, gpu::GeneTransform::expm1, gpu::GeneTransform::clip}) {
    gpu::GeneSums s = gpu::gene_sums(r, d, f, dclip.data());
    std::vector<double> sum(m.n_cols, 0), sq(m.n_cols, 0), nz(m.n_cols, 0);
    for (int64_t p = 0; p < m.nnz(); ++p) {
      const int g = m.indices[p];
      double x = m.data[p];
      if (f == gpu::GeneTransform::expm1) x = std::expm1(static_cast<float>(x));
      if (f == gpu::GeneTransform::clip) x = std::min<double>(x, clip[g]);
      sum[g] += x, sq[g] += x * x, nz[g] += x != 0;
    }
    for (int64_t g = 0; g < m.n_cols; ++g) {
      ASSERT_LT(rel(s.sum[g], sum[g]), 1e-6) << g;
      ASSERT_LT(rel(s.sumsq[g], sq[g]), 1e-6) << g;
      ASSERT_EQ(s.nnz[g], nz[g]) << g;
    }
  }
}

TEST(KernelsGpu, NormalizeLog1pMatchesCpu) {
  SCURRY_REQUIRE_GPU();
  Context ctx = gpu_ctx();
  CudaResources& r = *ctx.cuda();
  CsrF m = counts(test::fresh_seed());
  for (int64_t p = m.indptr[10]; p < m.indptr[11]; ++p) m.data[p] = 0;  // a zero-total row
  DeviceCsr d = upload(r, m);
  std::vector<double> totals;
  gpu::normalize_log1p(r, d, 1e4, true, &totals);
  CsrF out = download(r, d);
  for (int64_t i = 0; i < m.n_rows; ++i) {
    double t = 0;
    for (int64_t p = m.indptr[i]; p < m.indptr[i + 1]; ++p) t += m.data[p];
    ASSERT_NEAR(totals[i], t, 1e-9 * (t + 1));
    for (int64_t p = m.indptr[i]; p < m.indptr[i + 1]; ++p) {
      const double want = t > 0 ? std::log1p(m.data[p] * 1e4 / t) : std::log1p(m.data[p]);
      ASSERT_NEAR(out.data[p], want, 1e-6 * (1 + want)) << i;
    }
  }
}

namespace {
// Host oracle of filter_inplace; either mask may be empty (keep all).
CsrF host_filter(const CsrF& m, const std::vector<uint8_t>& keep, const std::vector<int32_t>& cmap, int64_t cols) {
  CsrF want = CsrF::zeros(0, cols);
  want.indptr = {0};
  for (int64_t i = 0; i < m.n_rows; ++i) {
    if (!keep.empty() && !keep[i]) continue;
    for (int64_t p = m.indptr[i]; p < m.indptr[i + 1]; ++p) {
      const int32_t j = cmap.empty() ? m.indices[p] : cmap[m.indices[p]];
      if (j >= 0) want.indices.push_back(j), want.data.push_back(m.data[p]);
    }
    want.indptr.push_back(want.nnz());
  }
  want.n_rows = static_cast<int64_t>(want.indptr.size()) - 1;
  return want;
}
}  // namespace

TEST(KernelsGpu, FilterInPlaceRowsOnlyThenColumnsOnly) {
  SCURRY_REQUIRE_GPU();
  Context ctx = gpu_ctx();
  CudaResources& r = *ctx.cuda();
  const uint64_t seed = test::fresh_seed();
  CsrF m = counts(seed, 3000, 4000);
  std::mt19937_64 rng(seed + 3);
  std::vector<uint8_t> keep(m.n_rows);
  for (auto& k : keep) k = rng() % 4 != 0;
  std::vector<int32_t> cmap(m.n_cols);
  int32_t next = 0;
  for (auto& c : cmap) c = rng() % 3 != 0 ? next++ : -1;
  DeviceArray<uint8_t> dk(r, keep.size(), "k");
  DeviceArray<int32_t> dc(r, cmap.size(), "c");
  SCURRY_CUDA(cudaMemcpy(dk.data(), keep.data(), keep.size(), cudaMemcpyHostToDevice));
  SCURRY_CUDA(cudaMemcpy(dc.data(), cmap.data(), cmap.size() * 4, cudaMemcpyHostToDevice));
  DeviceCsr d = upload(r, m);
  filter_inplace(r, d, dk.data(), nullptr, m.n_cols);
  CsrF rows = host_filter(m, keep, {}, m.n_cols);
  CsrF got = download(r, d);
  EXPECT_EQ(got.indptr, rows.indptr);
  EXPECT_EQ(got.indices, rows.indices);
  filter_inplace(r, d, nullptr, dc.data(), next);
  CsrF both = host_filter(rows, {}, cmap, next);
  got = download(r, d);
  EXPECT_EQ(got.indptr, both.indptr);
  EXPECT_EQ(got.indices, both.indices);
  EXPECT_EQ(got.data, both.data);
}

TEST(KernelsGpu, FilterInPlaceMatchesHostSubset) {
  SCURRY_REQUIRE_GPU();
  Context ctx = gpu_ctx();
  CudaResources& r = *ctx.cuda();
  const uint64_t seed = test::fresh_seed();
  CsrF m = counts(seed, 2000, 5000);
  std::mt19937_64 rng(seed + 7);
  std::vector<uint8_t> keep(m.n_rows);
  for (auto& k : keep) k = rng() % 3 != 0;
  std::vector<int32_t> cmap(m.n_cols);
  int32_t next = 0;
  for (auto& c : cmap) c = rng() % 4 != 0 ? next++ : -1;
  DeviceArray<uint8_t> dk(r, keep.size(), "k");
  DeviceArray<int32_t> dc(r, cmap.size(), "c");
  SCURRY_CUDA(cudaMemcpy(dk.data(), keep.data(), keep.size(), cudaMemcpyHostToDevice));
  SCURRY_CUDA(cudaMemcpy(dc.data(), cmap.data(), cmap.size() * 4, cudaMemcpyHostToDevice));
  DeviceCsr d = upload(r, m);
  filter_inplace(r, d, dk.data(), dc.data(), next);
  CsrF got = download(r, d);
  const CsrF want = host_filter(m, keep, cmap, next);
  EXPECT_EQ(got.n_rows, want.n_rows);
  EXPECT_EQ(got.n_cols, next);
  EXPECT_EQ(got.indptr, want.indptr);
  EXPECT_EQ(got.indices, want.indices);
  EXPECT_EQ(got.data, want.data);
}

TEST(KernelsGpu, ScaleAndPcaMatchCpu) {
  SCURRY_REQUIRE_GPU();
  Context ctx = gpu_ctx();
  CudaResources& r = *ctx.cuda();
  const uint64_t seed = test::fresh_seed();
  // Low-rank signal plus noise, so that the top components are well separated.
  const int64_t n = 3000, g = 300;
  const int k = 10;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N01(0, 1);
  CsrF m = CsrF::zeros(n, g);
  std::vector<double> load(g * 5);
  for (auto& x : load) x = N01(rng);
  for (int64_t i = 0; i < n; ++i) {
    double f[5];
    for (double& x : f) x = N01(rng) * 3;
    for (int64_t j = 0; j < g; ++j) {
      double v = 0;
      for (int q = 0; q < 5; ++q) v += f[q] * load[j * 5 + q] * (q + 1) * 0.5;
      v += N01(rng);
      if (v > 1.0) m.indices.push_back(static_cast<int32_t>(j)), m.data.push_back(static_cast<float>(v));
    }
    m.indptr[i + 1] = m.nnz();
  }
  // scale oracle
  std::vector<double> mean(g, 0), sd(g, 0);
  DenseD X(n, g);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = m.indptr[i]; p < m.indptr[i + 1]; ++p) X(i, m.indices[p]) = m.data[p];
  for (int64_t j = 0; j < g; ++j) {
    for (int64_t i = 0; i < n; ++i) mean[j] += X(i, j);
    mean[j] /= n;
    for (int64_t i = 0; i < n; ++i) sd[j] += (X(i, j) - mean[j]) * (X(i, j) - mean[j]);
    sd[j] = std::sqrt(sd[j] / (n - 1));
  }
  std::vector<float> meanf(mean.begin(), mean.end()), sdf(sd.begin(), sd.end());
  DeviceArray<float> dm(r, g, "mean"), ds(r, g, "sd"), dense(r, n * g, "dense"), xpca(r, n * k, "xpca");
  SCURRY_CUDA(cudaMemcpy(dm.data(), meanf.data(), g * 4, cudaMemcpyHostToDevice));
  SCURRY_CUDA(cudaMemcpy(ds.data(), sdf.data(), g * 4, cudaMemcpyHostToDevice));
  DeviceCsr d = upload(r, m);
  gpu::scale_to_dense(r, d, dm.data(), ds.data(), true, 10.f, dense.data());
  std::vector<float> hd(n * g);
  SCURRY_CUDA(cudaMemcpy(hd.data(), dense.data(), hd.size() * 4, cudaMemcpyDeviceToHost));
  DenseD S(n, g);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < g; ++j) {
      S(i, j) = std::min(10.0, (X(i, j) - mean[j]) / sd[j]);
      ASSERT_NEAR(hd[i * g + j], S(i, j), 1e-4) << i << "," << j;
    }
  gpu::PcaGpuResult p = gpu::pca_dense(r, dense.data(), n, g, k, true, xpca.data());
  // oracle: covariance eigen-decomposition by power iteration with deflation (float64)
  std::vector<double> mu(g, 0);
  for (int64_t j = 0; j < g; ++j) {
    for (int64_t i = 0; i < n; ++i) mu[j] += S(i, j);
    mu[j] /= n;
  }
  std::vector<double> C(g * g, 0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t a = 0; a < g; ++a) {
      const double xa = S(i, a) - mu[a];
      for (int64_t b = 0; b < g; ++b) C[a * g + b] += xa * (S(i, b) - mu[b]);
    }
  for (auto& c : C) c /= (n - 1);
  double total = 0;
  for (int64_t j = 0; j < g; ++j) total += C[j * g + j];
  EXPECT_LT(rel(p.total_variance, total), 1e-5);  // float32-level (the Gram is 3xTF32)
  std::vector<float> hx(n * k);
  SCURRY_CUDA(cudaMemcpy(hx.data(), xpca.data(), hx.size() * 4, cudaMemcpyDeviceToHost));
  for (int c = 0; c < 4; ++c) {  // the 4 leading components (well separated by construction)
    std::vector<double> v(g, 1.0), w(g);
    double lambda = 0;
    for (int it = 0; it < 3000; ++it) {
      for (int64_t a = 0; a < g; ++a) {
        w[a] = 0;
        for (int64_t b = 0; b < g; ++b) w[a] += C[a * g + b] * v[b];
      }
      double nr = 0;
      for (double x : w) nr += x * x;
      nr = std::sqrt(nr);
      lambda = nr;
      for (int64_t a = 0; a < g; ++a) v[a] = w[a] / nr;
    }
    EXPECT_LT(rel(p.variance[c], lambda), 1e-4) << "component " << c;
    double dot = 0;
    for (int64_t a = 0; a < g; ++a) dot += v[a] * p.components[a * k + c];
    EXPECT_GT(std::abs(dot), 0.9999) << "component " << c;
    // X_pca column = centred data times the component, up to sign (then deflate)
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
      double proj = 0;
      for (int64_t a = 0; a < g; ++a) proj += (S(i, a) - mu[a]) * v[a];
      num += proj * hx[i * k + c];
      den += proj * proj;
    }
    EXPECT_GT(std::abs(num / den), 0.999);
    for (int64_t a = 0; a < g; ++a)
      for (int64_t b = 0; b < g; ++b) C[a * g + b] -= lambda * v[a] * v[b];
  }
  // svd_flip: the largest-|.| entry of each column is positive
  for (int c = 0; c < k; ++c) {
    float best = 0;
    for (int64_t i = 0; i < n; ++i)
      if (std::abs(hx[i * k + c]) > std::abs(best)) best = hx[i * k + c];
    EXPECT_GT(best, 0) << c;
  }
}
