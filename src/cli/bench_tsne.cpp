// scurry bench --tsne CELLS: t-SNE (the defaults of `scurry tsne`) on a seeded synthetic embedding
// (CELLS x 50, --clusters Gaussian blobs: centres N(0, 5^2) per coordinate, points N(centre, 1)),
// --repeat runs on the context's device, each compared bit for bit with the first; per run the
// phases (the GPU path's CUDA-event device seconds), the total, and a floor (the bytes an iteration
// must move: P's indices and values, the layout's arrays, the FFT grids, over 4.3 TB/s, times the
// iterations). Quality on a 20,000-cell subsample: the 15-NN preservation of the full embedding
// within the subsample, and t-SNE of the subsample alone on this device and on the CPU (the oracle).
// A shortcut, said so where it prints: the embedding is made in memory, not read from a file;
// --write FILE.h5ad writes it (obsm X_pca only) so that `scurry tsne FILE` times the user's command.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dataset.hpp"
#include "core/error.hpp"
#include "exec/context.hpp"
#include "exec/parallel.hpp"
#include "io/h5ad.hpp"
#include "tl/tsne.hpp"

namespace scurry::cli {

namespace {

constexpr double kBandwidth = 4.3e12;  // one H200's device copy rate (shared/gpu/README.md)
constexpr int64_t kDims = 50;
constexpr int64_t kRowBlock = 4096;
constexpr int64_t kSubsample = 20000;

DenseF synthetic_embedding(int64_t n, int clusters, uint64_t seed, int threads) {
  std::mt19937_64 crng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> centre(static_cast<size_t>(clusters * kDims));
  for (double& c : centre) c = 5.0 * nd(crng);
  DenseF x(n, kDims);
  parallel_for(threads, (n + kRowBlock - 1) / kRowBlock, [&](int64_t b) {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(b) + 1);
    std::normal_distribution<double> z(0.0, 1.0);
    for (int64_t i = b * kRowBlock; i < std::min(n, (b + 1) * kRowBlock); ++i) {
      const int64_t c = static_cast<int64_t>(rng() % static_cast<uint64_t>(clusters));
      for (int64_t j = 0; j < kDims; ++j) x(i, j) = static_cast<float>(centre[c * kDims + j] + z(rng));
    }
  });
  return x;
}

DenseF rows_of(const DenseF& x, const std::vector<int64_t>& rows) {
  DenseF s(static_cast<int64_t>(rows.size()), x.n_cols);
  for (size_t t = 0; t < rows.size(); ++t)
    std::memcpy(&s.data[t * x.n_cols], &x.data[static_cast<size_t>(rows[t] * x.n_cols)], x.n_cols * sizeof(float));
  return s;
}

// Bytes one iteration moves at least: P (indices and values once; the row pointers), the layout read
// by each of the 5 kernels that take it and the gradient step's arrays (att, rep, gains, update, y:
// read, and the last three written), and the FFT grids (charges written and read, the spectra written,
// scaled and read, the potentials written and read; 4 terms).
double floor_bytes(const TsneResult& r, int64_t n) {
  const double p = static_cast<double>(r.p_nnz) * 8.0 + static_cast<double>(n + 1) * 8.0;
  const double layout = 16.0 * n * 5 + 16.0 * n * 8;
  const double M = static_cast<double>(r.grid_size), S = M * (M / 2 + 1);
  const double grid = 4.0 * (M * M * 4.0 * 2 + S * 8.0 * 4 + M * M * 4.0 * 2);
  return p + layout + grid;
}

}  // namespace

