// GPU tests (label gpu): the preprocessing chain sharded over several ranks (preprocess_gpu_sharded:
// one host thread per context, ThreadComm between them) against the one-GPU chain (preprocess_gpu):
// 2 or 3 ranks on the SAME GPU (device 0 repeated: runs on a one-GPU machine), and, where two GPUs are
// visible, ranks on distinct GPUs (the NCCL Gram sum). The results may differ only by the order of
// floating-point additions, within the GPU-vs-CPU tests' tolerances: obs/var numeric columns within
// 1e-5 relative (dispersions_norm 1e-4), the same cells, the same HVG flags, raw/counts/scaled X within
// float rounding, PCA variance ratios within 1e-4 relative and the first 20 X_pca columns correlated
// above 0.999 with the same sign.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "exec/comm_nccl.hpp"
#include "exec/comm_thread.hpp"
#include "pp/kernels.cuh"
#include "io/h5ad.hpp"
#include "pp/preprocess.hpp"
#include "sim/simulate.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

Context gpu_ctx(int device) {
  ContextOptions o;
  o.device = "gpu";
  o.threads = 2;
  o.cuda.device = device;
  return Context::create(o);
}

// |a - b| <= rtol * gain[i] * max(|b|, 1e-3 * max|b|) elementwise (NaN equals NaN; gain 1 when not given).
void expect_close(const std::vector<double>& a, const std::vector<double>& b, double rtol, const std::string& what,
                  const std::vector<double>* gain = nullptr) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = 0;
  for (double y : b)
    if (std::isfinite(y)) scale = std::max(scale, std::abs(y));
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = std::isnan(a[i]) && std::isnan(b[i]);
    const double tol = rtol * (gain ? (*gain)[i] : 1.0) * std::max(std::abs(b[i]), 1e-3 * scale);
    if (!both_nan && !(std::abs(a[i] - b[i]) <= tol)) {
      if (!bad) first = i;
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": first at " << first << ": " << a[first] << " vs " << b[first];
}

void expect_tables_close(const Table& a, const Table& b, const std::string& what) {
  EXPECT_EQ(a.index, b.index) << what;
  ASSERT_EQ(a.names(), b.names()) << what;
  for (const auto& name : b.names()) {
    const Column &x = a.at(name), &y = b.at(name);
    ASSERT_EQ(x.c.index(), y.c.index()) << what << "['" << name << "']";
    if (const auto* ny = std::get_if<NumericColumn>(&y.c)) {
      // The GPU-vs-CPU tests' tolerances (tests/pp/test_preprocess_gpu.cpp): float32 partial sums
      // split over other rows differ in the last bits.
      const double rtol = name.find("dispersions_norm") != std::string::npos ? 1e-4 : 1e-5;
      // std = sqrt(E[x^2] - mean^2): the float32 partial sums' error in E[x^2] grows by E[x^2] / var
      // in the difference (seed-dependent: genes with a large mean and a small spread).
      std::vector<double> gain;
      if (name == "std" && b.has("mean")) {
        const auto& mu = std::get<NumericColumn>(b.at("mean").c).values;
        for (size_t i = 0; i < ny->values.size(); ++i) {
          const double sd = ny->values[i];
          gain.push_back(sd > 0 ? std::max(1.0, (mu[i] * mu[i] + sd * sd) / (sd * sd)) : 1.0);
        }
      }
      // dispersions (cell_ranger: var / mean, var from the same E[x^2] - mean^2): the same gain,
      // (mean^2 + var) / var = mean / dispersion + 1 (seen: 2.5e-5 relative at dispersion 1.1e-3).
      if (name == "dispersions" && b.has("means")) {
        const auto& mu = std::get<NumericColumn>(b.at("means").c).values;
        for (size_t i = 0; i < ny->values.size(); ++i) {
          const double dv = ny->values[i];
          gain.push_back(dv > 0 && std::isfinite(mu[i]) ? std::max(1.0, mu[i] / dv + 1.0) : 1.0);
        }
      }
      expect_close(std::get<NumericColumn>(x.c).values, ny->values, rtol, what + "['" + name + "']",
                   gain.empty() ? nullptr : &gain);
      EXPECT_EQ(std::get<NumericColumn>(x.c).dtype, ny->dtype) << what << "['" << name << "']";
    } else if (const auto* by = std::get_if<BoolColumn>(&y.c)) {
      EXPECT_EQ(std::get<BoolColumn>(x.c).values, by->values) << what << "['" << name << "']";
    } else if (const auto* sy = std::get_if<StringColumn>(&y.c)) {
      EXPECT_EQ(std::get<StringColumn>(x.c).values, sy->values) << what << "['" << name << "']";
    } else {
      const auto& cx = std::get<CategoricalColumn>(x.c);
      const auto& cy = std::get<CategoricalColumn>(y.c);
      EXPECT_EQ(cx.categories, cy.categories) << what << "['" << name << "']";
      EXPECT_EQ(cx.codes, cy.codes) << what << "['" << name << "']";
    }
  }
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double w = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) w = std::max<double>(w, std::abs(a[i] - b[i]));
  return w;
}

