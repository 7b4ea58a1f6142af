// UMAP SGD epochs on the GPU (see umap_gpu.hpp for the semantics).
//
// Floor on one H200 (1.3M cells, k = 15: about 25M directed edges after the fuzzy union, 200
// epochs, 2 dims): per epoch every edge reads its eps (4 B), and the sampled ones (mean w / w_max
// about 0.4, so ~2G samples over the run) read head, tail (8 B) and touch 1 + 5 rows of the
// embedding. DRAM: 200 x 25M x 4 B + 2G x 8 B ~ 36 GB -> 8 ms at 4.3 TB/s; the embedding itself
// (1.3M x 8 B = 10 MB) stays in the 50 MB L2, whose random 32-B sector traffic (~12G accesses,
// ~400 GB) is the real bound, ~40-80 ms. FLOPs: ~12G point updates x ~30 = 0.4 TFLOP -> 8 ms fp32.
// So ~0.1 s is the floor; target 0.7 s.
//
// At 10M cells (~200M edges): int64 edge counters and offsets throughout; device memory is
// 12 B per edge (tail, head, eps) plus 8 B per cell of indptr while the heads are expanded.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/cuda_resources.cuh"
#include "graph/mix64.cuh"
#include "graph/umap_gpu.hpp"

namespace scurry {
namespace {

using gpu::mix64;

const char* kWhere = "umap (gpu)";
constexpr int kBlock = 256;               // threads per block of every kernel here
constexpr int64_t kMaxBlocks = 1 << 16;   // grid-stride loops above this many blocks
constexpr float kClip = 4.0f;             // umap's gradient clip
constexpr int kMaxGenericDim = 16;        // n_components handled by the generic kernel

int blocks_for(int64_t n) { return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kBlock - 1) / kBlock, kMaxBlocks))); }

// Counter-based: vertex for negative sample s of edge e in epoch `epoch`, uniform in [0, n).
__device__ inline uint32_t random_vertex(uint64_t seed, int64_t e, int epoch, int64_t s, uint32_t n) {
  const uint64_t h = mix64(mix64(seed ^ static_cast<uint64_t>(e)) ^ ((static_cast<uint64_t>(epoch) << 32) + static_cast<uint64_t>(s)));
  return static_cast<uint32_t>(((h >> 32) * static_cast<uint64_t>(n)) >> 32);
}

__device__ inline float clip4(float v) { return fminf(fmaxf(v, -kClip), kClip); }

// head[p] = row of entry p.
__global__ void expand_heads_kernel(const int64_t* indptr, int64_t n, int32_t* head) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) head[p] = static_cast<int32_t>(i);
}

// In place: weight -> epochs per sample (w_max / w), 0 for pruned edges (never sampled).
__global__ void epochs_per_sample_kernel(float* w, int64_t n_edges, float threshold, float wmax) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n_edges;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = w[e];
    w[e] = (x >= threshold && x != 0.0f) ? static_cast<float>(1.0 / static_cast<double>(x / wmax)) : 0.0f;
  }
}

struct EpochParams {
  int64_t n_edges;
  uint32_t n_vertices;
  int dim;
  int epoch;  // >= 1 (nothing is sampled in epoch 0, as in umap)
  float alpha, a, b, gamma;
  double neg_rate;
  uint64_t seed;
};