void bench_tsne(Context& ctx, int64_t cells, int clusters, uint64_t seed, int repeat, const std::string& json,
                const std::string& write) {
  if (cells < 4) throw InputError("--tsne needs at least 4 cells");
  if (repeat < 1) throw InputError("--repeat must be at least 1");
  if (clusters < 1) throw InputError("--clusters must be at least 1");
  const int threads = std::max(1, ctx.threads());
  std::printf("scurry bench --tsne: %lld cells x %lld dims (%d Gaussian blobs, seed %llu), made in memory (a "
              "shortcut: no file read); %s\n",
              static_cast<long long>(cells), static_cast<long long>(kDims), clusters,
              static_cast<unsigned long long>(seed), ctx.describe().c_str());
  const DenseF x = synthetic_embedding(cells, clusters, seed, threads);
  if (!write.empty()) {
    Dataset d;
    d.obs.index.resize(static_cast<size_t>(cells));
    for (int64_t i = 0; i < cells; ++i) d.obs.index[static_cast<size_t>(i)] = std::to_string(i);
    d.X = Matrix(CsrF::zeros(cells, 0));  // no genes: the file holds the embedding alone
    d.obsm["X_pca"] = Matrix(x, DType::f32);
    write_h5ad(d, write);
    std::printf("wrote the embedding (obsm X_pca) to %s\n", write.c_str());
  }
  const TsneOptions opt;  // scurry tsne's defaults
  nlohmann::json runs = nlohmann::json::array();
  std::vector<float> first;
  for (int rep = 0; rep < repeat; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    const TsneResult r = tsne(ctx, x, opt);
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double fb = floor_bytes(r, cells) * static_cast<double>(opt.n_iter);
    bool same = true;
    if (rep == 0) first = r.embedding.data;
    else same = first.size() == r.embedding.data.size() &&
                std::memcmp(first.data(), r.embedding.data.data(), first.size() * sizeof(float)) == 0;
    std::printf("run %d: total %.3f s = affinities %.3f s (kNN %s %.3f s; P %lld entries) + start and %lld "
                "iterations %.3f s; KL %.6f%s\n",
                rep + 1, total, r.affinity_seconds, r.knn_used.c_str(), r.knn_seconds,
                static_cast<long long>(r.p_nnz), static_cast<long long>(opt.n_iter), r.optimize_seconds,
                r.kl_divergence, rep == 0 ? "" : (same ? "; identical bits to run 1: yes" : "; identical bits to run 1: NO"));
    if (ctx.backend() == Backend::cuda) {
      const double dev = r.attraction_seconds + r.grid_seconds + r.fft_seconds + r.interpolation_seconds + r.update_seconds;
      std::printf("  device s (CUDA events, all iterations): attraction %.3f, grid (sort by box, spread) %.3f, "
                  "fft %.3f, interpolation %.3f, update %.3f; sum %.3f; host setup %.3f (last grid M = %lld)\n",
                  r.attraction_seconds, r.grid_seconds, r.fft_seconds, r.interpolation_seconds, r.update_seconds, dev,
                  r.host_seconds, static_cast<long long>(r.grid_size));
      std::printf("  floor of the iterations: %.2f GB an iteration x %lld = %.1f GB at %.1f TB/s = %.3f s\n",
                  fb / opt.n_iter / 1e9, static_cast<long long>(opt.n_iter), fb / 1e9, kBandwidth / 1e12, fb / kBandwidth);
    }
    runs.push_back({{"total_s", total}, {"affinity_s", r.affinity_seconds}, {"knn_s", r.knn_seconds},
                    {"knn", r.knn_used}, {"optimize_s", r.optimize_seconds}, {"attraction_s", r.attraction_seconds},
                    {"grid_s", r.grid_seconds}, {"fft_s", r.fft_seconds}, {"interpolation_s", r.interpolation_seconds},
                    {"update_s", r.update_seconds}, {"host_s", r.host_seconds}, {"kl", r.kl_divergence},
                    {"p_nnz", r.p_nnz}, {"grid_size", r.grid_size}, {"floor_s", fb / kBandwidth},
                    {"identical_to_first", same}});
  }
  // Quality on a subsample (exact 15-NN searches within it, on the CPU).
  nlohmann::json quality;
  if (cells > 1000) {
    const int64_t m = std::min(cells, kSubsample);
    std::vector<int64_t> rows(static_cast<size_t>(cells));
    for (int64_t i = 0; i < cells; ++i) rows[static_cast<size_t>(i)] = i;
    std::mt19937_64 rng(seed + 17);
    std::shuffle(rows.begin(), rows.end(), rng);
    rows.resize(static_cast<size_t>(m));
    std::sort(rows.begin(), rows.end());
    const Context cpu = Context::cpu(threads);
    const DenseF xs = rows_of(x, rows);
    DenseF full(cells, 2);
    full.data = first;
    const double p_full = knn_preservation(cpu, xs, rows_of(full, rows), 15);
    const TsneResult a = tsne(ctx, xs, opt);
    const TsneResult c = tsne(cpu, xs, opt);
    const double pa = knn_preservation(cpu, xs, a.embedding, 15), pc = knn_preservation(cpu, xs, c.embedding, 15);
    std::printf("quality (%lld-cell subsample, 15-NN within it): the full embedding %.4f; t-SNE of the subsample "
                "alone: this device %.4f (KL %.5f), CPU %.4f (KL %.5f), difference %.4f\n",
                static_cast<long long>(m), p_full, pa, a.kl_divergence, pc, c.kl_divergence, pa - pc);
    quality = {{"subsample", m}, {"full_embedding", p_full}, {"device", pa}, {"cpu", pc},
               {"device_kl", a.kl_divergence}, {"cpu_kl", c.kl_divergence}};
  }
  if (!json.empty()) {
    std::ofstream f(json);
    f << nlohmann::json{{"cells", cells}, {"dims", kDims}, {"clusters", clusters}, {"runs", runs}, {"quality", quality}}
             .dump(2);
    if (!f) throw InputError("could not write " + json);
  }
}

}  // namespace scurry::cli