// The sharded result `s` against the one-GPU result `o`.
void compare(const Dataset& s, const Dataset& o, bool raw_and_counts) {
  ASSERT_EQ(s.n_obs(), o.n_obs());
  ASSERT_EQ(s.n_vars(), o.n_vars());
  expect_tables_close(s.obs, o.obs, "obs");
  expect_tables_close(s.var, o.var, "var");  // includes highly_variable (identical flags), mean, std
  if (raw_and_counts) {
    ASSERT_TRUE(s.raw && o.raw);
    expect_tables_close(s.raw->var, o.raw->var, "raw.var");
    const CsrF &sr = s.raw->X.csr_f(), &orr = o.raw->X.csr_f();
    EXPECT_EQ(sr.indptr, orr.indptr);
    EXPECT_EQ(sr.indices, orr.indices);
    EXPECT_LT(max_abs_diff(sr.data, orr.data), 1e-6) << "raw.X (log-normalised)";
    const CsrF &sc = s.layers.at("counts").csr_f(), &oc = o.layers.at("counts").csr_f();
    EXPECT_EQ(sc.indptr, oc.indptr);
    EXPECT_EQ(sc.data, oc.data) << "layers['counts']";
    // z = (x - mean) / std: off by about |z| times std's relative error plus mean's error over std,
    // and std's error grows by E[x^2] / var (see expect_tables_close): per column, 1e-5 of
    // (1 + |z|) x that gain.
    const DenseF &sx = s.X.dense_f(), &ox = o.X.dense_f();
    ASSERT_EQ(sx.data.size(), ox.data.size());
    const auto& mu = std::get<NumericColumn>(o.var.at("mean").c).values;
    const auto& sd = std::get<NumericColumn>(o.var.at("std").c).values;
    int64_t bad = 0;
    for (int64_t i = 0; i < ox.n_rows; ++i)
      for (int64_t j = 0; j < ox.n_cols; ++j) {
        const double z = ox(i, j), gain = sd[j] > 0 ? std::max(1.0, (mu[j] * mu[j] + sd[j] * sd[j]) / (sd[j] * sd[j])) : 1.0;
        bad += !(std::abs(sx(i, j) - z) <= 1e-5 * (1.0 + std::abs(z)) * gain);
      }
    EXPECT_EQ(bad, 0) << "scaled X";
  }
  // PCA
  const auto& su = s.uns.at("pca").dict();
  const auto& ou = o.uns.at("pca").dict();
  // (the GPU-vs-CPU test's 1e-4: the fp16 Gram's float32 chunk sums over other row splits differ by
  // up to ~1e-5 relative in the smaller eigenvalues, measured on the H200)
  expect_close(std::get<NumArray>(su.at("variance_ratio").v).data, std::get<NumArray>(ou.at("variance_ratio").v).data,
               1e-4, "uns['pca']['variance_ratio']");
  expect_close(std::get<NumArray>(su.at("variance").v).data, std::get<NumArray>(ou.at("variance").v).data, 1e-4,
               "uns['pca']['variance']");
  const DenseF &sp = s.obsm.at("X_pca").dense_f(), &op = o.obsm.at("X_pca").dense_f();
  ASSERT_EQ(sp.n_rows, op.n_rows);
  ASSERT_EQ(sp.n_cols, op.n_cols);
  // As the GPU-vs-CPU test: each of the first 20 components correlated above 0.999, and the same sign.
  for (int64_t j = 0; j < std::min<int64_t>(20, op.n_cols); ++j) {
    double sab = 0, saa = 0, sbb = 0;
    for (int64_t i = 0; i < op.n_rows; ++i) sab += sp(i, j) * op(i, j), saa += sp(i, j) * sp(i, j), sbb += op(i, j) * op(i, j);
    EXPECT_GT(sab / std::sqrt(saa * sbb), 0.999) << "X_pca column " << j << " (same sign expected)";
  }
}

struct Runs {
  Dataset one, sharded;
  Timings t;
};

