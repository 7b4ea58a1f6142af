// GPU tests (label gpu): the templated preprocessing launchers of kernels.cuh in every instantiation,
// <V, I> = <float | double, int32_t | int64_t> (value type, column-index type), each against a simple
// exact CPU computation in float64 on seeded random CSR inputs. Tolerances: a value computed in V is
// within kTol<V> (float 1e-5, double 1e-12, relative to max(1, |expected|)) of the float64 oracle; a
// sum the device accumulates in float64 is within kSumTol of it whatever V is (only the order of the
// additions differs); counts are exact.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "exec/device_csr.cuh"
#include "pp/kernels.cuh"
#include "testlib.hpp"

using namespace scurry;

namespace {

template <class V_, class I_>
struct Combo {
  using V = V_;
  using I = I_;
};
using Combos = ::testing::Types<Combo<float, int32_t>, Combo<double, int32_t>, Combo<float, int64_t>, Combo<double, int64_t>>;
struct ComboNames {
  template <class T>
  static std::string GetName(int) {
    return std::string(std::is_same_v<typename T::V, float> ? "float" : "double") + "_" +
           (std::is_same_v<typename T::I, int32_t> ? "int32" : "int64");
  }
};

template <class V>
constexpr double kTol = std::is_same_v<V, float> ? 1e-5 : 1e-12;
constexpr double kSumTol = 1e-12;

double scaled_err(double got, double want) { return std::abs(got - want) / std::max(1.0, std::abs(want)); }

Context gpu_ctx() {
  ContextOptions o;
  o.device = "gpu";
  return Context::create(o);
}

template <class T>
DeviceArray<T> to_dev(CudaResources& r, const std::vector<T>& h, const char* what) {
  DeviceArray<T> d(r, std::max<size_t>(h.size(), 1), what);
  if (!h.empty())
    SCURRY_CUDA(cudaMemcpyAsync(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return d;
}
template <class T>
std::vector<T> to_host(CudaResources& r, const T* d, size_t n) {
  std::vector<T> h(n);
  if (n) SCURRY_CUDA(cudaMemcpyAsync(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return h;
}

// A host CSR matrix with values V and column indices I (sorted within rows), and its device copy.
template <class V, class I>
struct HostCsr {
  int64_t n_rows = 0, n_cols = 0;
  std::vector<int64_t> indptr{0};
  std::vector<I> indices;
  std::vector<V> data;
  int64_t nnz() const { return static_cast<int64_t>(data.size()); }
};
template <class V, class I>
struct DevCsr {
  int64_t n_rows, n_cols, nnz;
  DeviceArray<int64_t> indptr;
  DeviceArray<I> indices;
  DeviceArray<V> data;
  gpu::CsrView<V, I> view() const { return {n_rows, n_cols, nnz, indptr.data(), indices.data(), data.data()}; }
};
template <class V, class I>
DevCsr<V, I> upload(CudaResources& r, const HostCsr<V, I>& m) {
  return {m.n_rows, m.n_cols, m.nnz(), to_dev(r, m.indptr, "indptr"), to_dev(r, m.indices, "indices"),
          to_dev(r, m.data, "data")};
}

// Each entry of a row present with probability `density` (0.9 in the rows listed in `dense`: longer
// than the 4,096 entries row_qc holds in shared memory when cols is large); values from value(rng, row)
// computed in float64 and rounded to V (which may give explicit zeros).
template <class V, class I>
HostCsr<V, I> random_csr(int64_t rows, int64_t cols, double density, uint64_t seed,
                         const std::function<double(std::mt19937_64&, int64_t)>& value,
                         const std::vector<int64_t>& dense = {}) {
  std::mt19937_64 rng(seed);
  HostCsr<V, I> m;
  m.n_rows = rows, m.n_cols = cols;
  for (int64_t i = 0; i < rows; ++i) {
    const bool is_dense = std::find(dense.begin(), dense.end(), i) != dense.end();
    std::geometric_distribution<int64_t> gap(is_dense ? 0.9 : density);
    for (int64_t c = gap(rng); c < cols; c += 1 + gap(rng)) {
      m.indices.push_back(static_cast<I>(c));
      m.data.push_back(static_cast<V>(value(rng, i)));
    }
    m.indptr.push_back(m.nnz());
  }
  return m;
}

template <class T>
class KernelsTypedGpu : public ::testing::Test {};
TYPED_TEST_SUITE(KernelsTypedGpu, Combos, ComboNames);

template <class V, class I>
void check_row_qc(CudaResources& r, const HostCsr<V, I>& m, const char* what) {
  SCOPED_TRACE(what);
  std::vector<uint8_t> sets(m.n_cols, 0);
  for (int64_t g = 0; g < m.n_cols; g += 7) sets[g] |= 1;
  for (int64_t g = 0; g < std::min<int64_t>(300, m.n_cols); ++g) sets[g] |= 2;
  for (int64_t g = 5; g < m.n_cols; g += 11) sets[g] |= 4;
  DeviceArray<uint8_t> dsets = to_dev(r, sets, "sets");
  DevCsr<V, I> d = upload(r, m);
  const std::vector<int> top = {100, 50, 500, 200, 1};  // any order
  const gpu::RowQc q = gpu::row_qc(r, d.view(), dsets.data(), 3, top);
  ASSERT_EQ(q.total.size(), static_cast<size_t>(m.n_rows));
  ASSERT_EQ(q.set_total.size(), 3u);
  ASSERT_EQ(q.top_sum.size(), top.size());
  for (int64_t i = 0; i < m.n_rows; ++i) {
    std::vector<double> v(m.data.begin() + m.indptr[i], m.data.begin() + m.indptr[i + 1]);
    double tot = 0, mag = 0, nz = 0, st[3] = {0, 0, 0};
    for (int64_t p = m.indptr[i]; p < m.indptr[i + 1]; ++p) {
      const double x = m.data[p];
      tot += x, mag += std::abs(x), nz += x != 0;
      for (int s = 0; s < 3; ++s)
        if (sets[m.indices[p]] & (1u << s)) st[s] += x;
    }
    const double tol = kSumTol * std::max(1.0, mag);
    ASSERT_NEAR(q.total[i], tot, tol) << "row " << i;
    ASSERT_EQ(q.n_genes[i], nz) << "row " << i;
    for (int s = 0; s < 3; ++s) ASSERT_NEAR(q.set_total[s][i], st[s], tol) << "row " << i << " set " << s;
    std::sort(v.begin(), v.end(), std::greater<>());
    for (size_t t = 0; t < top.size(); ++t) {
      const double want = std::accumulate(v.begin(), v.begin() + std::min<size_t>(top[t], v.size()), 0.0);
      ASSERT_NEAR(q.top_sum[t][i], want, tol) << "row " << i << " (length " << v.size() << ") top " << top[t];
    }
  }
}

// Every route of row_qc: small counts (the histogram), large counts (kept apart and sorted; the dense
// row with thousands of them: radix selection on values outside shared memory), non-integer and
// negative values (radix selection; 64-bit keys for double), and values that differ only below
// float's precision (distinct for double, ties for float).
TYPED_TEST(KernelsTypedGpu, RowQcMatchesCpu) {
  SCURRY_REQUIRE_GPU();
  using V = typename TypeParam::V;
  using I = typename TypeParam::I;
  Context ctx = gpu_ctx();
  CudaResources& r = *ctx.cuda();
  const uint64_t seed = test::fresh_seed();
  const int64_t rows = 700, cols = 9000, d1 = 3, d2 = rows - 1;
  auto small = [&](std::mt19937_64& g, int64_t i) {
    return static_cast<double>(i == d1 || i == d2 ? g() % 9 : 1 + g() % 6);
  };
  check_row_qc(r, random_csr<V, I>(rows, cols, 0.05, seed, small, {d1, d2}), "small counts");
  auto large = [&](std::mt19937_64& g, int64_t i) {
    double x = small(g, i);
    if (i % 3 == 0) x *= i == d1 ? 300 : 100;
    if (i % 5 == 1 && g() % 11 == 0) x = static_cast<double>(256 + g() % 5000);
    return x;
  };
  check_row_qc(r, random_csr<V, I>(rows, cols, 0.05, seed + 1, large, {d1, d2}), "large counts");
  auto reals = [&](std::mt19937_64& g, int64_t i) {
    std::uniform_real_distribution<double> u(0, 1);
    if (i == 5) return 1.0 + static_cast<double>(g() % 1000) * 1e-9;  // below float's precision
    if (i % 2 == 0 || i == d1 || i == d2) return 10.0 * u(g);    // full float64 mantissas
    return small(g, i) * 0.37;
  };
  HostCsr<V, I> m = random_csr<V, I>(rows, cols, 0.05, seed + 2, reals, {d1, d2});
  if (m.indptr[2] > m.indptr[1]) m.data[m.indptr[1]] = V(-1);  // a negative value in row 1
  check_row_qc(r, m, "non-integer values");
}

// Every transform, every choice of second statistic and both strategies (shared-memory tiles: two of
// them at 30,000 genes; 64-bit global atomics at 12,000), with explicit zeros stored. The sums are
// fixed-point (gene_sums.cu): the same bits on a second call and from either strategy.
TYPED_TEST(KernelsTypedGpu, GeneSumsMatchCpu) {
  SCURRY_REQUIRE_GPU();
  using V = typename TypeParam::V;
  using I = typename TypeParam::I;
  Context ctx = gpu_ctx();
  CudaResources& r = *ctx.cuda();
  const uint64_t seed = test::fresh_seed();
  auto logs = [](std::mt19937_64& g, int64_t) {
    std::uniform_real_distribution<double> u(0.5, 1.5);
    return g() % 13 == 0 ? 0.0 : std::log1p(static_cast<double>(1 + g() % 20)) * u(g);
  };
  for (const int64_t cols : {int64_t(30000), int64_t(12000)}) {
    const HostCsr<V, I> m = random_csr<V, I>(1500, cols, 0.01, seed + cols, logs);
    const DevCsr<V, I> d = upload(r, m);
    std::vector<V> clip(m.n_cols);
    std::mt19937_64 rng(seed + 1);
    for (auto& c : clip) c = static_cast<V>(0.5 + 2.5 * std::uniform_real_distribution<double>(0, 1)(rng));
    DeviceArray<V> dclip = to_dev(r, clip, "clip");
    using T = gpu::GeneTransform;
    for (T f : {T::identity, T::expm1, T::clip}) {
      std::vector<double> sum(m.n_cols, 0), sq(m.n_cols, 0), nz(m.n_cols, 0);
      for (int64_t p = 0; p < m.nnz(); ++p) {
        const int64_t g = static_cast<int64_t>(m.indices[p]);
        double x = m.data[p];
        if (f == T::expm1) x = std::expm1(x);
        if (f == T::clip) x = std::min<double>(x, clip[g]);
        sum[g] += x, sq[g] += x * x, nz[g] += x != 0;
      }
      for (auto second : {gpu::SecondStat::count, gpu::SecondStat::squares, gpu::SecondStat::both}) {
        std::vector<gpu::GeneSums> got;
        for (const char* strategy : {"", "", "atomic"}) {
          if (*strategy) setenv("SCURRY_GENE_SUMS", strategy, 1);
          else unsetenv("SCURRY_GENE_SUMS");
          got.push_back(gpu::gene_sums(r, d.view(), f, dclip.data(), second));
        }
        unsetenv("SCURRY_GENE_SUMS");
        const gpu::GeneSums& s = got[0];
        const bool want_sq = second != gpu::SecondStat::count;
        const bool want_nz = second != gpu::SecondStat::squares;
        ASSERT_EQ(s.sum.size(), static_cast<size_t>(m.n_cols));
        for (int64_t g = 0; g < m.n_cols; ++g) {
          ASSERT_LE(scaled_err(s.sum[g], sum[g]), kTol<V>) << "transform " << int(f) << " gene " << g;
          if (want_sq) ASSERT_LE(scaled_err(s.sumsq[g], sq[g]), kTol<V>) << "transform " << int(f) << " gene " << g;
          if (want_nz) ASSERT_EQ(s.nnz[g], nz[g]) << "transform " << int(f) << " gene " << g;
        }
        for (size_t k = 1; k < got.size(); ++k) {
          ASSERT_EQ(std::memcmp(got[k].sum.data(), s.sum.data(), s.sum.size() * 8), 0) << "call " << k;
          ASSERT_EQ(std::memcmp(got[k].sumsq.data(), s.sumsq.data(), s.sumsq.size() * 8), 0) << "call " << k;
          ASSERT_EQ(std::memcmp(got[k].nnz.data(), s.nnz.data(), s.nnz.size() * 8), 0) << "call " << k;
        }
      }
    }
  }
}

// The fixed-point sums where float additions in any order would differ: a gene whose values span
// 2^-20 .. 2^20 (the grid follows its largest term), a gene of integer counts above 2^24 in total
// (exact), 3,000 equal values of 0.1, one of values of both signs (the carries of the two-word
// accumulator: negative terms), within the grid's error bound, and the non-finite
// cases: NaN, +inf only, -inf only, both infinities (NaN for the sum, +inf for the squares).
TYPED_TEST(KernelsTypedGpu, GeneSumsFixedPointEdgeCases) {
  SCURRY_REQUIRE_GPU();
  using V = typename TypeParam::V;
  using I = typename TypeParam::I;
  Context ctx = gpu_ctx();
  CudaResources& r = *ctx.cuda();
  const int64_t rows = 3000, cols = 8;
  std::mt19937_64 rng(test::fresh_seed());
  std::vector<std::vector<double>> col(cols, std::vector<double>(rows, 0.0));
  for (int64_t i = 0; i < rows; ++i) {
    col[0][i] = std::ldexp(1.0 + static_cast<double>(rng() % 1000) / 1000.0, static_cast<int>(rng() % 41) - 20);
    col[1][i] = static_cast<double>(5000 + rng() % 20000);  // 3000 x ~15000 = 4.5e7 > 2^24
    col[2][i] = static_cast<double>(static_cast<V>(0.1));
    col[3][i] = i % 2 ? -static_cast<double>(rng() % 100) : static_cast<double>(rng() % 100);
  }
  col[4][7] = std::nan(""), col[4][8] = 1.0;
  col[5][9] = HUGE_VAL, col[5][10] = 2.0;
  col[6][11] = -HUGE_VAL, col[6][12] = 3.0;
  col[7][13] = HUGE_VAL, col[7][14] = -HUGE_VAL;
  HostCsr<V, I> m;
  m.n_rows = rows, m.n_cols = cols;
  m.indptr.assign(1, 0);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < cols; ++c)
      if (col[c][i] != 0) m.indices.push_back(static_cast<I>(c)), m.data.push_back(static_cast<V>(col[c][i]));
    m.indptr.push_back(static_cast<int64_t>(m.indices.size()));
  }
  const DevCsr<V, I> d = upload(r, m);
  const gpu::GeneSums s = gpu::gene_sums(r, d.view(), gpu::GeneTransform::identity, nullptr, gpu::SecondStat::both);
  for (int64_t c = 0; c < 4; ++c) {
    long double sum = 0, sq = 0, mx = 0;
    for (double x : col[c]) {
      const long double v = static_cast<long double>(static_cast<V>(x));
      sum += v, sq += v * v, mx = std::max(mx, std::abs(v));
    }
    // error bound of the grid (gene_sums.cu), relative to the largest term: count 2^-32 for float
    // values, count^2 2^-62 for double values
    const double bound = std::is_same_v<V, float> ? static_cast<double>(rows) / std::ldexp(1.0, 32)
                                                  : static_cast<double>(rows) * rows / std::ldexp(1.0, 62);
    EXPECT_LE(std::abs(s.sum[c] - static_cast<double>(sum)), 2 * bound * static_cast<double>(mx) + 1e-300) << c;
    // (double values: each square is also rounded once in float64, 2^-53 of it)
    const double sq_round = std::is_same_v<V, double> ? static_cast<double>(rows) / std::ldexp(1.0, 53) : 0.0;
    EXPECT_LE(std::abs(s.sumsq[c] - static_cast<double>(sq)), (2 * bound + sq_round) * static_cast<double>(mx * mx) + 1e-300)
        << c;
  }
  EXPECT_EQ(s.sum[1], static_cast<double>([&] { long long t = 0; for (double x : col[1]) t += static_cast<long long>(x); return t; }()));
  EXPECT_TRUE(std::isnan(s.sum[4])) << s.sum[4];
  EXPECT_TRUE(std::isnan(s.sumsq[4]));
  EXPECT_EQ(s.sum[5], HUGE_VAL);
  EXPECT_EQ(s.sumsq[5], HUGE_VAL);
  EXPECT_EQ(s.sum[6], -HUGE_VAL);
  EXPECT_EQ(s.sumsq[6], HUGE_VAL);
  EXPECT_TRUE(std::isnan(s.sum[7]));
  EXPECT_EQ(s.sumsq[7], HUGE_VAL);
  for (int64_t c = 4; c < 8; ++c) EXPECT_EQ(s.nnz[c], 2.0) << c;
}

TYPED_TEST(KernelsTypedGpu, RowsGeneNnzAddsTheSelectedRowsCounts) {
  SCURRY_REQUIRE_GPU();
  using V = typename TypeParam::V;
  using I = typename TypeParam::I;
  Context ctx = gpu_ctx();
  CudaResources& r = *ctx.cuda();
  const uint64_t seed = test::fresh_seed();
  auto vals = [](std::mt19937_64& g, int64_t) { return static_cast<double>(g() % 5); };  // a fifth explicit zeros
  const HostCsr<V, I> m = random_csr<V, I>(2000, 3000, 0.03, seed, vals);
  const DevCsr<V, I> d = upload(r, m);
  std::mt19937_64 rng(seed + 1);
  std::vector<int64_t> sel;
  for (int64_t i = 0; i < m.n_rows; ++i)
    if (rng() % 3 == 0) sel.push_back(i);
  std::vector<unsigned long long> base(m.n_cols);
  for (auto& b : base) b = rng() % 7;  // the launcher adds to what is there
  std::vector<double> want(base.begin(), base.end());
  for (int64_t i : sel)
    for (int64_t p = m.indptr[i]; p < m.indptr[i + 1]; ++p) want[m.indices[p]] += m.data[p] != V(0);
  DeviceArray<int64_t> drows = to_dev(r, sel, "rows");
  DeviceArray<unsigned long long> cnt = to_dev(r, base, "counts");
  gpu::rows_gene_nnz(r, d.view(), drows.data(), static_cast<int64_t>(sel.size()), cnt.data());
  const std::vector<unsigned long long> got = to_host(r, cnt.data(), base.size());
  for (int64_t g = 0; g < m.n_cols; ++g) ASSERT_EQ(static_cast<double>(got[g]), want[g]) << "gene " << g;
}

TYPED_TEST(KernelsTypedGpu, RowTotalsAndNormalizeLog1pMatchCpu) {
  SCURRY_REQUIRE_GPU();
  using V = typename TypeParam::V;
  using I = typename TypeParam::I;
  Context ctx = gpu_ctx();
  CudaResources& r = *ctx.cuda();
  const uint64_t seed = test::fresh_seed();
  auto vals = [](std::mt19937_64& g, int64_t i) {
    if (i == 10) return 0.0;  // a row of explicit zeros: total 0, left as it is
    std::uniform_real_distribution<double> u(0, 1);
    return i % 2 ? static_cast<double>(1 + g() % 30) : 40.0 * u(g);
  };
  HostCsr<V, I> m = random_csr<V, I>(1200, 4000, 0.05, seed, vals, {7});
  const double target = 1e4;
  std::vector<double> tot(m.n_rows, 0), mag(m.n_rows, 0);
  for (int64_t i = 0; i < m.n_rows; ++i)
    for (int64_t p = m.indptr[i]; p < m.indptr[i + 1]; ++p) tot[i] += m.data[p], mag[i] += std::abs(double(m.data[p]));
  for (const bool log1p : {true, false}) {
    SCOPED_TRACE(log1p ? "log1p" : "no log1p");
    DevCsr<V, I> d = upload(r, m);
    DeviceArray<double> dt(r, m.n_rows, "totals");
    gpu::row_totals(r, d.view(), dt.data());
    const std::vector<double> t0 = to_host(r, dt.data(), m.n_rows);
    std::vector<double> totals;
    gpu::normalize_log1p(r, d.view(), target, log1p, &totals);
    ASSERT_EQ(totals.size(), static_cast<size_t>(m.n_rows));
    const std::vector<V> out = to_host(r, d.data.data(), m.data.size());
    for (int64_t i = 0; i < m.n_rows; ++i) {
      ASSERT_NEAR(t0[i], tot[i], kSumTol * std::max(1.0, mag[i])) << "row " << i;
      ASSERT_NEAR(totals[i], tot[i], kSumTol * std::max(1.0, mag[i])) << "row " << i;
      for (int64_t p = m.indptr[i]; p < m.indptr[i + 1]; ++p) {
        const double x = tot[i] > 0 ? m.data[p] * target / tot[i] : m.data[p];
        const double want = log1p ? std::log1p(x) : x;
        ASSERT_LE(scaled_err(out[p], want), kTol<V>) << "row " << i << " entry " << p << ": " << out[p] << " vs " << want;
      }
    }
  }
}

TYPED_TEST(KernelsTypedGpu, ScaleToDenseMatchesCpu) {
  SCURRY_REQUIRE_GPU();
  using V = typename TypeParam::V;
  using I = typename TypeParam::I;
  Context ctx = gpu_ctx();
  CudaResources& r = *ctx.cuda();
  const uint64_t seed = test::fresh_seed();
  auto logs = [](std::mt19937_64& g, int64_t) {
    std::uniform_real_distribution<double> u(0.5, 1.5);
    return std::log1p(static_cast<double>(1 + g() % 20)) * u(g);
  };
  const HostCsr<V, I> m = random_csr<V, I>(500, 700, 0.1, seed, logs);
  const int64_t n = m.n_rows, g = m.n_cols;
  std::vector<double> X(n * g, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = m.indptr[i]; p < m.indptr[i + 1]; ++p) X[i * g + m.indices[p]] = m.data[p];
  std::vector<V> mean(g), sd(g);
  for (int64_t j = 0; j < g; ++j) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; ++i) s += X[i * g + j], s2 += X[i * g + j] * X[i * g + j];
    const double mu = s / n, var = std::max(0.0, (s2 / n - mu * mu) * n / (n - 1));
    mean[j] = static_cast<V>(mu), sd[j] = static_cast<V>(var > 0 ? std::sqrt(var) : 1.0);
  }
  const DevCsr<V, I> d = upload(r, m);
  DeviceArray<V> dm = to_dev(r, mean, "mean"), ds = to_dev(r, sd, "sd"), out(r, n * g, "dense");
  for (const bool center : {true, false})
    for (const double max_value : {2.5, 0.0}) {
      SCOPED_TRACE(::testing::Message() << "center " << center << " max_value " << max_value);
      gpu::scale_to_dense(r, d.view(), dm.data(), ds.data(), center, static_cast<V>(max_value), out.data());
      const std::vector<V> h = to_host(r, out.data(), n * g);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < g; ++j) {
          double want = center ? (X[i * g + j] - mean[j]) / double(sd[j]) : X[i * g + j] / double(sd[j]);
          if (max_value > 0) want = std::min(want, max_value);
          ASSERT_LE(scaled_err(h[i * g + j], want), kTol<V>) << i << "," << j << ": " << h[i * g + j] << " vs " << want;
        }
    }
}

