// scurry bench --synthetic CELLSxGENES: the preprocessing chain on seeded synthetic data generated in
// memory (no disk), repeated; per-step medians over the repetitions after the first (warm-up), peak
// memory, and each step's floor (bytes over memory bandwidth, FLOPs over the fp32 rate) on the GPU.
// --gpus N (with --device gpu): the chain over N GPUs of this host (preprocess_gpu_sharded; with
// --on-device the matrix is simulated on the first GPU and each GPU copies its rows); the floors are
// then the one-GPU floors / N.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/step_options.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/memory.hpp"
#include "graph/connectivities.hpp"
#include "graph/connectivities_gpu.hpp"
#include "graph/knn.hpp"
#include "graph/knn_gpu.hpp"
#include "graph/leiden.hpp"
#include "graph/leiden_gpu.hpp"
#include "graph/umap.hpp"
#include "graph/umap_gpu.hpp"
#include "io/h5ad.hpp"
#include "io/read.hpp"
#include "pp/preprocess_stream.hpp"
#include "pp/resident.hpp"
#include "sim/simulate.hpp"

namespace scurry::cli {

namespace {

// Ceilings measured on one H200 (shared/gpu/README.md): device copy 4.29 TB/s (read + write),
// SGEMM fp32 51 TFLOP/s.
constexpr double kBandwidth = 4.3e12;
constexpr double kFp32 = 51e12;

struct BenchOptions {
  std::string synthetic = "200000x30000";
  SimulateOptions sim;
  int repeat = 3;
  std::string json;
  std::string read;     // --read FILE: time reading FILE instead (I/O benchmark)
  bool graph = false;   // --graph: then neighbors (exact and IVF-Flat), connectivities, UMAP, Leiden
  bool knn_only = false;   // --knn-only: of the graph half, only the exact kNN
  bool on_device = false;  // --on-device: simulate on the GPU; each run starts from a device copy
  bool stepwise = false;   // --stepwise: the package's chain (one call per step) instead of the fused one
  std::string write;       // --write FILE.h5ad: the last run's results (X left out) written there
  int64_t recall_rows = 20000;
  std::vector<int64_t> ivf_probes;  // --ivf-probes: also time IVF-Flat at these n_probes (recall each)
  std::string graph_knn = "both";   // --graph-knn: exact, ivf or both (the graph steps then use the last)
  KnnShard knn_shard = KnnShard::queries;  // --knn-shard: several GPUs split the queries or the index
  int64_t graph_pcs = 0;            // --graph-pcs: the first this many PCs for the graph (0: all)
  double umap_min_dist = 0.5;       // --umap-min-dist
  bool stream = false;              // --stream: the streamed chain from a host-memory copy (or --stream-file)
  StreamOptions stream_opt;         // --stream-block-nnz, --stream-host-store
  std::string stream_file;          // --stream-file FILE.h5ad: written once, then streamed from disk
  std::vector<std::string> markers;  // --markers: time rank_genes_groups with these methods instead
  int marker_groups = 30;            // --marker-groups
  std::string integrate;             // --integrate harmony|regress-out|combat: time that step instead
  int integrate_batches = 8;         // --integrate-batches
  int integrate_contexts = 0;        // --integrate-contexts: harmony over this many contexts of the main GPU
  int64_t tsne = 0;                  // --tsne CELLS: time t-SNE on a synthetic embedding instead (bench_tsne.cpp)
  PreprocessOptions pp = [] {
    PreprocessOptions p;
    p.qc_vars = {"mt"};
    p.counts_layer = false;  // a benchmark keeps no copies it does not need
    p.raw = false;
    p.scaled_x = false;
    return p;
  }();
};

}  // namespace
// bench_integrate.cpp
// gpus: the --gpus contexts (main first; several: harmony over them, harmony_gpus).
void bench_integrate(Context& ctx, const std::vector<Context*>& gpus, const std::string& step, int64_t cells,
                     int64_t cols, int batches, int repeat, uint64_t seed, const std::string& json,
                     const std::string& write);
// bench_tsne.cpp
void bench_tsne(Context& ctx, int64_t cells, int clusters, uint64_t seed, int repeat, const std::string& json,
                const std::string& write);
// bench_markers.cpp
void bench_markers(Context& ctx, Dataset& base, const std::vector<std::string>& methods, int n_groups, int repeat,
                   uint64_t seed, const std::string& json);
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double meta_num(const Timings& t, const std::string& k) {
  auto it = t.meta().find(k);
  return it == t.meta().end() ? 0.0 : std::stod(it->second);
}

// The floor of a GPU step in seconds: the fewest bytes it must move over the bandwidth, or its FLOPs
// over the fp32 rate.
double floor_s(const std::string& step, const Timings& t, double n0, double g0, double n1, double g1, double k) {
  const double nnz0 = meta_num(t, "nnz_input"), nnz1 = meta_num(t, "nnz_filtered"), nnz2 = meta_num(t, "nnz_hvg");
  const double csr0 = nnz0 * 8 + n0 * 8, csr1 = nnz1 * 8 + n1 * 8, csr2 = nnz2 * 8 + n1 * 8;
  if (step == "qc") return csr0 / kBandwidth;                        // one read
  if (step == "filter_cells") return 2 * csr0 / kBandwidth;          // read + write (worst case)
  if (step == "filter_genes") return (csr0 + csr1) / kBandwidth;     // read + write
  if (step == "normalize_total+log1p") return (csr1 + nnz1 * 4) / kBandwidth;  // read + write values
  if (step == "highly_variable_genes") return csr1 / kBandwidth;
  if (step == "subset_hvg") return (csr1 + csr2) / kBandwidth;
  if (step == "scale") return (csr2 + n1 * g1 * 4) / kBandwidth;    // read sparse + write dense
  if (step == "pca") return std::max((n1 * g1 * g1 + 2 * n1 * g1 * k) / kFp32, 2 * n1 * g1 * 4 / kBandwidth);
  (void)g0;
  return 0;
}

// The graph half on the PCA of the last run: exact kNN and IVF-Flat (recall against exact on the first
// rows), connectivities, UMAP (the defaults: spectral init) and its spectral init alone, Leiden. Median of 3 runs
// after a warm-up for the GPU steps.
nlohmann::json bench_graph(Context& ctx, const std::vector<Context*>& gpus, const DenseF& x, const BenchOptions& o) {
  nlohmann::json j;
  const bool gpu = ctx.backend() == Backend::cuda;
  const int64_t n = x.n_rows, d = x.n_cols, k = 15;
  std::printf("\ngraph: %lld cells x %lld PCs, k = %lld, %s\n", static_cast<long long>(n), static_cast<long long>(d),
              static_cast<long long>(k), gpu ? "GPU" : "CPU");
  auto timed = [&](const char* name, int reps, auto&& fn) {
    std::vector<double> w;
    for (int i = 0; i < reps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      w.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (reps > 1) w.erase(w.begin());  // warm-up
    const double m = median(w);
    std::printf("  %-22s %9.3f s\n", name, m);
    j[name] = m;
    return m;
  };
  const int reps = gpu && o.repeat > 0 ? 3 : 1;
  Knn exact, ivf;
  int64_t redo = -1;
  const bool do_exact = o.graph_knn != "ivf", do_ivf = o.graph_knn != "exact";
  const KnnShard sharding = o.knn_shard;
  const std::string over = gpus.size() > 1 ? " (" + std::to_string(gpus.size()) + " GPUs" +
                                                 (sharding == KnnShard::index ? ", index sharded)" : ")")
                                           : "";
  if (gpu && gpus.size() > 1) j["knn_shard"] = knn_shard_name(sharding);
  const std::string exact_name = gpu ? "knn_exact" + over : "knn_exact";
  if (do_exact) timed(exact_name.c_str(), reps, [&] {
    KnnExactGpuOptions eo{KnnGemmPrecision::fused, &redo};
    eo.sharding = sharding;
    exact = !gpu               ? knn_exact(ctx, x, k, KnnMetric::euclidean)
            : gpus.size() > 1 ? knn_exact_gpus(gpus, x, k, KnnMetric::euclidean, eo)
                              : knn_exact_gpu(ctx, x, k, KnnMetric::euclidean, eo);
  });
  if (gpu && do_exact) {
    std::printf("  %-22s %9lld of %lld queries (no TF32 certificate; searched again with split TF32)\n", "knn_exact redo",
                static_cast<long long>(redo), static_cast<long long>(n));
    j["knn_exact_redo"] = redo;
  }
  if (o.knn_only) return j;
  const int64_t rows = std::min<int64_t>(n, o.recall_rows);
  // recall@15 of an approximate result against the exact one on the first `rows` cells (self left out).
  auto recall_of = [&](const Knn& approx) {
    int64_t hit = 0, total = 0;
    for (int64_t i = 0; i < rows; ++i) {
      std::vector<int64_t> a, b;
      for (int64_t c = 1; c < k; ++c) a.push_back(exact.index(i, c)), b.push_back(approx.index(i, c));
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      std::vector<int64_t> both;
      std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
      hit += static_cast<int64_t>(both.size()), total += k - 1;
    }
    return static_cast<double>(hit) / static_cast<double>(total);
  };
  if (do_ivf) {
    const std::string name = gpu ? "knn_ivf_flat" + over : "knn_hnsw";
    IvfOptions io;
    io.sharding = sharding;
    timed(name.c_str(), reps, [&] {
      ivf = gpu ? (gpus.size() > 1 ? knn_ivf_gpus(gpus, x, k, KnnMetric::euclidean, io)
                                   : knn_ivf_gpu(ctx, x, k, KnnMetric::euclidean))
                : knn_hnsw(ctx, x, k, KnnMetric::euclidean);
    });
  }
  if (do_ivf && do_exact) {
    const double recall = recall_of(ivf);
    std::printf("  %-22s %9.4f (first %lld cells, against exact)\n", "recall@15", recall, static_cast<long long>(rows));
    j["recall_at_15"] = recall;
  }
  if (gpu && do_exact && do_ivf) {
    for (int64_t p : o.ivf_probes) {
      IvfOptions io;
      io.n_probes = p;
      Knn v;
      const std::string name = "knn_ivf_flat_p" + std::to_string(p);
      timed(name.c_str(), reps, [&] { v = knn_ivf_gpu(ctx, x, k, KnnMetric::euclidean, io); });
      const double r = recall_of(v);
      std::printf("  %-22s %9.4f (n_probes %lld)\n", "recall@15", r, static_cast<long long>(p));
      j[name + "_recall"] = r;
    }
  }
  CsrF conn;
  const Knn& graph_knn = do_exact ? exact : ivf;
  timed(gpu ? "connectivities (gpu)" : "connectivities", reps, [&] {
    conn = gpu ? fuzzy_simplicial_set_gpu(ctx, graph_knn) : fuzzy_simplicial_set(ctx, graph_knn);
  });
  // UMAP with scurry run's defaults (spectral initialisation, batched epochs), then the spectral
  // layout alone; every repetition's embedding compared with the first (the same bits expected).
  UmapOptions uo;
  uo.min_dist = o.umap_min_dist;
  std::vector<float> first_umap;
  bool umap_same = true;
  timed("umap", reps, [&] {
    const UmapResult r = gpu ? umap_gpu(ctx, conn, uo) : umap(ctx, conn, uo);
    if (first_umap.empty()) first_umap = r.embedding.data;
    else umap_same = umap_same && r.embedding.data == first_umap;
  });
  UmapOptions so = uo;
  so.maxiter = 0;  // the start layout only: the spectral layout and its scaling (on the device with a GPU context)
  timed("umap spectral init", reps, [&] { gpu ? umap_gpu(ctx, conn, so) : umap(ctx, conn, so); });
  if (reps > 1) {
    std::printf("  umap: %d runs, embeddings %s\n", reps, umap_same ? "identical bit for bit" : "DIFFER run to run");
    j["umap_identical"] = umap_same;
  }
  LeidenResult lr;
  timed("leiden", reps, [&] { lr = gpu ? leiden_gpu(ctx, conn, LeidenOptions{}) : leiden(ctx, conn, LeidenOptions{}); });
  std::printf("  leiden: %d clusters, modularity %.4f\n",
              lr.labels.empty() ? 0 : 1 + *std::max_element(lr.labels.begin(), lr.labels.end()), lr.modularity);
  j["leiden_modularity"] = lr.modularity;
  if (gpu && gpus.size() > 1) {  // the candidate searches split over the GPUs; the same result as one GPU's
    LeidenResult lm;
    const std::string name = "leiden (" + std::to_string(gpus.size()) + " GPUs)";
    timed(name.c_str(), reps, [&] { lm = leiden_gpus(gpus, conn, LeidenOptions{}); });
    const bool same = lm.labels == lr.labels && lm.modularity == lr.modularity;
    std::printf("  %s: %lld clusters, modularity %.4f; labels and modularity %s one GPU's\n", name.c_str(),
                static_cast<long long>(lm.n_clusters), lm.modularity, same ? "identical to" : "DIFFER from");
    j["leiden_gpus_identical"] = same;
  }
  if (gpu) {
    j["gpu_peak_bytes"] = static_cast<double>(cuda_peak_bytes(ctx.cuda()));
    std::printf("  peak GPU memory (whole process) %.2f GiB\n", static_cast<double>(cuda_peak_bytes(ctx.cuda())) / (1ull << 30));
  }
  return j;
}

// Reading a file whole, repeated: wall time and throughput over the file's bytes.
void bench_read(const std::string& path, int repeat) {
  namespace fs = std::filesystem;
  uintmax_t bytes = 0;
  if (fs::is_directory(path)) {
    for (const auto& e : fs::recursive_directory_iterator(path))
      if (e.is_regular_file()) bytes += e.file_size();
  } else {
    bytes = fs::file_size(path);
  }
  std::vector<double> w;
  Dataset d;
  for (int i = 0; i <= repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    d = read_any(path);
    w.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::printf("read %d%s: %.3f s\n", i, i == 0 ? " (warm-up)" : "", w.back());
  }
  w.erase(w.begin());
  const double m = median(w);
  std::printf("%s: %.2f GB on disk, %s; median read %.3f s = %.2f GB/s\n", path.c_str(), bytes / 1e9,
              d.X.describe().c_str(), m, bytes / 1e9 / m);
}

void run_bench(const GlobalOptions& g, BenchOptions& o) {
  const auto t_start = std::chrono::steady_clock::now();
  std::printf("bench start (realtime %.3f)\n",
              std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  // --gpus: the other GPUs' contexts first (making one selects its device on this thread), the main
  // context (the first listed GPU) last.
  GlobalOptions gm;
  GpuContexts extra = select_gpus(g, gm);
  Context ctx = make_context(gm);
  const std::vector<Context*>& gpus = extra.with_main(ctx);
  const bool multi = gpus.size() > 1;
  if (ctx.backend() == Backend::cuda) prefault_heap(size_t(768) << 20, ctx.threads());
  const double t_context = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  if (!o.read.empty()) return bench_read(o.read, o.repeat);
  if (o.tsne > 0) return bench_tsne(ctx, o.tsne, o.sim.n_clusters, o.sim.seed, o.repeat, o.json, o.write);
  int64_t cells = 0, genes = 0;
  {
    char x = 0;
    std::istringstream is(o.synthetic);
    if (!(is >> cells >> x >> genes) || x != 'x' || cells <= 0 || genes <= 0)
      throw InputError("--synthetic " + o.synthetic + ": give CELLSxGENES, e.g. 1306127x27998");
  }
  o.sim.n_cells = cells;
  o.sim.n_genes = genes;
  if (!o.integrate.empty()) {
    std::vector<Context> same;  // --integrate-contexts N: N contexts of the main GPU (its own, then N - 1 more)
    std::vector<Context*> over = gpus;
    if (o.integrate_contexts > 1) {
      if (multi) throw InputError("--integrate-contexts and --gpus: give one of the two");
      if (ctx.backend() != Backend::cuda) throw InputError("--integrate-contexts needs --device gpu");
      for (int q = 1; q < o.integrate_contexts; ++q) same.push_back(make_context(gm));
      for (Context& c : same) over.push_back(&c);
    }
    return bench_integrate(ctx, over, o.integrate, cells, genes, o.integrate_batches, o.repeat, o.sim.seed, o.json,
                           o.write);
  }
  if (o.repeat < (o.on_device ? 0 : 1))
    throw InputError(o.on_device ? "--repeat must be at least 0" : "--repeat must be at least 1 (0 only with --on-device)");
  if (o.on_device && ctx.backend() != Backend::cuda) throw InputError("--on-device needs --device gpu");
  if (o.stepwise && (!o.on_device || multi)) throw InputError("--stepwise needs --on-device on one GPU");
  std::printf("scurry bench: synthetic %lld x %lld, %g nonzeros per cell, seed %llu; %s%s\n",
              static_cast<long long>(cells), static_cast<long long>(genes), o.sim.nnz_per_cell,
              static_cast<unsigned long long>(o.sim.seed), ctx.describe().c_str(),
              multi ? detail::concat("; preprocessing on ", gpus.size(), " GPUs").c_str() : "");
  Timings sim_t;
  Dataset base;
  DeviceSimulated dsim;
  {
    auto s = sim_t.scope("simulate");
    if (o.on_device) dsim = multi ? simulate_on_devices(gpus, o.sim) : simulate_on_device(ctx, o.sim);
    else base = simulate(ctx, o.sim);
  }
  if (!o.markers.empty()) {
    if (o.on_device) throw InputError("--markers takes the matrix on the host (drop --on-device)");
    return bench_markers(ctx, base, o.markers, o.marker_groups, o.repeat, o.sim.seed, o.json);
  }
  const int64_t nnz0 = o.on_device ? dsim.nnz : base.X.nnz();
  std::printf("simulated%s: nnz %lld (%.1f per cell) in %.3f s (CUDA context before it: %.3f s)\n",
              o.on_device ? " on the GPU" : "", static_cast<long long>(nnz0), static_cast<double>(nnz0) / cells,
              sim_t.steps().back().wall_s, t_context);
  const double input_bytes = static_cast<double>(nnz0) * 8 + static_cast<double>(cells + 1) * 8;
  // --stream: the matrix moved out of the frame into the source (memory), or written to a file first.
  std::shared_ptr<CsrF> held;
  std::unique_ptr<RowSource> src;
  double pcie = 0, file_write_s = 0;
  if (o.stream) {
    if (ctx.backend() != Backend::cuda) throw InputError("--stream needs --device gpu");
    if (o.on_device || multi) throw InputError("--stream streams from host memory or a file: not with --on-device or --gpus");
    pcie = measure_h2d_gbps(ctx, size_t{1} << 30);
    std::printf("pinned host-to-device copy (1 GiB, median of 5): %.1f GB/s\n", pcie);
    if (!o.stream_file.empty()) {
      const auto t0 = std::chrono::steady_clock::now();
      write_h5ad(base, o.stream_file);
      file_write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("wrote %s (%.2f GB) in %.2f s; streaming from it\n", o.stream_file.c_str(),
                  static_cast<double>(std::filesystem::file_size(o.stream_file)) / 1e9, file_write_s);
      base.X = Matrix();
      src = std::make_unique<H5adRowReader>(o.stream_file);
    } else {
      held = std::make_shared<CsrF>(std::move(base.X.csr_f()));
      base.X = Matrix();
      src = std::make_unique<MemoryRowSource>(*held);
    }
  }

  std::vector<Timings> runs;
  nlohmann::json jruns = nlohmann::json::array();
  int64_t n1 = 0, g1 = 0;
  DenseF x_pca;
  auto acquire_step = [](const std::string& name) { return name == "upload" || name == "device_copy"; };
  double write_s = 0;
  for (int rep = 0; rep <= o.repeat; ++rep) {  // rep 0 is the warm-up (the only run with --repeat 0)
    Dataset d;
    Timings t;
    if (o.stepwise) {
      stepwise_chain_simulated(ctx, dsim, d, o.pp, &t, /*consume=*/rep == o.repeat);
    } else if (o.on_device) {
      preprocess_simulated_sharded(gpus, dsim, d, o.pp, &t, /*consume=*/rep == o.repeat);  // the last run needs no copy
    } else if (o.stream) {
      d = base;  // (no X)
      preprocess_stream(ctx, *src, d, o.pp, o.stream_opt, &t);
    } else {
      d = base;
      if (multi) preprocess_gpu_sharded(gpus, d, o.pp, &t);
      else preprocess(ctx, d, o.pp, &t);
    }
    n1 = d.n_obs(), g1 = d.n_vars();
    double total = 0;
    for (const auto& s : t.steps())
      if (!acquire_step(s.name)) total += s.wall_s;
    std::printf("run %d%s: %.3f s (QC through PCA%s)\n", rep, rep == 0 && o.repeat > 0 ? " (warm-up)" : "", total,
                o.stream ? (o.stream_file.empty() ? ", streamed from host memory" : ", streamed from the file")
                : ctx.backend() == Backend::cuda ? ", matrix already on the GPU" : "");
    jruns.push_back(nlohmann::json::parse(t.to_json()));
    if (rep > 0 || o.repeat == 0) runs.push_back(std::move(t));
    if (rep == o.repeat && o.graph) x_pca = to_dense_f(d.obsm.at("X_pca"));
    if (rep == o.repeat && !o.write.empty()) {
      const auto t0 = std::chrono::steady_clock::now();
      H5adWriteOptions wo;
      wo.allow_no_x = true;
      write_h5ad(d, o.write, wo);
      write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("wrote %s (obs, var, obsm X_pca, varm PCs, uns; X left out) in %.3f s\n", o.write.c_str(), write_s);
    }
  }
  const double since_start = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  std::printf("whole process so far (context, simulation, %d run%s%s): %.3f s (realtime %.3f)\n", o.repeat + 1,
              o.repeat ? "s" : "", o.write.empty() ? "" : ", write", since_start,
              std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  // Per-step medians.
  std::vector<std::string> names;
  for (const auto& s : runs.front().steps()) names.push_back(s.name);
  const int64_t k = o.pp.pca.n_comps.value_or(50);
  std::printf("\n%-24s %12s %12s %10s %10s\n", "step", "median s", "cpu s", "floor s", "x floor");
  double total = 0, total_floor = 0;
  nlohmann::json jsteps = nlohmann::json::array();
  for (const auto& name : names) {
    std::vector<double> w, c;
    for (const auto& t : runs)
      for (const auto& s : t.steps())
        if (s.name == name) w.push_back(s.wall_s), c.push_back(s.cpu_s);
    const double mw = median(w), mc = median(c);
    const double fl = ctx.backend() == Backend::cuda
                          ? floor_s(name, runs.front(), static_cast<double>(cells), static_cast<double>(genes),
                                    static_cast<double>(n1), static_cast<double>(g1), static_cast<double>(k)) /
                                static_cast<double>(gpus.size())
                          : 0.0;
    if (!acquire_step(name)) total += mw, total_floor += fl;
    std::printf("%-24s %12.4f %12.3f %10.4f %10s\n", name.c_str(), mw, mc, fl,
                fl > 0 ? (std::to_string(mw / fl).substr(0, 6) + "x").c_str() : "-");
    jsteps.push_back({{"step", name}, {"median_wall_s", mw}, {"median_cpu_s", mc}, {"floor_s", fl}});
  }
  std::printf("%-24s %12.4f %12s %10.4f\n", "total (without upload)", total, "", total_floor);
  const double peak_rss = runs.back().steps().empty() ? 0 : runs.back().steps().back().peak_rss_mb;
  std::printf("input matrix %.2f GiB (CSR, int64 row pointers); peak host RSS %.0f MB", input_bytes / (1ull << 30), peak_rss);
  double gpu_peak = 0;
  if (ctx.backend() == Backend::cuda) {
    gpu_peak = meta_num(runs.back(), "gpu_peak_bytes");
    std::printf("; peak GPU memory %.2f GiB = %.2f x the input", gpu_peak / (1ull << 30), gpu_peak / input_bytes);
    if (runs.back().meta().count("gpu_host_peak_bytes"))
      std::printf("; managed memory placed in host memory (over the device budget) %.2f GiB",
                  meta_num(runs.back(), "gpu_host_peak_bytes") / (1ull << 30));
  }
  std::printf("\n");
  nlohmann::json jstream;
  if (o.stream) {
    // Per pass: bytes uploaded over the median wall time, against the measured PCIe ceiling; bytes read
    // from the source (host memory or the file); the compute thread's wait for blocks.
    const Timings& last = runs.back();
    std::printf("\nstreamed passes (%s blocks of ~%s nonzeros; host store %s blocks, %.2f GiB); PCIe H2D ceiling %.1f GB/s\n",
                last.meta().at("stream_blocks").c_str(), last.meta().at("stream_block_nnz").c_str(),
                last.meta().at("stream_store_blocks").c_str(), meta_num(last, "stream_store_bytes") / (1ull << 30), pcie);
    std::printf("%-20s %10s %10s %9s %8s %10s %9s %8s\n", "pass", "median s", "GB up", "GB/s", "% PCIe", "GB read", "read GB/s", "wait s");
    for (const auto& name : names) {
      if (!last.meta().count(name + "_h2d_bytes")) continue;
      std::vector<double> w;
      for (const auto& t : runs)
        for (const auto& s2 : t.steps())
          if (s2.name == name) w.push_back(s2.wall_s);
      const double mw = median(w), up = meta_num(last, name + "_h2d_bytes") / 1e9, rd = meta_num(last, name + "_read_bytes") / 1e9;
      std::printf("%-20s %10.3f %10.2f %9.2f %7.1f%% %10.2f %9.2f %8.3f\n", name.c_str(), mw, up, up / mw,
                  pcie > 0 ? 100.0 * up / mw / pcie : 0.0, rd, rd / mw, meta_num(last, name + "_wait_s"));
      jstream[name] = {{"median_wall_s", mw}, {"h2d_gb", up}, {"read_gb", rd}, {"h2d_gbps", up / mw},
                       {"wait_s", meta_num(last, name + "_wait_s")}};
    }
    jstream["pcie_h2d_gbps"] = pcie;
    jstream["file"] = o.stream_file;
    jstream["file_write_s"] = file_write_s;
  }
  nlohmann::json jgraph;
  if (o.graph && o.graph_pcs > 0 && o.graph_pcs < x_pca.n_cols) {  // the first graph_pcs columns
    DenseF first(x_pca.n_rows, o.graph_pcs);
    for (int64_t i = 0; i < x_pca.n_rows; ++i)
      std::copy_n(x_pca.data.begin() + i * x_pca.n_cols, o.graph_pcs, first.data.begin() + i * o.graph_pcs);
    x_pca = std::move(first);
  }
  if (o.graph) jgraph = bench_graph(ctx, gpus, x_pca, o);
  if (!o.json.empty()) {
    nlohmann::json j = {{"graph", jgraph}, {"stream", jstream},{"synthetic", o.synthetic},   {"nnz_per_cell", o.sim.nnz_per_cell},
                        {"seed", o.sim.seed},         {"device", ctx.describe()},
                        {"nnz", nnz0},                {"input_bytes", input_bytes},
                        {"on_device", o.on_device},   {"context_s", t_context}, {"gpus", gpus.size()},
                        {"write_s", write_s},         {"process_to_here_s", since_start},
                        {"cells_after_filter", n1},   {"genes_after_hvg", g1},
                        {"simulate_s", sim_t.steps().back().wall_s},
                        {"median_total_s", total},    {"floor_total_s", total_floor},
                        {"gpu_peak_bytes", gpu_peak}, {"peak_rss_mb", peak_rss},
                        {"steps", jsteps},            {"runs", jruns}};
    write_text_atomic(o.json, j.dump(2) + "\n");
  }
}

}  // namespace

void add_bench_command(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Time the preprocessing chain on synthetic data generated in memory");
  cmd->add_option("--synthetic", o->synthetic, "CELLSxGENES of the synthetic matrix")->capture_default_str();
  cmd->add_option("--nnz-per-cell", o->sim.nnz_per_cell, "Mean detected genes per cell")->capture_default_str();
  cmd->add_option("--clusters", o->sim.n_clusters, "Clusters of the simulation")->capture_default_str();
  cmd->add_option("--seed", o->sim.seed, "Seed of the simulation")->capture_default_str();
  cmd->add_option("--repeat", o->repeat, "Timed repetitions after one warm-up")->capture_default_str();
  cmd->add_option("--json", o->json, "Write all timings as JSON to this file");
  cmd->add_option("--markers", o->markers,
                  "Time rank_genes_groups with these methods (t-test, wilcoxon, logreg, ...; also aggregate, score_genes) "
                  "on the log-normalised matrix instead of the pipeline (groups: --marker-groups, vs rest)")
      ->expected(1, -1);
  cmd->add_option("--marker-groups", o->marker_groups, "With --markers: number of groups (cells assigned at random)")
      ->capture_default_str();
  cmd->add_option("--integrate", o->integrate,
                  "Time harmony, regress-out or combat on synthetic data instead (--synthetic CELLSxCOLS: COLS = PCs "
                  "for harmony, genes otherwise)");
  cmd->add_option("--tsne", o->tsne,
                  "Time t-SNE (scurry tsne's defaults) on a synthetic CELLS x 50 embedding (--clusters blobs, --seed) "
                  "instead, --repeat runs compared bit for bit, quality on a subsample; --write: the embedding as an "
                  "h5ad (obsm X_pca)");
  cmd->add_option("--integrate-batches", o->integrate_batches, "With --integrate: number of batches")
      ->capture_default_str();
  cmd->add_option("--integrate-contexts", o->integrate_contexts,
                  "With --integrate harmony --device gpu: Harmony over this many CUDA contexts of the one GPU (the "
                  "several-GPU path, its overhead on one device; --gpus for several devices)");
  cmd->add_option("--read", o->read, "Time reading this file (h5ad, zarr, 10x) instead of the pipeline");
  cmd->add_flag("--stepwise", o->stepwise,
                "With --on-device on one GPU: the chain as the Python package runs it (each step its own call on the "
                "resident X; normalize_total and log1p apart; no raw or counts layer)");
  cmd->add_flag("--on-device", o->on_device, "Simulate on the GPU (nothing big on the host); each run starts from a device copy");
  cmd->add_option("--write", o->write, "Write the last run's results (without X) to this h5ad");
  cmd->add_flag("--knn-only", o->knn_only, "With --graph: time only the exact kNN");
  cmd->add_option("--graph-pcs", o->graph_pcs, "With --graph: build the graph on the first this many PCs (0: all)")
      ->capture_default_str();
  cmd->add_option("--umap-min-dist", o->umap_min_dist, "With --graph: UMAP's min_dist")->capture_default_str();
  cmd->add_option("--graph-knn", o->graph_knn, "With --graph: exact, ivf or both (the graph steps use the exact kNN when timed)")
      ->check(CLI::IsMember({"exact", "ivf", "both"}))
      ->capture_default_str();
  add_knn_shard_option(*cmd, o->knn_shard, "With --graph --gpus N");
  cmd->add_option("--ivf-probes", o->ivf_probes, "With --graph on the GPU: also time IVF-Flat at these n_probes, with the recall of each");
  cmd->add_flag("--graph", o->graph, "Also time kNN (exact and approximate), connectivities, UMAP and Leiden on the PCA");
  cmd->add_flag("--stream", o->stream,
                "With --device gpu: the streamed chain (out of core), the matrix uploaded block by block from a "
                "host-memory copy (or --stream-file); per-pass throughput against the measured PCIe ceiling");
  cmd->add_option("--stream-block-nnz", o->stream_opt.block_nnz, "With --stream: nonzeros per block (0: from the budget)")
      ->capture_default_str();
  cmd->add_option("--stream-host-store", o->stream_opt.host_store_bytes,
                  "With --stream: pinned host bytes for the HVG rows kept for the projection (-1: a quarter of the RAM)")
      ->capture_default_str();
  cmd->add_option("--stream-file", o->stream_file, "With --stream: write the synthetic matrix to this h5ad and stream from it");
  add_preprocess_options(*cmd, o->pp);
  cmd->add_option("--gpus", g.gpus,
                  "With --device gpu: run the chain (or --integrate harmony) over these GPUs of this host: all, a count "
                  "N, or ordinals 0,2 (default: one GPU)");
  cmd->callback([&g, o] { run_bench(g, *o); });
}

}  // namespace scurry::cli
