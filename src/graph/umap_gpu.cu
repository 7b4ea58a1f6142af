// UMAP SGD epochs on the GPU (see umap_gpu.hpp for the semantics).
//
// Floor on one H200 (1.3M cells, k = 15: about 25M directed edges after the fuzzy union, 200
// epochs, 2 dims): per epoch every edge reads its eps (4 B), and the sampled ones (mean w / w_max
// about 0.4, so ~2G samples over the run) read their tail (4 B) and touch 1 + 5 rows of the
// embedding (a thread walks a chunk of one vertex's row, so the heads are implicit). DRAM: 200 x 25M x 4 B + 2G x 8 B ~ 36 GB -> 8 ms at 4.3 TB/s; the embedding itself
// (1.3M x 8 B = 10 MB) stays in the 50 MB L2, whose random 32-B sector traffic (~12G accesses,
// ~400 GB) is the real bound, ~40-80 ms. FLOPs: ~12G point updates x ~30 = 0.4 TFLOP -> 8 ms fp32.
// So ~0.1 s is the floor; target 0.7 s.
//
// At 10M cells (~200M edges): int64 edge counters and offsets throughout; device memory is
// 8 B per edge (tail, eps), 8 B per cell of indptr, 4 B x dim per cell for the layout, and per
// work item (a row cut into chains of kGpuChunk edges: ~deg/8 items a cell) 12 B plus 4 B x dim of displacement.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/cuda_resources.cuh"
#include "exec/device_csr.cuh"
#include "graph/umap_sgd.hpp"
#include "graph/umap_gpu.hpp"

namespace scurry {
namespace {

const char* kWhere = "umap (gpu)";
constexpr int kBlock = 256;               // threads per block of every kernel here
constexpr int64_t kMaxBlocks = 1 << 16;   // grid-stride loops above this many blocks
constexpr int kMaxGenericDim = umap_sgd::kMaxDim;  // n_components handled by the generic kernel

int blocks_for(int64_t n) { return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kBlock - 1) / kBlock, kMaxBlocks))); }

// In place: weight -> epochs per sample (umap_sgd::epochs_per_sample; 0 for pruned edges).
__global__ void epochs_per_sample_kernel(float* w, int64_t n_edges, float threshold, float wmax) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n_edges;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    w[e] = umap_sgd::epochs_per_sample(w[e], threshold, wmax);
}

// The work items of the batched epochs (umap_sgd.hpp): every vertex's row cut into chunks of at
// most kChunk edges, the items ordered by group (vertex i in group i mod kSubRounds), then vertex,
// then chunk. Built on the host once per layout.
struct EpochItems {
  std::vector<int32_t> vertex;       // the item's vertex
  std::vector<int64_t> begin;        // its first edge (its last: min(row end, begin + kChunk) - 1)
  std::vector<int64_t> first;        // per vertex: its first item
  int64_t group_begin[umap_sgd::kSubRounds + 1] = {};  // items of group s: [group_begin[s], group_begin[s + 1])
};

// Edges per item on the GPU: kGpuChunk, or SCURRY_UMAP_GPU_CHUNK. Each item is one thread's chain
// of dependent moves, so shorter chains on more threads hide more of the L2 latency that bounds the
// epochs: at 1.3M cells (session 13, one H200, `scurry --device gpu umap`) the 199 epochs took
// 0.52 s in chunks of 32 edges (umap_sgd::kChunk, the CPU's), 0.45 s in 16, 0.43 s in 8. The CPU
// keeps 32 (its threads are few); the GPU's layout is its own (deterministic, tested on quality).
constexpr int64_t kGpuChunk = 8;
int64_t gpu_chunk() {
  static const int64_t c = [] {
    const char* e = std::getenv("SCURRY_UMAP_GPU_CHUNK");
    const long long v = e ? std::atoll(e) : 0;
    return v > 0 ? static_cast<int64_t>(v) : kGpuChunk;
  }();
  return c;
}