// The X_pca post-processing (pca.cu), in float and double.
template <class V>
class PcaPostTypedGpu : public ::testing::Test {};
using Values = ::testing::Types<float, double>;
TYPED_TEST_SUITE(PcaPostTypedGpu, Values);

TYPED_TEST(PcaPostTypedGpu, ShiftFlipAndColumnMaxAbsMatchCpu) {
  SCURRY_REQUIRE_GPU();
  using V = TypeParam;
  Context ctx = gpu_ctx();
  CudaResources& r = *ctx.cuda();
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N01(0, 1);
  const int64_t n = 5003;  // not a multiple of the 128 row chunks
  const int k = 7;
  std::vector<V> x(n * k);
  for (auto& v : x) v = static_cast<V>(N01(rng));
  // ties of |value| (the first row wins): column 0 the same magnitude negative at row 100, positive at
  // row 4000; column 1 positive first (row 17), negative later (row 2500); column 2 all zeros (row 0)
  for (int64_t i = 0; i < n; ++i) x[i * k + 2] = V(0);
  x[100 * k + 0] = V(-50), x[4000 * k + 0] = V(50);
  x[17 * k + 1] = V(40), x[2500 * k + 1] = V(-40);
  std::vector<V> shift(k), sign(k);
  for (int j = 0; j < k; ++j) shift[j] = static_cast<V>(N01(rng)), sign[j] = j % 2 ? V(-1) : V(1);
  DeviceArray<V> dx = to_dev(r, x, "x"), dshift = to_dev(r, shift, "shift"), dsign = to_dev(r, sign, "sign");

  auto oracle = [&](const std::vector<V>& a, int64_t rows) {
    std::vector<gpu::ColumnMaxAbs> best(k, gpu::ColumnMaxAbs{-1.0, 0.0, std::numeric_limits<int64_t>::max()});
    for (int j = 0; j < k; ++j)
      for (int64_t i = 0; i < rows; ++i) {
        const double v = a[i * k + j];
        if (std::abs(v) > best[j].abs) best[j] = {std::abs(v), v, i};
      }
    return best;
  };
  auto check = [&](const std::vector<gpu::ColumnMaxAbs>& got, const std::vector<gpu::ColumnMaxAbs>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(got[j].abs, want[j].abs) << "column " << j;
      EXPECT_EQ(got[j].val, want[j].val) << "column " << j;
      EXPECT_EQ(got[j].row, want[j].row) << "column " << j;
    }
  };
  const auto want0 = oracle(x, n);
  EXPECT_EQ(want0[0].row, 100);
  EXPECT_EQ(want0[1].row, 17);
  EXPECT_EQ(want0[2].row, 0);
  check(gpu::column_max_abs(r, static_cast<const V*>(dx.data()), n, k), want0);
  check(gpu::column_max_abs(r, static_cast<const V*>(dx.data()), 0, k), oracle(x, 0));  // no rows

  // x - shift, then times sign: one rounding each in V, the same on the host
  gpu::subtract_columns(r, dx.data(), n, k, static_cast<const V*>(dshift.data()));
  gpu::scale_columns(r, dx.data(), n, k, static_cast<const V*>(dsign.data()));
  const std::vector<V> got = to_host(r, dx.data(), x.size());
  std::vector<V> want(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int j = 0; j < k; ++j) want[i * k + j] = static_cast<V>(static_cast<V>(x[i * k + j] - shift[j]) * sign[j]);
  for (size_t p = 0; p < x.size(); ++p) ASSERT_EQ(got[p], want[p]) << "entry " << p;
  check(gpu::column_max_abs(r, static_cast<const V*>(dx.data()), n, k), oracle(want, n));
}

}  // namespace
