// scurry bench --integrate harmony|regress-out|combat: the batch tools' kernels on synthetic data
// made in memory (no file), on --device's backend (issue 21 point 5). --synthetic CELLSxCOLS: COLS
// are the PCs for harmony (X_pca: 12 cell types in CELLS x COLS float64, each --integrate-batches
// batch shifted by its own offset), the genes for regress-out (two numeric covariates, the design
// [1, c1, c2]) and combat (dense float32 with per-batch location and scale effects). One untimed
// run, then --repeat timed runs of the whole call (host arrays in and out: on the GPU the upload
// and download are part of it); the median is reported, with regress-out's device time alone (CUDA
// events, upload and download left out) and the floor of the bytes each must move. A shortcut
// against the user's command (`scurry harmony-integrate IN -o OUT --key batch --device gpu`): no
// file read or write, no Dataset. --gpus N (harmony only): harmony_gpus over those GPUs' contexts.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dataset.hpp"
#include "core/error.hpp"
#include "core/matrix.hpp"
#include "io/h5ad.hpp"
#include "exec/context.hpp"
#include "exec/parallel.hpp"
#include "pp/combat.hpp"
#include "pp/harmony.hpp"
#include "pp/harmony_gpu.hpp"
#include "pp/regress_out.hpp"

namespace scurry::cli {

namespace {

constexpr double kBandwidth = 4.3e12;  // one H200's device copy rate (read + write), as cmd_bench.cpp
constexpr int kTypes = 12;

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

void bench_integrate(Context& ctx, const std::vector<Context*>& gpus, const std::string& step, int64_t cells,
                     int64_t cols, int batches, int repeat, uint64_t seed, const std::string& json,
                     const std::string& write) {
  if (batches < 2) throw InputError("--integrate-batches must be at least 2");
  if (repeat < 1) throw InputError("--repeat must be at least 1");
  if (step != "harmony" && step != "regress-out" && step != "combat")
    throw InputError("--integrate " + step + ": give harmony, regress-out or combat");
  const bool gpu = ctx.backend() == Backend::cuda;
  const bool multi = gpus.size() > 1;  // --gpus N: Harmony over them (harmony_gpus)
  if (multi && step != "harmony") throw InputError("--gpus with --integrate: only harmony runs over several GPUs");
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0, 1);
  std::vector<int32_t> batch(static_cast<size_t>(cells)), type(static_cast<size_t>(cells));
  for (int64_t i = 0; i < cells; ++i) {
    batch[i] = static_cast<int32_t>(rng() % static_cast<uint64_t>(batches));
    type[i] = static_cast<int32_t>(rng() % kTypes);
  }
  std::vector<double> times, device_times;
  nlohmann::json j;
  j["step"] = step;
  j["cells"] = cells;
  j["cols"] = cols;
  j["batches"] = batches;
  j["device"] = ctx.describe();
  j["gpus"] = std::max<size_t>(1, gpus.size());
  double floor = 0;
  if (step == "harmony") {
    DenseD Z(cells, cols);
    std::vector<double> centre(static_cast<size_t>(kTypes * cols)), shift(static_cast<size_t>(batches * cols));
    for (auto& x : centre) x = 3 * nd(rng);
    for (auto& x : shift) x = 1.5 * nd(rng);
    for (int64_t i = 0; i < cells; ++i)
      for (int64_t q = 0; q < cols; ++q)
        Z(i, q) = centre[type[i] * cols + q] + shift[batch[i] * cols + q] + nd(rng);
    if (!write.empty()) {  // the same data as a file (X_pca as float32, obs batch), for the user's command
      Dataset d;
      d.obs.index.resize(static_cast<size_t>(cells));
      for (int64_t i = 0; i < cells; ++i) d.obs.index[static_cast<size_t>(i)] = std::to_string(i);
      CategoricalColumn bc;
      for (int b = 0; b < batches; ++b) bc.categories.push_back("b" + std::to_string(b));
      bc.codes = batch;
      d.obs.set("batch", Column(std::move(bc)));
      DenseF zf(cells, cols);
      for (size_t e = 0; e < zf.data.size(); ++e) zf.data[e] = static_cast<float>(Z.data[e]);
      d.X = Matrix(CsrF::zeros(cells, 0));  // no genes: the embedding alone
      d.obsm["X_pca"] = Matrix(std::move(zf), DType::f32);
      write_h5ad(d, write);
      std::printf("wrote the embedding (obsm X_pca, obs batch) to %s\n", write.c_str());
    }
    HarmonyOptions opt;
    opt.keys = {"batch"};
    HarmonyResult res;
    for (int rep = 0; rep <= repeat; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      res = multi ? harmony_gpus(gpus, Z, {batch}, {batches}, opt)
            : gpu ? harmony_gpu(ctx, Z, {batch}, {batches}, opt)
                  : harmony(ctx, Z, {batch}, {batches}, opt);
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rep > 0) times.push_back(t);
    }
    int rounds = 0;
    for (int r : res.kmeans_rounds) rounds += r + 1;
    const double K = std::min(100.0, std::nearbyint(static_cast<double>(cells) / 30.0));
    // Per k-means round at least: the R update reads dist and R and writes R, its sums read R twice.
    floor = rounds * 5.0 * static_cast<double>(cells) * K * 8 / kBandwidth;
    j["harmony_iterations"] = res.iterations;
    j["kmeans_rounds"] = rounds;
    j["converged"] = res.converged;
    std::printf("harmony: %d iteration(s), %d k-means rounds, %s\n", res.iterations, rounds,
                res.converged ? "converged" : "not converged");
  } else {
    DenseF Y(cells, cols);
    std::vector<double> mu(static_cast<size_t>(kTypes * cols)), loc(static_cast<size_t>(batches * cols)),
        scale(static_cast<size_t>(batches * cols));
    for (auto& x : mu) x = 2 + nd(rng);
    for (auto& x : loc) x = 0.5 * nd(rng);
    for (auto& x : scale) x = std::exp(0.3 * nd(rng));
    std::vector<double> c1(static_cast<size_t>(cells)), c2(static_cast<size_t>(cells));
    // Rows in fixed blocks of 4,096, each with its own stream (seeded by the seed and the block), on
    // the threads: 1.3M x 2,000 draws took ~100 s on one thread and ran the session-10 bench past
    // its 120 s limit before ComBat started. The data are the same for any thread count.
    constexpr int64_t kRows = 4096;
    const uint64_t base = rng();
    parallel_for(ctx.threads(), (cells + kRows - 1) / kRows, [&](int64_t blk) {
      std::mt19937_64 r(base + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(blk + 1));
      std::normal_distribution<double> nb(0, 1);
      for (int64_t i = blk * kRows; i < std::min(cells, (blk + 1) * kRows); ++i) {
        c1[i] = 1000 + 300 * nb(r);
        c2[i] = 5 + nb(r);
        for (int64_t q = 0; q < cols; ++q)
          Y(i, q) = static_cast<float>(mu[type[i] * cols + q] + loc[batch[i] * cols + q] +
                                       scale[batch[i] * cols + q] * nb(r) + 1e-4 * c1[i] + 0.01 * c2[i]);
      }
    });
    DenseD design(cells, step == "regress-out" ? 3 : 0);
    if (step == "regress-out")
      for (int64_t i = 0; i < cells; ++i) design(i, 0) = 1, design(i, 1) = c1[i], design(i, 2) = c2[i];
    for (int rep = 0; rep <= repeat; ++rep) {
      DenseF W = Y;
      double dev = 0;
      const auto t0 = std::chrono::steady_clock::now();
      if (step == "regress-out") {
        if (gpu) regress_out_design_gpu(ctx, W, design, &dev);
        else regress_out_design(ctx, W, design);
      } else {
        if (gpu) combat_dense_gpu(ctx, W, batch, batches, design);
        else combat_dense(ctx, W, batch, batches, design);
      }
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rep > 0) times.push_back(t), device_times.push_back(dev);
    }
    const double bytes = static_cast<double>(cells) * cols * 4;
    floor = (step == "regress-out" ? 3 : 4) * bytes / kBandwidth;  // passes: read, read + write (combat: one more read)
  }
  const double med = median_of(times);
  j["median_s"] = med;
  j["times_s"] = times;
  j["floor_s"] = floor;
  const std::string over = multi ? " over " + std::to_string(gpus.size()) + " GPU contexts" : "";
  std::printf("%s: %lld cells x %lld, %d batches, %s%s: median %.4f s of %d run(s) (host arrays in and out)",
              step.c_str(), static_cast<long long>(cells), static_cast<long long>(cols), batches,
              ctx.describe().c_str(), over.c_str(), med, repeat);
  if (step == "regress-out" && gpu) {
    const double dm = median_of(device_times);
    j["device_median_s"] = dm;
    std::printf("; on the device %.4f s (CUDA events)", dm);
  }
  std::printf("; floor %.4f s\n", floor);
  if (!json.empty()) {
    std::ofstream f(json);
    if (!f) throw InputError("cannot write " + json);
    f << j.dump(2) << "\n";
  }
}

}  // namespace scurry::cli