Runs run_both(const Dataset& input, const PreprocessOptions& o, const std::vector<int>& devices) {
  Runs r;
  Context one = gpu_ctx(0);
  r.one = input;
  preprocess_gpu(one, r.one, o, nullptr);
  std::vector<Context> ctxs;
  for (int dev : devices) ctxs.push_back(gpu_ctx(dev));
  std::vector<Context*> ptrs;
  for (auto& c : ctxs) ptrs.push_back(&c);
  r.sharded = input;
  preprocess_gpu_sharded(ptrs, r.sharded, o, &r.t);
  return r;
}

std::string meta(const Timings& t, const std::string& k) {
  auto it = t.meta().find(k);
  return it == t.meta().end() ? std::string("(none)") : it->second;
}

Dataset synthetic(int64_t cells, int64_t genes, double nnz_per_cell) {
  return test::simulated_counts(cells, genes, nnz_per_cell);
}

}  // namespace

TEST(PreprocessGpus, TwoRanksOnOneGpuEqualOneGpuOnSharedData) {
  SCURRY_REQUIRE_GPU();
  const Dataset d = read_h5ad(test::test_data("pbmc3k_first1000.h5ad"));
  PreprocessOptions o;
  o.qc_vars = {"mt"};
  Runs r = run_both(d, o, {0, 0});
  compare(r.sharded, r.one, true);
  EXPECT_EQ(meta(r.t, "gpus"), "2");
  EXPECT_EQ(meta(r.t, "gram_sum"), "host");  // one GPU twice: NCCL cannot be used
  EXPECT_EQ(meta(r.t, "nnz_input"), std::to_string(d.X.nnz()));  // over both ranks
}

TEST(PreprocessGpus, ThreeRanksOnOneGpuEqualOneGpuOnSyntheticDataMedianTargetCellRanger) {
  SCURRY_REQUIRE_GPU();
  const Dataset d = synthetic(6000, 8000, 900);
  PreprocessOptions o;
  o.qc_vars = {"mt"};
  o.hvg.flavor = "cell_ranger";
  o.hvg.n_top_genes = 1500;
  o.normalize.target_sum.reset();  // the median over every rank's totals
  o.normalize.key_added = "n_counts_used";
  o.filter_cells.min_genes = 700;  // removes cells on every rank
  o.pca.n_comps = 30;
  Runs r = run_both(d, o, {0, 0, 0});
  ASSERT_LT(r.one.n_obs(), d.n_obs()) << "the filter should remove cells";
  compare(r.sharded, r.one, true);
}

TEST(PreprocessGpus, TwoRanksWithGeneCountFilterAndNoRawEqualOneGpu) {
  SCURRY_REQUIRE_GPU();
  const Dataset d = synthetic(3000, 5000, 600);
  PreprocessOptions o;
  o.filter_cells.min_genes = 400;
  o.filter_genes.min_counts = 20;  // the filter_genes pass over the matrix (sums over ranks)
  o.hvg.n_top_genes = 1000;
  o.raw = false;
  o.counts_layer = false;
  o.scaled_x = false;
  o.pca.n_comps = 20;
  Runs r = run_both(d, o, {0, 0});
  compare(r.sharded, r.one, false);
  EXPECT_TRUE(r.sharded.X.empty());
}

TEST(PreprocessGpus, SimulatedOnDeviceTwoRanksEqualOneGpu) {
  SCURRY_REQUIRE_GPU();
  Context ctx = gpu_ctx(0);
  SimulateOptions s;
  s.n_cells = 4000;
  s.n_genes = 6000;
  s.nnz_per_cell = 800;
  s.seed = test::fresh_seed();
  DeviceSimulated sim = simulate_on_device(ctx, s);
  PreprocessOptions o;
  o.qc_vars = {"mt"};
  o.raw = false;
  o.counts_layer = false;
  o.scaled_x = false;
  o.hvg.n_top_genes = 1000;
  o.pca.n_comps = 20;
  Dataset one, sharded;
  preprocess_simulated(ctx, sim, one, o, nullptr, /*consume=*/false);
  Context second = gpu_ctx(0);
  std::vector<Context*> ptrs{&ctx, &second};
  Timings t;
  preprocess_simulated_sharded(ptrs, sim, sharded, o, &t, /*consume=*/true);
  EXPECT_FALSE(sim.matrix) << "consume: the simulated matrix is freed";
  compare(sharded, one, false);
  bool copied = false;
  for (const auto& st : t.steps()) copied |= st.name == "device_copy";
  EXPECT_TRUE(copied);
}