EpochItems epoch_items(const CsrF& g) {
  EpochItems it;
  const int64_t chunk = gpu_chunk();
  const int64_t n = g.n_rows;
  it.first.resize(static_cast<size_t>(n));
  for (int s = 0; s < umap_sgd::kSubRounds; ++s) {
    it.group_begin[s] = static_cast<int64_t>(it.vertex.size());
    for (int64_t i = s; i < n; i += umap_sgd::kSubRounds) {
      it.first[i] = static_cast<int64_t>(it.vertex.size());
      const int64_t b = g.indptr[i], e = g.indptr[i + 1];
      for (int64_t c = b; c == b || c < e; c += chunk) {
        it.vertex.push_back(static_cast<int32_t>(i));
        it.begin.push_back(c);
      }
    }
  }
  it.group_begin[umap_sgd::kSubRounds] = static_cast<int64_t>(it.vertex.size());
  return it;
}

// One thread per item of a group: the chunk's displacement (umap_sgd::chunk_moves) into delta.
template <int D>
__global__ void __launch_bounds__(kBlock) chunk_kernel(const float* __restrict__ pos, float* __restrict__ delta,
                                                       const int64_t* __restrict__ indptr,
                                                       const int32_t* __restrict__ tail, const float* __restrict__ eps,
                                                       const int32_t* __restrict__ item_vertex,
                                                       const int64_t* __restrict__ item_begin, int64_t i0, int64_t i1,
                                                       int64_t chunk, umap_sgd::EpochParams p) {
  const int64_t q = i0 + blockIdx.x * static_cast<int64_t>(kBlock) + threadIdx.x;
  if (q >= i1) return;
  const int32_t v = item_vertex[q];
  const int64_t b = item_begin[q], row_end = indptr[v + 1];
  const int64_t e = row_end - b < chunk ? row_end : b + chunk;
  umap_sgd::chunk_moves<D>(pos, tail, eps, b, e, v, p, delta + q * p.dim);
}

// umap_sgd::chunk_moves with the next due edge's tail position loaded before the current edge's
// moves (its index, tail and position do not depend on them), so that the loads of one edge overlap
// the arithmetic of the one before: the same arithmetic in the same order, so the same bits (keep
// the two in step; the device call of session 9 compared them: identical X_umap).
template <int D>
__device__ __forceinline__ int64_t next_due(const float* __restrict__ eps, int64_t e, int64_t end,
                                            const umap_sgd::EpochParams& p, int64_t& n_neg) {
  for (; e < end; ++e) {
    n_neg = umap_sgd::due_negatives(eps[e], p.epoch, p.neg_rate);
    if (n_neg >= 0) return e;
  }
  return end;
}

