// Harmony over several GPUs (label gpu; issue 21 point 5): harmony_gpus, the cells split over 2 and 3
// CUDA contexts (test::three_gpu_contexts: on distinct devices when there are several, else all on
// device 0), on fresh seeded synthetic batches (harmony_batches.hpp: planted cell types, batch and
// donor shifts):
// - over one context it is harmony_gpu, bit for bit (float64 and float32 forms);
// - over 2 and 3 contexts two runs give the same bits (result and objective), and the result agrees
//   with one GPU's as harmony_gpu agrees with the CPU (test_integrate_gpu.cpp): the 15-NN shared
//   >= 0.95, iLISI and purity within 2%, the largest coordinate difference <= 2% of the spread; the
//   objective goes down; one key (20,000 x 20, 4 batches) and two keys (8,000 x 15); cells on 20
//   distinct points (empty clusters in the initial k-means' Lloyd steps) reproducible and close;
// - the Dataset entry (harmony_integrate over the contexts) gives harmony_gpus' float32 result; the
//   command's --gpus 1 is the one-GPU command, --gpus 2 (two devices) reproducible and close to it;
// - an error on one rank (SCURRY_HARMONY_GPUS_FAIL_RANK, a test knob) reaches the caller, no hang;
//   no context, a CPU context, a context given twice, or fewer cells than contexts are input errors
//   (the first two also without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/error.hpp"
#include "exec/context.hpp"
#include "io/h5ad.hpp"
#include "harmony_batches.hpp"
#include "pp/harmony.hpp"
#include "pp/harmony_gpu.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

std::vector<Context*> first(std::vector<Context>& ctxs, int parts) {
  std::vector<Context*> p;
  for (int q = 0; q < parts; ++q) p.push_back(&ctxs[q]);
  return p;
}

template <class M>
bool same_bits(const M& a, const M& b) {
  return a.data.size() == b.data.size() &&
         std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(a.data[0])) == 0;
}

void expect_same_run(const HarmonyResult& a, const HarmonyResult& b, const std::string& what) {
  EXPECT_TRUE(same_bits(a.Z_corr, b.Z_corr)) << what << ": Z_corr differs";
  EXPECT_EQ(a.objective_harmony, b.objective_harmony) << what;
  EXPECT_EQ(a.kmeans_rounds, b.kmeans_rounds) << what;
  EXPECT_EQ(a.iterations, b.iterations) << what;
}

// Over 2 and 3 contexts: reproducible, close to one GPU, the objective going down.
void expect_spread_runs_good(std::vector<Context>& ctxs, const test::Batches& b,
                             const std::vector<std::vector<int32_t>>& codes, const std::vector<int32_t>& levels,
                             const HarmonyOptions& opt, const char* what) {
  const HarmonyResult one = harmony_gpu(ctxs[0], b.Z, codes, levels, opt);
  for (int parts = 2; parts <= 3; ++parts) {
    const std::string w = std::string(what) + ", " + std::to_string(parts) + " contexts";
    const HarmonyResult m1 = harmony_gpus(first(ctxs, parts), b.Z, codes, levels, opt);
    const HarmonyResult m2 = harmony_gpus(first(ctxs, parts), b.Z, codes, levels, opt);
    expect_same_run(m1, m2, w + " (two runs)");
    EXPECT_GE(m1.iterations, 1) << w;
    EXPECT_LE(m1.objective_harmony.back(), m1.objective_harmony.front()) << w << ": the objective went up";
    test::expect_harmony_close(m1.Z_corr, one.Z_corr, b.batch, b.type, w.c_str());
    std::printf("%s: %d iterations (one GPU %d), objective %.6g -> %.6g (one GPU %.6g -> %.6g)\n", w.c_str(),
                m1.iterations, one.iterations, m1.objective_harmony.front(), m1.objective_harmony.back(),
                one.objective_harmony.front(), one.objective_harmony.back());
  }
}

// The cells as a Dataset: obs batch (3 levels a, b, c), obsm X_pca float32, X without genes.
Dataset dataset_of(const test::Batches& b) {
  const int64_t n = b.Z.n_rows;
  Dataset d;
  d.obs.index.resize(n);
  for (int64_t i = 0; i < n; ++i) d.obs.index[i] = "c" + std::to_string(i);
  CategoricalColumn cat;
  cat.categories = {"a", "b", "c"};
  cat.codes = b.batch;
  d.obs.set("batch", Column(cat));
  DenseF zf(n, b.Z.n_cols);
  for (size_t k = 0; k < zf.data.size(); ++k) zf.data[k] = static_cast<float>(b.Z.data[k]);
  d.X = Matrix(CsrF::zeros(n, 0));
  d.obsm["X_pca"] = Matrix(std::move(zf), DType::f32);
  return d;
}

}  // namespace