// The matrix made in row parts, one per GPU (simulate_on_devices: every cell from its own random
// streams), is the whole simulation's: same nonzeros and clusters, and the chain over the parts (each
// rank starts from its own part: a copy, then the part itself) equals one GPU on the whole matrix.
TEST(PreprocessGpus, SimulatedInPartsEqualsTheWholeSimulation) {
  SCURRY_REQUIRE_GPU();
  Context ctx = gpu_ctx(0);
  Context second = gpu_ctx(0);
  std::vector<Context*> ptrs{&ctx, &second};
  SimulateOptions s;
  s.n_cells = 3001;
  s.n_genes = 5000;
  s.nnz_per_cell = 700;
  s.seed = test::fresh_seed();
  DeviceSimulated whole = simulate_on_device(ctx, s);
  DeviceSimulated parts = simulate_on_devices(ptrs, s);
  ASSERT_EQ(parts.parts.size(), 2u);
  EXPECT_EQ(parts.nnz, whole.nnz);
  EXPECT_EQ(parts.part_begin, (std::vector<int64_t>{0, 1500, 3001}));
  const auto& ca = std::get<CategoricalColumn>(whole.frame.obs.at("cluster").c);
  const auto& cb = std::get<CategoricalColumn>(parts.frame.obs.at("cluster").c);
  EXPECT_EQ(ca.codes, cb.codes);
  PreprocessOptions o;
  o.qc_vars = {"mt"};
  o.raw = false;
  o.counts_layer = false;
  o.scaled_x = false;
  o.hvg.n_top_genes = 800;
  o.pca.n_comps = 15;
  Dataset one;
  preprocess_simulated(ctx, whole, one, o, nullptr, /*consume=*/true);
  for (bool consume : {false, true}) {
    Dataset sharded;
    preprocess_simulated_sharded(ptrs, parts, sharded, o, nullptr, consume);
    compare(sharded, one, false);
    EXPECT_EQ(parts.parts[0] == nullptr, consume);
  }
}

TEST(PreprocessGpus, ARankLeftWithoutCellsIsAnInputErrorOnEveryRank) {
  SCURRY_REQUIRE_GPU();
  // The first half of the cells have 500 genes each, the second half 50: split by nonzeros, rank 0
  // gets only big cells, and max_genes = 100 removes them all.
  const int64_t n = 400, g = 1000;
  CsrF X;
  X.n_rows = n, X.n_cols = g;
  X.indptr.push_back(0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = i < n / 2 ? 500 : 50;
    for (int64_t j = 0; j < k; ++j) {
      X.indices.push_back(static_cast<int32_t>((j * 7 + i) % g));
      X.data.push_back(1.f + static_cast<float>((i + j) % 3));
    }
    std::sort(X.indices.end() - k, X.indices.end());
    X.indptr.push_back(static_cast<int64_t>(X.indices.size()));
  }
  Dataset d;
  d.X = Matrix(std::move(X), DType::f32);
  for (int64_t i = 0; i < n; ++i) d.obs.index.push_back("c" + std::to_string(i));
  for (int64_t j = 0; j < g; ++j) d.var.index.push_back("g" + std::to_string(j));
  PreprocessOptions o;
  o.filter_cells.min_genes = 10;
  o.filter_cells.max_genes = 100;
  o.hvg.n_top_genes = 100;
  o.pca.n_comps = 5;
  Context a = gpu_ctx(0), b = gpu_ctx(0);
  std::vector<Context*> ptrs{&a, &b};
  try {
    preprocess_gpu_sharded(ptrs, d, o, nullptr);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("left no cell"), std::string::npos) << e.what();
  }
}

TEST(PreprocessGpus, TwoGpusEqualOneGpu) {
  SCURRY_REQUIRE_GPU();
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const Dataset d = read_h5ad(test::test_data("pbmc3k_first1000.h5ad"));
  PreprocessOptions o;
  o.qc_vars = {"mt"};
  Runs r = run_both(d, o, {0, 1});
  compare(r.sharded, r.one, true);
  EXPECT_EQ(meta(r.t, "gram_sum"), nccl_built() ? "nccl" : "host");
}