template <int D>
__device__ __forceinline__ void chunk_moves_prefetch(const float* __restrict__ in, const int32_t* __restrict__ tail,
                                                     const float* __restrict__ eps, int64_t begin, int64_t end,
                                                     int32_t i, const umap_sgd::EpochParams& p,
                                                     float* __restrict__ delta) {
  float c[D];
  const float* ci = in + static_cast<int64_t>(i) * p.dim;
#pragma unroll
  for (int d = 0; d < D; ++d) c[d] = d < p.dim ? ci[d] : 0.0f;
  constexpr int kBatch = D <= 3 ? 8 : 1;
  int64_t n_neg = -1;
  int64_t e = next_due<D>(eps, begin, end, p, n_neg);
  int32_t j = e < end ? tail[e] : 0;
  float o[D];
#pragma unroll
  for (int d = 0; d < D; ++d) o[d] = (e < end && d < p.dim) ? in[static_cast<int64_t>(j) * p.dim + d] : 0.0f;
  while (e < end) {
    // the next due edge and its tail's position, ahead of this edge's moves
    int64_t n_neg2 = -1;
    const int64_t e2 = next_due<D>(eps, e + 1, end, p, n_neg2);
    const int32_t j2 = e2 < end ? tail[e2] : 0;
    float o2[D];
#pragma unroll
    for (int d = 0; d < D; ++d) o2[d] = (e2 < end && d < p.dim) ? in[static_cast<int64_t>(j2) * p.dim + d] : 0.0f;
    umap_sgd::attract<D>(c, o, p);  // as the head of (i, j)
    const uint64_t key = umap_sgd::edge_key(p.seed, i, j);
    for (int64_t s0 = 0; s0 < n_neg; s0 += kBatch) {
      float qv[kBatch][D];
      bool use[kBatch];
#pragma unroll
      for (int t = 0; t < kBatch; ++t) {
        const int64_t s2 = s0 + t;
        use[t] = false;
        if (s2 < n_neg) {
          const uint32_t k = umap_sgd::random_vertex_of(key, p.epoch, s2, p.n_vertices);
          use[t] = static_cast<int32_t>(k) != i;
          const float* q = in + static_cast<int64_t>(k) * p.dim;
#pragma unroll
          for (int d = 0; d < D; ++d) qv[t][d] = d < p.dim ? q[d] : 0.0f;
        }
      }
#pragma unroll
      for (int t = 0; t < kBatch; ++t) {
        if (!use[t]) continue;
        float diff[D];
        float dn = 0.0f;
#pragma unroll
        for (int d = 0; d < D; ++d) {
          diff[d] = d < p.dim ? c[d] - qv[t][d] : 0.0f;
          dn += diff[d] * diff[d];
        }
        float gr = 0.0f;
        if (dn > 0.0f) gr = umap_sgd::repulse_coef(dn, p.a, p.b, p.gamma);
#pragma unroll
        for (int d = 0; d < D; ++d)
          if (d < p.dim) c[d] += p.alpha * (gr > 0.0f ? umap_sgd::clip4(gr * diff[d]) : umap_sgd::kClip);
      }
    }
    umap_sgd::attract<D>(c, o, p);  // as the tail of (j, i)
    e = e2, j = j2, n_neg = n_neg2;
#pragma unroll
    for (int d = 0; d < D; ++d) o[d] = o2[d];
  }
#pragma unroll
  for (int d = 0; d < D; ++d) delta[d] = d < p.dim ? c[d] - ci[d] : 0.0f;
}

template <int D>
__global__ void __launch_bounds__(kBlock) chunk_kernel_prefetch(const float* __restrict__ pos, float* __restrict__ delta,
                                                                const int64_t* __restrict__ indptr,
                                                                const int32_t* __restrict__ tail,
                                                                const float* __restrict__ eps,
                                                                const int32_t* __restrict__ item_vertex,
                                                                const int64_t* __restrict__ item_begin, int64_t i0,
                                                                int64_t i1, int64_t chunk, umap_sgd::EpochParams p) {
  const int64_t q = i0 + blockIdx.x * static_cast<int64_t>(kBlock) + threadIdx.x;
  if (q >= i1) return;
  const int32_t v = item_vertex[q];
  const int64_t b = item_begin[q], row_end = indptr[v + 1];
  const int64_t e = row_end - b < chunk ? row_end : b + chunk;
  chunk_moves_prefetch<D>(pos, tail, eps, b, e, v, p, delta + q * p.dim);
}

// SCURRY_UMAP_GPU_KERNEL=plain: umap_sgd::chunk_moves as it is (the A/B of the prefetching loop).
bool plain_kernel() {
  static const bool plain = [] {
    const char* e = std::getenv("SCURRY_UMAP_GPU_KERNEL");
    return e && std::strcmp(e, "plain") == 0;
  }();
  return plain;
}

// One thread per vertex of group s: its items' displacements added in order to its position
// (vertex_epoch's arithmetic), written back into pos (the group's chunk kernel has finished reading).
template <int D>
__global__ void combine_kernel(float* __restrict__ pos, const float* __restrict__ delta,
                               const int64_t* __restrict__ first, int64_t n, int s, int64_t items_end, int dim) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(kBlock) + threadIdx.x;
  const int64_t i = s + t * umap_sgd::kSubRounds;
  if (i >= n) return;
  const int64_t q0 = first[i];
  const int64_t q1 = i + umap_sgd::kSubRounds < n ? first[i + umap_sgd::kSubRounds] : items_end;
  float acc[D];
  for (int d = 0; d < D; ++d) acc[d] = 0.0f;
  for (int64_t q = q0; q < q1; ++q)
    for (int d = 0; d < D && d < dim; ++d) acc[d] += delta[q * dim + d];
  for (int d = 0; d < D && d < dim; ++d) pos[i * dim + d] = pos[i * dim + d] + acc[d];
}