TEST(HarmonyGpus, OneContextIsHarmonyGpu) {
  SCURRY_REQUIRE_GPU();
  std::vector<Context> ctxs = test::three_gpu_contexts();
  const test::Batches b = test::batches(test::fresh_seed(), 20000, 20, 4);
  HarmonyOptions opt;
  opt.keys = {"batch"};
  expect_same_run(harmony_gpus(first(ctxs, 1), b.Z, {b.batch}, {4}, opt), harmony_gpu(ctxs[0], b.Z, {b.batch}, {4}, opt),
                  "float64, one context");
  DenseF zf(b.Z.n_rows, b.Z.n_cols), o1, o2;
  for (size_t k = 0; k < zf.data.size(); ++k) zf.data[k] = static_cast<float>(b.Z.data[k]);
  const HarmonyResult r1 = harmony_gpus(first(ctxs, 1), zf, {b.batch}, {4}, opt, o1);
  const HarmonyResult r2 = harmony_gpu(ctxs[0], zf, {b.batch}, {4}, opt, o2);
  EXPECT_TRUE(same_bits(o1, o2)) << "float32, one context";
  EXPECT_EQ(r1.objective_harmony, r2.objective_harmony);
}

TEST(HarmonyGpus, OneKeyReproducibleAndCloseToOneGpu) {
  SCURRY_REQUIRE_GPU();
  std::vector<Context> ctxs = test::three_gpu_contexts();
  const test::Batches b = test::batches(test::fresh_seed(), 20000, 20, 4);
  HarmonyOptions opt;
  opt.keys = {"batch"};
  expect_spread_runs_good(ctxs, b, {b.batch}, {4}, opt, "one key, 20000 x 20");
}

TEST(HarmonyGpus, TwoKeysReproducibleAndCloseToOneGpu) {
  SCURRY_REQUIRE_GPU();
  std::vector<Context> ctxs = test::three_gpu_contexts();
  const test::Batches b = test::batches(test::fresh_seed(), 8000, 15, 3);
  HarmonyOptions opt;
  opt.keys = {"batch", "donor"};
  opt.theta = {2.0, 1.0};
  expect_spread_runs_good(ctxs, b, {b.batch, b.donor}, {3, 2}, opt, "two keys, 8000 x 15");
}

// 3,000 cells on 20 distinct points and 60 clusters: k-means++ picks repeated centres, so the Lloyd
// iterations meet empty clusters on every rank count (each takes the farthest cell of all: the
// distances gathered from the ranks, the row broadcast by the rank holding it). Over 2 and 3
// contexts: finite, two runs the same bits, and the same clusters' worth of correction as one GPU
// (15-NN shared >= 0.95 is meaningless with 150 copies of each point: the largest coordinate
// difference <= 2% of the spread instead).
TEST(HarmonyGpus, EmptyClustersInTheInitialKmeans) {
  SCURRY_REQUIRE_GPU();
  std::vector<Context> ctxs = test::three_gpu_contexts();
  const test::Batches pts = test::batches(test::fresh_seed(), 20, 10, 2);
  std::mt19937_64 rng(test::fresh_seed());
  const int64_t n = 3000;
  DenseD Z(n, 10);
  std::vector<int32_t> batch(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = static_cast<int64_t>(rng() % 20);
    for (int64_t q = 0; q < 10; ++q) Z(i, q) = pts.Z(p, q);
    batch[i] = static_cast<int32_t>(rng() % 2);
  }
  HarmonyOptions opt;
  opt.keys = {"batch"};
  opt.nclust = 60;
  const HarmonyResult one = harmony_gpu(ctxs[0], Z, {batch}, {2}, opt);
  for (int parts = 2; parts <= 3; ++parts) {
    const std::string w = "20 distinct points, " + std::to_string(parts) + " contexts";
    const HarmonyResult a = harmony_gpus(first(ctxs, parts), Z, {batch}, {2}, opt);
    const HarmonyResult b = harmony_gpus(first(ctxs, parts), Z, {batch}, {2}, opt);
    expect_same_run(a, b, w);
    for (double v : a.Z_corr.data) ASSERT_TRUE(std::isfinite(v)) << w;
    EXPECT_LE(test::max_abs_diff(a.Z_corr, one.Z_corr), 0.02 * test::spread(one.Z_corr)) << w;
  }
}