// One epoch, one thread per edge. D: compile-time bound on dim (the loops stop at p.dim).
template <int D>
__global__ void epoch_kernel(float* emb, const int32_t* __restrict__ head, const int32_t* __restrict__ tail,
                             const float* __restrict__ eps_arr, EpochParams p) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < p.n_edges;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double eps = eps_arr[e];
    if (!(eps > 0)) continue;  // pruned
    const double n = p.epoch;
    const double j = floor(n / eps), jprev = floor((n - 1) / eps);
    if (!(j > jprev)) continue;  // not due this epoch
    int64_t n_neg = 0;
    if (p.neg_rate > 0) {
      // umap: up to epoch m, floor(m / eps_neg) - 1 negative samples were drawn in all (>= 0).
      const double eps_neg = eps / p.neg_rate;
      const double prev_epoch = jprev > 0 ? ceil(jprev * eps) : 0.0;  // epoch of the previous sample
      const double before = jprev > 0 ? fmax(0.0, floor(prev_epoch / eps_neg) - 1) : 0.0;
      const double now = fmax(0.0, floor(n / eps_neg) - 1);
      n_neg = now > before ? static_cast<int64_t>(now - before) : 0;
    }
    const int32_t h = head[e], t = tail[e];
    float* cur = emb + static_cast<int64_t>(h) * p.dim;
    float* oth = emb + static_cast<int64_t>(t) * p.dim;
    float c[D], o[D];
    float d2 = 0.0f;
#pragma unroll
    for (int d = 0; d < D; ++d) {
      c[d] = o[d] = 0.0f;
      if (d < p.dim) {
        c[d] = cur[d];
        o[d] = oth[d];
        const float x = c[d] - o[d];
        d2 += x * x;
      }
    }
    float gc = 0.0f;
    if (d2 > 0.0f) {
      const float pb = powf(d2, p.b);
      gc = -2.0f * p.a * p.b * (pb / d2) / (p.a * pb + 1.0f);
    }
#pragma unroll
    for (int d = 0; d < D; ++d)
      if (d < p.dim) {
        const float g = clip4(gc * (c[d] - o[d]));
        c[d] += g * p.alpha;
        o[d] -= g * p.alpha;
        oth[d] = o[d];
        cur[d] = c[d];
      }
    for (int64_t s = 0; s < n_neg; ++s) {
      const uint32_t k = random_vertex(p.seed, e, p.epoch, s, p.n_vertices);
      if (static_cast<int32_t>(k) == h) continue;
      const float* q = emb + static_cast<int64_t>(k) * p.dim;
      float r[D];
      float dn = 0.0f;
#pragma unroll
      for (int d = 0; d < D; ++d) {
        r[d] = 0.0f;
        if (d < p.dim) {
          r[d] = q[d];
          const float x = c[d] - r[d];
          dn += x * x;
        }
      }
      float gr = 0.0f;
      if (dn > 0.0f) gr = 2.0f * p.gamma * p.b / ((0.001f + dn) * (p.a * powf(dn, p.b) + 1.0f));
#pragma unroll
      for (int d = 0; d < D; ++d)
        if (d < p.dim) c[d] += (gr > 0.0f ? clip4(gr * (c[d] - r[d])) : kClip) * p.alpha;
    }
    if (n_neg > 0) {
#pragma unroll
      for (int d = 0; d < D; ++d)
        if (d < p.dim) cur[d] = c[d];
    }
  }
}

void launch_epoch(CudaResources& r, float* emb, const int32_t* head, const int32_t* tail, const float* eps,
                  const EpochParams& p) {
  const int grid = blocks_for(p.n_edges);
  if (p.dim == 2) epoch_kernel<2><<<grid, kBlock, 0, r.stream>>>(emb, head, tail, eps, p);
  else if (p.dim == 3) epoch_kernel<3><<<grid, kBlock, 0, r.stream>>>(emb, head, tail, eps, p);
  else epoch_kernel<kMaxGenericDim><<<grid, kBlock, 0, r.stream>>>(emb, head, tail, eps, p);
  SCURRY_CUDA_LAUNCH();
}

template <class T>
void to_device(CudaResources& r, DeviceArray<T>& d, const T* h, size_t n) {
  if (n) SCURRY_CUDA(cudaMemcpyAsync(d.data(), h, n * sizeof(T), cudaMemcpyHostToDevice, r.stream));
}

}  // namespace