struct DeviceItems {
  DeviceArray<int32_t> vertex;
  DeviceArray<int64_t> begin, first;
  DeviceArray<float> delta;
  const int64_t* group_begin;
};

// SCURRY_UMAP_TIMES: the kernels of one epoch timed with events (`ev`: 2 x kSubRounds + 1 events).
template <int D>
void launch_epoch_d(CudaResources& r, float* pos, const DeviceItems& it, const int64_t* indptr, const int32_t* tail,
                    const float* eps, int64_t n, const umap_sgd::EpochParams& p, cudaEvent_t* ev) {
  if (ev) SCURRY_CUDA(cudaEventRecord(ev[0], r.stream));
  for (int s = 0; s < umap_sgd::kSubRounds; ++s) {
    const int64_t q0 = it.group_begin[s], q1 = it.group_begin[s + 1];
    const int64_t m = (n - s + umap_sgd::kSubRounds - 1) / umap_sgd::kSubRounds;
    if (m > 0) {
      const int grid = static_cast<int>((q1 - q0 + kBlock - 1) / kBlock);
      if (plain_kernel())
        chunk_kernel<D><<<grid, kBlock, 0, r.stream>>>(pos, it.delta.data(), indptr, tail, eps, it.vertex.data(),
                                                       it.begin.data(), q0, q1, gpu_chunk(), p);
      else
        chunk_kernel_prefetch<D><<<grid, kBlock, 0, r.stream>>>(pos, it.delta.data(), indptr, tail, eps,
                                                                it.vertex.data(), it.begin.data(), q0, q1,
                                                                gpu_chunk(), p);
      SCURRY_CUDA_LAUNCH();
    }
    if (ev) SCURRY_CUDA(cudaEventRecord(ev[2 * s + 1], r.stream));
    if (m > 0) {
      combine_kernel<D><<<static_cast<int>((m + kBlock - 1) / kBlock), kBlock, 0, r.stream>>>(
          pos, it.delta.data(), it.first.data(), n, s, q1, p.dim);
      SCURRY_CUDA_LAUNCH();
    }
    if (ev) SCURRY_CUDA(cudaEventRecord(ev[2 * s + 2], r.stream));
  }
}

void launch_epoch(CudaResources& r, float* pos, const DeviceItems& it, const int64_t* indptr, const int32_t* tail,
                  const float* eps, int64_t n, const umap_sgd::EpochParams& p, cudaEvent_t* ev = nullptr) {
  if (p.dim == 2) launch_epoch_d<2>(r, pos, it, indptr, tail, eps, n, p, ev);
  else if (p.dim == 3) launch_epoch_d<3>(r, pos, it, indptr, tail, eps, n, p, ev);
  else launch_epoch_d<kMaxGenericDim>(r, pos, it, indptr, tail, eps, n, p, ev);
}

template <class T>
void to_device(CudaResources& r, DeviceArray<T>& d, const T* h, size_t n) {
  if (n) SCURRY_CUDA(cudaMemcpyAsync(d.data(), h, n * sizeof(T), cudaMemcpyHostToDevice, r.stream));
}

}  // namespace