// scale without zero_center (the sparse scale; the PCA densifies chunk by chunk on each rank, the Gram
// summed over the ranks): 2 ranks (both GPUs when there are 2) equal one GPU.
TEST(PreprocessGpus, TwoRanksWithoutZeroCenterEqualOneGpu) {
  SCURRY_REQUIRE_GPU();
  const Dataset d = synthetic(5000, 7000, 800);
  PreprocessOptions o;
  o.qc_vars = {"mt"};
  o.hvg.flavor = "cell_ranger";
  o.hvg.n_top_genes = 1200;
  o.pca.n_comps = 30;
  o.scale.zero_center = false;
  Runs r = run_both(d, o, {0, cuda_device_count() >= 2 ? 1 : 0});
  compare(r.sharded, r.one, false);
  ASSERT_TRUE(r.sharded.X.is_sparse() && r.one.X.is_sparse());
  const CsrF &sx = r.sharded.X.csr_f(), &ox = r.one.X.csr_f();
  EXPECT_EQ(sx.indptr, ox.indptr);
  EXPECT_EQ(sx.indices, ox.indices);
  // x / std: std's relative error (see expect_tables_close) times the value
  double worst = 0;
  for (size_t p = 0; p < ox.data.size(); ++p) worst = std::max<double>(worst, std::abs(sx.data[p] - ox.data[p]) / (1.0 + std::abs(ox.data[p])));
  EXPECT_LT(worst, 1e-4) << "scaled X (sparse)";
}

TEST(PreprocessGpus, PcaDenseOverRanksWithAnEmptyRankEqualsOneRank) {
  SCURRY_REQUIRE_GPU();
  // Dense n x g with decreasing column scales (well separated eigenvalues); 3 ranks holding 400, 0 and
  // 500 rows, each with its own resources on device 0, the Gram summed through the host (ThreadComm).
  const int64_t n = 900, g = 300;
  const int k = 10;
  std::mt19937_64 rng(test::fresh_seed());
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> X(static_cast<size_t>(n * g));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < g; ++j) X[i * g + j] = 0.5f + nd(rng) * 4.f / (1.f + 0.05f * static_cast<float>(j));
  auto run = [&](CudaResources& r, int64_t r0, int64_t r1, const gpu::PcaRanks* ranks, gpu::PcaGpuResult& res) {
    const int64_t rows = r1 - r0;
    DeviceArray<float> dx(r, static_cast<size_t>(rows * g), "X"), dp(r, static_cast<size_t>(rows * k), "X_pca");
    if (rows) SCURRY_CUDA(cudaMemcpyAsync(dx.data(), X.data() + r0 * g, rows * g * 4, cudaMemcpyHostToDevice, r.stream));
    res = gpu::pca_dense(r, dx.data(), rows, g, k, true, dp.data(), ranks);
    std::vector<float> out(static_cast<size_t>(rows * k));
    if (rows) SCURRY_CUDA(cudaMemcpyAsync(out.data(), dp.data(), out.size() * 4, cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    return out;
  };
  gpu::PcaGpuResult one;
  std::vector<float> p1;
  {
    auto r = make_cuda_resources(CudaOptions{});
    p1 = run(*r, 0, n, nullptr, one);
  }
  const std::vector<int64_t> bounds = {0, 400, 400, n};
  auto comms = make_thread_comms(3);
  std::vector<gpu::PcaGpuResult> res(3);
  std::vector<std::vector<float>> parts(3);
  std::vector<std::string> err(3);
  std::vector<std::thread> th;
  for (int q = 0; q < 3; ++q)
    th.emplace_back([&, q] {
      try {
        auto r = make_cuda_resources(CudaOptions{});
        gpu::PcaRanks ranks;
        ranks.comm = comms[q].get();
        parts[q] = run(*r, bounds[q], bounds[q + 1], &ranks, res[q]);
      } catch (const std::exception& e) {
        err[q] = e.what();
        comms[q]->fail_all();
      }
    });
  for (auto& t : th) t.join();
  for (int q = 0; q < 3; ++q) ASSERT_EQ(err[q], "") << "rank " << q;
  std::vector<float> p3;
  for (auto& p : parts) p3.insert(p3.end(), p.begin(), p.end());
  ASSERT_EQ(p3.size(), p1.size());
  for (int q = 0; q < 3; ++q) {
    // (float32 partial sums over other row splits: ~1e-7 relative differences)
    expect_close(res[q].variance, one.variance, 1e-4, "variance, rank " + std::to_string(q));
    EXPECT_NEAR(res[q].total_variance, one.total_variance, 1e-5 * one.total_variance);
    expect_close(res[q].mean, one.mean, 1e-5, "mean, rank " + std::to_string(q));
    EXPECT_EQ(res[q].components, res[0].components) << "every rank the same components";
  }
  for (int j = 0; j < k; ++j) {
    double big = 0, diff = 0;
    for (int64_t i = 0; i < n; ++i) {
      big = std::max<double>(big, std::abs(p1[i * k + j]));
      diff = std::max<double>(diff, std::abs(p3[i * k + j] - p1[i * k + j]));
    }
    EXPECT_LE(diff, 1e-4 * big) << "X_pca column " << j << " (same sign expected)";
  }
}