UmapResult umap_gpu(const Context& ctx, const CsrF& graph, const DenseF& init, const UmapOptions& opt) {
  CudaResources* rp = ctx.cuda();
  if (!rp) fail_input(kWhere, "needs a GPU context; use --device gpu, or the CPU umap");
  CudaResources& r = *rp;
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
  if (!(opt.negative_sample_rate >= 0)) fail_input(kWhere, "negative_sample_rate must not be negative");
  if (init.n_rows != n || init.n_cols < dim)
    fail_input(kWhere, "the initial coordinates are ", init.n_rows, " x ", init.n_cols, "; need ", n, " x ", dim);
  if (static_cast<int64_t>(graph.indptr.size()) != n + 1 || graph.indptr.back() != graph.nnz())
    fail_input(kWhere, "the graph's row pointers do not match its entries; recompute the neighbours");
  float wmax = 0;
  for (float w : graph.data) {
    if (!std::isfinite(w) || w < 0)
      fail_input(kWhere, "the graph has a negative or non-finite weight; recompute the neighbours");
    wmax = std::max(wmax, w);
  }

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
  if (n_edges > 0 && wmax > 0 && n_epochs > 1) {
    DeviceArray<int32_t> tail(r, static_cast<size_t>(n_edges), "umap edge tails");
    DeviceArray<int32_t> head(r, static_cast<size_t>(n_edges), "umap edge heads");
    DeviceArray<float> eps(r, static_cast<size_t>(n_edges), "umap epochs per sample");
    to_device(r, tail, graph.indices.data(), static_cast<size_t>(n_edges));
    to_device(r, eps, graph.data.data(), static_cast<size_t>(n_edges));
    {
      DeviceArray<int64_t> indptr(r, static_cast<size_t>(n + 1), "umap row pointers");
      to_device(r, indptr, graph.indptr.data(), static_cast<size_t>(n + 1));
      expand_heads_kernel<<<blocks_for(n), kBlock, 0, r.stream>>>(indptr.data(), n, head.data());
      SCURRY_CUDA_LAUNCH();
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // indptr is freed here
    }
    epochs_per_sample_kernel<<<blocks_for(n_edges), kBlock, 0, r.stream>>>(eps.data(), n_edges, threshold, wmax);
    SCURRY_CUDA_LAUNCH();
    EpochParams p{};
    p.n_edges = n_edges;
    p.n_vertices = static_cast<uint32_t>(n);
    p.dim = static_cast<int>(dim);
    p.a = static_cast<float>(res.a);
    p.b = static_cast<float>(res.b);
    p.gamma = static_cast<float>(opt.gamma);
    p.neg_rate = opt.negative_sample_rate;
    p.seed = mix64(opt.random_state + 0x9E3779B97F4A7C15ULL);
    // umap: epoch 0 samples nothing; after epoch m the rate becomes alpha (1 - m / n_epochs).
    for (int64_t ep = 1; ep < n_epochs; ++ep) {
      p.epoch = static_cast<int>(ep);
      p.alpha = static_cast<float>(opt.alpha * (1.0 - static_cast<double>(ep - 1) / static_cast<double>(n_epochs)));
      launch_epoch(r, emb.data(), head.data(), tail.data(), eps.data(), p);
    }
  }
  res.embedding = DenseF(n, dim);
  if (!h_emb.empty())
    SCURRY_CUDA(cudaMemcpyAsync(res.embedding.data.data(), emb.data(), h_emb.size() * sizeof(float),
                                cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return res;
}

UmapResult umap_gpu(const Context& ctx, const CsrF& graph, const UmapOptions& opt, const DenseF* init) {
  if (!ctx.cuda()) fail_input(kWhere, "needs a GPU context; use --device gpu, or the CPU umap");
  // The CPU path with no epochs: validation, a, b, pruning and the initial layout (scaled to [0, 10]).
  UmapOptions start_opt = opt;
  start_opt.maxiter = 0;
  const UmapResult start = umap(ctx, graph, start_opt, init);
  UmapOptions o = opt;
  o.a = start.a;
  o.b = start.b;
  UmapResult res = umap_gpu(ctx, graph, start.embedding, o);
  res.init = start.init;
  return res;
}


}  // namespace scurry