namespace {

// The epochs from the start layout init; known_wmax: the graph's largest weight when already
// checked (negative: check it here).
// items: the graph's epoch items when already being built (else built here).
UmapResult umap_gpu_epochs(const Context& ctx, const CsrF& graph, const DenseF& init, const UmapOptions& opt,
                           float known_wmax, std::future<EpochItems>* items_ahead = nullptr) {
  CudaResources* rp = ctx.cuda();
  if (!rp) fail_input(kWhere, "needs a GPU context; use --device gpu, or the CPU umap");
  CudaResources& r = *rp;
  const auto t0 = std::chrono::steady_clock::now();
  SCURRY_CUDA(cudaSetDevice(r.device));  // (another context's device may be the current one)
  const int64_t n = graph.n_rows, dim = opt.n_components;
  if (graph.n_cols != n)
    fail_input(kWhere, "the graph is ", n, " x ", graph.n_cols, "; it must be square (cells x cells)");
  if (n < 2) fail_input(kWhere, "the graph has ", n, " nodes; UMAP needs at least 2 cells");
  if (n > std::numeric_limits<int32_t>::max())
    fail_input(kWhere, "the graph has ", n, " nodes; at most 2^31 - 1 are supported");
  if (dim < 1 || dim >= n)
    fail_input(kWhere, "n_components = ", dim, " is out of range for ", n, " cells; use 1 <= n_components < n_cells");
  if (dim > kMaxGenericDim)
    fail_input(kWhere, "n_components = ", dim, " is more than the GPU layout supports (", kMaxGenericDim,
               "); use the CPU umap");
  if (opt.maxiter && *opt.maxiter < 0) fail_input(kWhere, "maxiter = ", *opt.maxiter, " must not be negative");
  check_sgd(opt);
  if (opt.sgd != "batched")
    fail_input(kWhere, "sgd '", opt.sgd, "' runs on the CPU only; use batched on the GPU, or --device cpu");
  if (!(opt.negative_sample_rate >= 0)) fail_input(kWhere, "negative_sample_rate must not be negative");
  if (init.n_rows != n || init.n_cols < dim)
    fail_input(kWhere, "the initial coordinates are ", init.n_rows, " x ", init.n_cols, "; need ", n, " x ", dim);
  if (static_cast<int64_t>(graph.indptr.size()) != n + 1 || graph.indptr.back() != graph.nnz())
    fail_input(kWhere, "the graph's row pointers do not match its entries; recompute the neighbours");
  const float wmax = known_wmax >= 0 ? known_wmax : checked_max_weight(ctx, graph);
  umap_mark("gpu: weights checked");

  UmapResult res;
  if (opt.a && opt.b) {
    res.a = *opt.a;
    res.b = *opt.b;
  } else {
    std::tie(res.a, res.b) = find_ab_params(opt.spread, opt.min_dist);
  }
  // The CPU path's rules (umap.cpp): 500 epochs up to 10,000 cells, 200 above; prune below
  // max / n_epochs (max / default when n_epochs <= 10).
  const int64_t default_epochs = n <= 10000 ? 500 : 200;
  const int64_t n_epochs = opt.maxiter ? *opt.maxiter : default_epochs;
  res.n_epochs = n_epochs;
  res.init = "given";
  const float threshold = wmax / static_cast<float>(n_epochs > 10 ? n_epochs : default_epochs);

  // Start layout, dim columns.
  std::vector<float> h_emb(static_cast<size_t>(n * dim));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < dim; ++c) h_emb[static_cast<size_t>(i * dim + c)] = init(i, c);