// The Dataset entry over the contexts: float32 X_pca in, harmony_gpus' float32 path out.
TEST(HarmonyGpus, HarmonyIntegrateSpreadsOverTheContexts) {
  SCURRY_REQUIRE_GPU();
  std::vector<Context> ctxs = test::three_gpu_contexts();
  const int64_t n = 3000, dims = 12;
  const test::Batches b = test::batches(test::fresh_seed(), n, dims, 3);
  Dataset d = dataset_of(b);
  const DenseF zf = d.obsm.at("X_pca").dense_f();
  HarmonyOptions opt;
  opt.keys = {"batch"};
  const HarmonyResult r = harmony_integrate(first(ctxs, 2), d, opt);
  DenseF direct;
  const HarmonyResult g = harmony_gpus(first(ctxs, 2), zf, {b.batch}, {3}, opt, direct);
  EXPECT_TRUE(same_bits(d.obsm.at("X_pca_harmony").dense_f(), direct));
  EXPECT_EQ(r.objective_harmony, g.objective_harmony);
}

// `scurry --device gpu harmony-integrate IN -o OUT --key batch --gpus G`, from a file to a file:
// --gpus 1 (device 0) is the one-GPU command, bit for bit; with two devices visible, --gpus 2 twice
// gives the same bits, its 15-NN shared >= 0.95 with one GPU's. (parse_gpus refuses a repeated
// device, so on one GPU the command cannot put two contexts on it: the function tests above do.)
TEST(HarmonyGpus, CommandTakesGpus) {
  SCURRY_REQUIRE_GPU();
  const int64_t n = 3000, dims = 12;
  const test::Batches b = test::batches(test::fresh_seed(), n, dims, 3);
  const Dataset d = dataset_of(b);
  test::TempDir dir;
  const std::string in = dir.path("in.h5ad");
  write_h5ad(d, in);
  auto run = [&](const std::string& out, const std::string& gpus) {
    const std::string cmd = "'" + test::scurry_binary() + "' -q --device gpu harmony-integrate '" + in + "' -o '" +
                            dir.path(out) + "' --key batch" + gpus;
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return read_h5ad(dir.path(out)).obsm.at("X_pca_harmony").dense_f();
  };
  const DenseF one = run("one.h5ad", ""), g1 = run("g1.h5ad", " --gpus 1");
  EXPECT_TRUE(same_bits(one, g1)) << "--gpus 1 differs from one GPU";
  if (cuda_device_count() < 2) return;
  const DenseF two = run("two.h5ad", " --gpus 2"), two2 = run("two2.h5ad", " --gpus 2");
  EXPECT_TRUE(same_bits(two, two2)) << "two runs over 2 GPUs differ";
  auto widen = [](const DenseF& f) {
    DenseD x(f.n_rows, f.n_cols);
    for (size_t k = 0; k < f.data.size(); ++k) x.data[k] = f.data[k];
    return x;
  };
  EXPECT_GE(test::knn_overlap(test::exact_knn(widen(two), 15), test::exact_knn(widen(one), 15)), 0.95);
}

TEST(HarmonyGpus, ErrorsReachTheCaller) {
  const test::Batches b = test::batches(test::fresh_seed(), 2000, 8, 2);
  HarmonyOptions opt;
  opt.keys = {"batch"};
  Context cpu = Context::cpu(1);
  EXPECT_THROW(harmony_gpus({}, b.Z, {b.batch}, {2}, opt), InputError);
  EXPECT_THROW(harmony_gpus({&cpu, &cpu}, b.Z, {b.batch}, {2}, opt), InputError);
  if (!test::have_gpu()) return;
  std::vector<Context> ctxs = test::three_gpu_contexts();
  EXPECT_THROW(harmony_gpus({&ctxs[0], &ctxs[1], &ctxs[0]}, b.Z, {b.batch}, {2}, opt), InputError);  // one twice
  DenseD tiny(2, 4);
  for (size_t k = 0; k < tiny.data.size(); ++k) tiny.data[k] = 1.0 + static_cast<double>(k % 3);
  HarmonyOptions one;
  one.keys = {"batch"};
  one.nclust = 1;
  EXPECT_NO_THROW(harmony_gpus(first(ctxs, 2), tiny, {{0, 1}}, {2}, one));  // a cell a GPU
  EXPECT_THROW(harmony_gpus(first(ctxs, 3), tiny, {{0, 1}}, {2}, one), InputError);  // 2 cells, 3 GPUs
  for (int parts = 2; parts <= 3; ++parts)
    for (int bad = 0; bad < parts; ++bad) {
      const ScopedEnv env("SCURRY_HARMONY_GPUS_FAIL_RANK", std::to_string(bad).c_str());
      try {
        (void)harmony_gpus(first(ctxs, parts), b.Z, {b.batch}, {2}, opt);
        ADD_FAILURE() << parts << " contexts, rank " << bad << " failing: no error";
      } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("rank " + std::to_string(bad) + " fails on purpose"), std::string::npos)
            << parts << " contexts: " << msg;
      }
    }
  // The contexts are usable afterwards.
  const HarmonyResult ok = harmony_gpus(first(ctxs, 2), b.Z, {b.batch}, {2}, opt);
  EXPECT_EQ(ok.Z_corr.n_rows, 2000);
}