  const int64_t n_edges = graph.nnz();
  DeviceArray<float> emb(r, h_emb.size(), "umap embedding");
  to_device(r, emb, h_emb.data(), h_emb.size());
  float* cur = emb.data();
  if (n_edges > 0 && wmax > 0 && n_epochs > 1) {
    umap_mark("gpu: start layout uploaded");
    DeviceCsr dg = upload(r, graph);  // through pinned staging; the weights become eps in place
    DeviceArray<int32_t>& tail = dg.indices;
    DeviceArray<float>& eps = dg.data;
    DeviceArray<int64_t>& indptr = dg.indptr;
    epochs_per_sample_kernel<<<blocks_for(n_edges), kBlock, 0, r.stream>>>(eps.data(), n_edges, threshold, wmax);
    SCURRY_CUDA_LAUNCH();
    umap_sgd::EpochParams p = epoch_params(opt, res, n);
    // umap: epoch 0 samples nothing; after epoch m the rate becomes alpha (1 - m / n_epochs).
    umap_mark("gpu: graph uploaded");
    const EpochItems items = items_ahead && items_ahead->valid() ? items_ahead->get() : epoch_items(graph);
    umap_mark("gpu: epoch items built");
    DeviceItems dit;
    dit.vertex = DeviceArray<int32_t>(r, items.vertex.size(), "umap items (vertices)");
    dit.begin = DeviceArray<int64_t>(r, items.begin.size(), "umap items (first edges)");
    dit.first = DeviceArray<int64_t>(r, items.first.size(), "umap items (per vertex)");
    dit.delta = DeviceArray<float>(r, items.vertex.size() * static_cast<size_t>(dim), "umap item displacements");
    dit.group_begin = items.group_begin;
    to_device(r, dit.vertex, items.vertex.data(), items.vertex.size());
    to_device(r, dit.begin, items.begin.data(), items.begin.size());
    to_device(r, dit.first, items.first.data(), items.first.size());
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    umap_mark("gpu: items uploaded");
    const bool timed = std::getenv("SCURRY_UMAP_TIMES") != nullptr;
    constexpr int kEv = 2 * umap_sgd::kSubRounds + 1;
    cudaEvent_t ev[kEv] = {};
    if (timed) {
      for (auto& e : ev) SCURRY_CUDA(cudaEventCreate(&e));
      std::fprintf(stderr, "[umap] gpu: %lld edges, %lld items of <= %lld edges, groups of %lld items\n",
                   static_cast<long long>(n_edges), static_cast<long long>(items.vertex.size()),
                   static_cast<long long>(gpu_chunk()),
                   static_cast<long long>(items.group_begin[1] - items.group_begin[0]));
    }
    for (int64_t ep = 1; ep < n_epochs; ++ep) {
      umap_sgd::set_epoch(p, ep, opt.alpha, n_epochs);
      const bool sample = timed && (ep == 1 || ep == n_epochs / 2);
      launch_epoch(r, cur, dit, indptr.data(), tail.data(), eps.data(), n, p, sample ? ev : nullptr);
      if (sample) {
        SCURRY_CUDA(cudaEventSynchronize(ev[kEv - 1]));
        float chunk_ms = 0, comb_ms = 0, t = 0;
        for (int s2 = 0; s2 < umap_sgd::kSubRounds; ++s2) {
          SCURRY_CUDA(cudaEventElapsedTime(&t, ev[2 * s2], ev[2 * s2 + 1]));
          chunk_ms += t;
          SCURRY_CUDA(cudaEventElapsedTime(&t, ev[2 * s2 + 1], ev[2 * s2 + 2]));
          comb_ms += t;
        }
        std::fprintf(stderr, "[umap] gpu: epoch %lld: chunk kernels %.3f ms, combine kernels %.3f ms\n",
                     static_cast<long long>(ep), chunk_ms, comb_ms);
      }
    }
    if (timed)
      for (auto& e : ev) cudaEventDestroy(e);
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    umap_mark("gpu: epochs");
  }
  res.embedding = DenseF(n, dim);
  if (!h_emb.empty())
    SCURRY_CUDA(cudaMemcpyAsync(res.embedding.data.data(), cur, h_emb.size() * sizeof(float),
                                cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  res.epochs_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace

UmapResult umap_gpu(const Context& ctx, const CsrF& graph, const DenseF& init, const UmapOptions& opt) {
  return umap_gpu_epochs(ctx, graph, init, opt, -1.0f);
}

UmapResult umap_gpu(const Context& ctx, const CsrF& graph, const UmapOptions& opt, const DenseF* init) {
  if (!ctx.cuda()) fail_input(kWhere, "needs a GPU context; use --device gpu, or the CPU umap");
  // The CPU path with no epochs: validation, a, b, pruning and the initial layout (scaled to [0, 10]).
  UmapOptions start_opt = opt;
  start_opt.maxiter = 0;
  // The epochs' work items (host, ~0.12 s at 1.3M cells) depend on the graph alone: built on a thread
  // of their own while the start layout is made.
  std::future<EpochItems> items = std::async(std::launch::async, [&graph] { return epoch_items(graph); });
  const UmapResult start = umap(ctx, graph, start_opt, init);
  UmapOptions o = opt;
  o.a = start.a;
  o.b = start.b;
  UmapResult res = umap_gpu_epochs(ctx, graph, start.embedding, o, start.max_weight, &items);
  res.init = start.init;
  res.init_seconds = start.init_seconds;
  return res;
}


}  // namespace scurry
