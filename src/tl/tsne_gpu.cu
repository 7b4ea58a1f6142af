// scurry: t-SNE on the GPU (tsne_gpu.hpp): the iterations, the FIt-SNE repulsion with cuFFT.
#include <cub/cub.cuh>
#include <cufft.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

#include "core/error.hpp"
#include "graph/knn_gpu.hpp"
#include "tl/tsne_detail.hpp"
#include "tl/tsne_gpu.cuh"
#include "tl/tsne_gpu.hpp"

#define SCURRY_CUFFT(call)                                                                          \
  do {                                                                                              \
    cufftResult scurry_fr_ = (call);                                                                \
    if (scurry_fr_ != CUFFT_SUCCESS)                                                                \
      ::scurry::fail("cuFFT error ", static_cast<int>(scurry_fr_), " in ", #call, " (", __FILE__, ":", \
                     __LINE__, ")");                                                                \
  } while (0)

namespace scurry {

namespace gpu::tsne {
namespace {

const char* kWhere = "tsne";
constexpr int kTerms = 4;           // charges 1, y1, y2, |y|^2 (as the CPU path)
constexpr int kSpreadThreads = 256;  // threads of a box's block when spreading charges
constexpr int kMaxNodes = 5;        // Lagrange nodes a box the GPU kernels are built for (2..5)

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The block's values summed by a fixed tree (blockDim.x == kThreads); the result in thread 0.
__device__ double block_sum(double v) {
  __shared__ double sh[kThreads];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int h = kThreads / 2; h > 0; h >>= 1) {
    if (static_cast<int>(threadIdx.x) < h) sh[threadIdx.x] += sh[threadIdx.x + h];
    __syncthreads();
  }
  return sh[0];
}

// Min and max over [b chunk, (b + 1) chunk) of lo_in / hi_in (both y in the first pass); a non-finite
// value makes the minimum -inf (the host then stops: the layout diverged).
__global__ void bounds_kernel(const double* lo_in, const double* hi_in, int64_t m, int64_t chunk, double* lo_out,
                              double* hi_out) {
  __shared__ double sl[kThreads], sh[kThreads];
  const int64_t a = static_cast<int64_t>(blockIdx.x) * chunk, b = min(m, a + chunk);
  double l = INFINITY, h = -INFINITY;
  bool bad = false;
  for (int64_t i = a + threadIdx.x; i < b; i += kThreads) {
    const double u = lo_in[i], v = hi_in[i];
    if (!isfinite(u) || !isfinite(v)) bad = true;
    else {
      l = fmin(l, u);
      h = fmax(h, v);
    }
  }
  sl[threadIdx.x] = bad ? -INFINITY : l;
  sh[threadIdx.x] = h;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) {
      const double x = sl[threadIdx.x + s];
      sl[threadIdx.x] = (isinf(x) && x < 0) ? x : fmin(sl[threadIdx.x], x);
      sh[threadIdx.x] = fmax(sh[threadIdx.x], sh[threadIdx.x + s]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    lo_out[blockIdx.x] = sl[0];
    hi_out[blockIdx.x] = sh[0];
  }
}

// The box of coordinate v and its offset in it, as the CPU path (tsne.cpp) computes them.
__device__ __forceinline__ int64_t box_of(double v, double lo, double bw, int64_t boxes, double* frac) {
  const double u = (v - lo) / bw;
  const int64_t b = min(boxes - 1, max(int64_t{0}, static_cast<int64_t>(floor(u))));
  *frac = u - static_cast<double>(b);
  return b;
}

// Lagrange weights of the P equispaced nodes (j + 1/2) / P of a unit box at t.
template <int P>
__device__ __forceinline__ void lagrange(double t, double* w) {
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const double xj = (static_cast<double>(j) + 0.5) / static_cast<double>(P);
    double num = 1, den = 1;
#pragma unroll
    for (int m = 0; m < P; ++m) {
      if (m == j) continue;
      const double xm = (static_cast<double>(m) + 0.5) / static_cast<double>(P);
      num *= t - xm;
      den *= xj - xm;
    }
    w[j] = num / den;
  }
}

__global__ void box_keys_kernel(const double* y, int64_t n, double lo, double bw, int64_t boxes, uint32_t* keys) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double f;
  const int64_t bx = box_of(y[2 * i], lo, bw, boxes, &f), by = box_of(y[2 * i + 1], lo, bw, boxes, &f);
  keys[i] = static_cast<uint32_t>(bx * boxes + by);
}

__global__ void iota_kernel(int32_t* v, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) v[i] = static_cast<int32_t>(i);
}

// One block a box: its points (in index order, from the stable sort) strided over the threads, each
// thread's P x P x 4 charges in registers, then a fixed tree over the warp and the warps in order.
// The box's nodes are its own (FIt-SNE's), so no two blocks write the same grid value: no atomics.
template <int P>
__global__ void __launch_bounds__(kSpreadThreads) spread_kernel(const double* y, const int32_t* order,
                                                                const int32_t* starts, int64_t boxes, double lo,
                                                                double bw, double mid, int64_t M, float* grid) {
  constexpr int V = P * P * kTerms;
  constexpr int kWarps = kSpreadThreads / kWarp;
  __shared__ double sh[kWarps][V];
  const int64_t b = blockIdx.x, bx = b / boxes, by = b % boxes;
  const int32_t s = starts[b], e = starts[b + 1];
  double acc[V];
#pragma unroll
  for (int v = 0; v < V; ++v) acc[v] = 0;
  for (int32_t q = s + static_cast<int32_t>(threadIdx.x); q < e; q += kSpreadThreads) {
    const int32_t i = order[q];
    const double v0 = y[2 * i], v1 = y[2 * i + 1];
    const double u0 = (v0 - lo) / bw - static_cast<double>(bx), u1 = (v1 - lo) / bw - static_cast<double>(by);
    double wx[P], wy[P];
    lagrange<P>(u0, wx);
    lagrange<P>(u1, wy);
    const double c0 = v0 - mid, c1 = v1 - mid;
    const double qv[kTerms] = {1.0, c0, c1, c0 * c0 + c1 * c1};
#pragma unroll
    for (int a = 0; a < P; ++a)
#pragma unroll
      for (int f = 0; f < P; ++f) {
        const double w = wx[a] * wy[f];
#pragma unroll
        for (int t = 0; t < kTerms; ++t) acc[(a * P + f) * kTerms + t] += w * qv[t];
      }
  }
  const int lane = static_cast<int>(threadIdx.x % kWarp), warp = static_cast<int>(threadIdx.x / kWarp);
#pragma unroll
  for (int v = 0; v < V; ++v) {
    double x = acc[v];
    for (int o = kWarp / 2; o > 0; o >>= 1) x += __shfl_down_sync(0xffffffffu, x, o);
    if (lane == 0) sh[warp][v] = x;
  }
  __syncthreads();
  for (int v = static_cast<int>(threadIdx.x); v < V; v += kSpreadThreads) {
    double x = 0;
    for (int w = 0; w < kWarps; ++w) x += sh[w][v];
    const int node = v / kTerms, t = v % kTerms, a = node / P, f = node % P;
    grid[t * M * M + (bx * P + a) * M + by * P + f] = static_cast<float>(x);
  }
}

// The circulant kernel w^2 = 1 / (1 + d^2)^2 on the M x M grid of node spacing delta.
__global__ void kernel_grid_kernel(int64_t M, double delta, double* k) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= M * M) return;
  const int64_t r = e / M, c = e % M;
  const double dr = delta * static_cast<double>(r <= M / 2 ? r : r - M);
  const double dc = delta * static_cast<double>(c <= M / 2 ? c : c - M);
  const double w = 1.0 / (1.0 + dr * dr + dc * dc);
  k[e] = w * w;
}

// The kernel's spectrum (real: the kernel is real and even) times the inverse transform's 1 / M^2.
__global__ void kernel_spectrum_kernel(const cufftDoubleComplex* s, int64_t count, double scale, float* out) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < count) out[e] = static_cast<float>(s[e].x * scale);
}

__global__ void multiply_kernel(cufftComplex* spec, const float* k, int64_t count) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= count * kTerms) return;
  const float f = k[e % count];
  spec[e].x *= f;
  spec[e].y *= f;
}

// A thread a point: the potentials of its box's nodes interpolated back (double), its repulsive sums
// and its term of Z; Z's terms summed by the block's fixed tree into zpart[block].
template <int P>
__global__ void interpolate_kernel(const double* y, int64_t n, int64_t boxes, double lo, double bw, double mid,
                                   int64_t M, const float* pot, double* rep, double* zpart) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  double z = 0;
  if (i < n) {
    const double v0 = y[2 * i], v1 = y[2 * i + 1];
    double f0, f1;
    const int64_t bx = box_of(v0, lo, bw, boxes, &f0), by = box_of(v1, lo, bw, boxes, &f1);
    double wx[P], wy[P];
    lagrange<P>(f0, wx);
    lagrange<P>(f1, wy);
    double phi[kTerms] = {0, 0, 0, 0};
    const int64_t MM = M * M;
#pragma unroll
    for (int a = 0; a < P; ++a)
#pragma unroll
      for (int f = 0; f < P; ++f) {
        const double w = wx[a] * wy[f];
        const int64_t at = (bx * P + a) * M + by * P + f;
#pragma unroll
        for (int t = 0; t < kTerms; ++t) phi[t] += w * static_cast<double>(pot[t * MM + at]);
      }
    const double c0 = v0 - mid, c1 = v1 - mid;
    // sum_j w_ij = sum_j w_ij^2 (1 + |y_i|^2 - 2 y_i.y_j + |y_j|^2), the j = i term (1) removed.
    z = (1.0 + c0 * c0 + c1 * c1) * phi[0] - 2.0 * (c0 * phi[1] + c1 * phi[2]) + phi[3] - 1.0;
    rep[2 * i] = c0 * phi[0] - phi[1];
    rep[2 * i + 1] = c1 * phi[0] - phi[2];
  }
  const double s = block_sum(z);
  if (threadIdx.x == 0) zpart[blockIdx.x] = s;
}

// All pairs (method exact, or auto below exact_below cells): a thread a point, j in order.
__global__ void exact_kernel(const double* y, int64_t n, double* rep, double* zrow) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const double a0 = y[2 * i], a1 = y[2 * i + 1];
  double z = 0, r0 = 0, r1 = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double d0 = a0 - y[2 * j], d1 = a1 - y[2 * j + 1];
    const double w = 1.0 / (1.0 + d0 * d0 + d1 * d1);
    z += w;
    r0 += w * w * d0;
    r1 += w * w * d1;
  }
  rep[2 * i] = r0;
  rep[2 * i + 1] = r1;
  zrow[i] = z - 1.0;  // the j = i term
}

// The attraction over row i of P, a warp a row (lanes strided over the row, a fixed butterfly). A
// lane's entries are taken kAttractAhead at a time, their indices and then their positions loaded
// before any is used (the gathers of y are the kernel's latency), and added in the same order as one
// at a time: the same sums.
constexpr int kAttractAhead = 4;
__device__ __forceinline__ void attract_one(double2 yi, double2 yj, float v, double ex, double& a0, double& a1) {
  const double d0 = yi.x - yj.x, d1 = yi.y - yj.y;
  const double w = static_cast<double>(v) * ex / (1.0 + d0 * d0 + d1 * d1);
  a0 += w * d0;
  a1 += w * d1;
}
__global__ void attraction_kernel(const int64_t* indptr, const int32_t* idx, const float* val, const double* y,
                                  int64_t n, double ex, double* att) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= n) return;  // warp-uniform
  const double2* y2 = reinterpret_cast<const double2*>(y);  // (x, y) pairs, 16-byte aligned
  const double2 yi = y2[row];
  double a0 = 0, a1 = 0;
  const int64_t end = indptr[row + 1];
  int64_t e = indptr[row] + lane;
  for (; e + (kAttractAhead - 1) * kWarp < end; e += kAttractAhead * kWarp) {
    int32_t j[kAttractAhead];
    float v[kAttractAhead];
    double2 yj[kAttractAhead];
#pragma unroll
    for (int u = 0; u < kAttractAhead; ++u) j[u] = __ldg(idx + e + u * kWarp), v[u] = __ldg(val + e + u * kWarp);
#pragma unroll
    for (int u = 0; u < kAttractAhead; ++u) yj[u] = y2[j[u]];
#pragma unroll
    for (int u = 0; u < kAttractAhead; ++u) attract_one(yi, yj[u], v[u], ex, a0, a1);
  }
  for (; e < end; e += kWarp) attract_one(yi, y2[idx[e]], val[e], ex, a0, a1);
  a0 = warp_sum(a0);
  a1 = warp_sum(a1);
  if (lane == 0) {
    att[2 * row] = a0;
    att[2 * row + 1] = a1;
  }
}

// sklearn's gradient step with gains (+0.2 / x0.8, at least 0.01) and momentum.
__global__ void update_kernel(const double* att, const double* rep, const double* z, int64_t m, double momentum,
                              double lr, double* gains, double* upd, double* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m) return;
  const double invz = 1.0 / fmax(*z, 1e-300);
  const double grad = 4.0 * (att[i] - rep[i] * invz);
  const bool inc = upd[i] * grad < 0;
  double g = inc ? gains[i] + 0.2 : gains[i] * 0.8;
  g = fmax(g, 0.01);
  gains[i] = g;
  const double u = momentum * upd[i] - lr * g * grad;
  upd[i] = u;
  y[i] += u;
}

// KL(P || Q) terms of row i (a warp a row): sum_j p_ij log(p_ij / q_ij), q_ij = w_ij / Z.
__global__ void kl_kernel(const int64_t* indptr, const int32_t* idx, const float* val, const double* y, int64_t n,
                          const double* z, double* out) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= n) return;
  const double y0 = y[2 * row], y1 = y[2 * row + 1], zz = *z;
  double s = 0;
  for (int64_t e = indptr[row] + lane; e < indptr[row + 1]; e += kWarp) {
    const double p = val[e];
    if (p <= 0) continue;
    const int64_t j = idx[e];
    const double d0 = y0 - y[2 * j], d1 = y1 - y[2 * j + 1];
    const double q = 1.0 / (1.0 + d0 * d0 + d1 * d1) / zz;
    s += p * ::log(fmax(p, 1e-300) / fmax(q, 1e-300));
  }
  s = warp_sum(s);
  if (lane == 0) out[row] = s;
}

template <class T>
void zero(CudaResources& r, T* p, int64_t count) {
  if (count > 0) SCURRY_CUDA(cudaMemsetAsync(p, 0, static_cast<size_t>(count) * sizeof(T), r.stream));
}

// The grid of one size M: cuFFT plans (R2C and C2R of the kTerms grids in one batch; D2Z of the
// kernel), the grids and the kernel's spectrum (recomputed when the node spacing changes). Plans are
// made when M changes, as the CPU path's FFTW plans; a plan gives the same bits every time.
class FftGrid {
 public:
  FftGrid(CudaResources& r, int64_t M) : r_(r), M_(M), S_(M * (M / 2 + 1)) {
    if (M > 46340) fail("tsne (gpu): a grid of ", M, " nodes a side is past cuFFT's int sizes");
    const int m = static_cast<int>(M);
    int dims[2] = {m, m};
    SCURRY_CUFFT(cufftPlanMany(&fwd_, 2, dims, nullptr, 1, m * m, nullptr, 1, static_cast<int>(S_), CUFFT_R2C, kTerms));
    SCURRY_CUFFT(cufftPlanMany(&inv_, 2, dims, nullptr, 1, static_cast<int>(S_), nullptr, 1, m * m, CUFFT_C2R, kTerms));
    SCURRY_CUFFT(cufftPlan2d(&kplan_, m, m, CUFFT_D2Z));
    for (cufftHandle h : {fwd_, inv_, kplan_}) SCURRY_CUFFT(cufftSetStream(h, r.stream));
    in_ = DeviceArray<float>(r, static_cast<size_t>(kTerms * M * M), "tsne charge grids");
    out_ = DeviceArray<float>(r, static_cast<size_t>(kTerms * M * M), "tsne potential grids");
    spec_ = DeviceArray<cufftComplex>(r, static_cast<size_t>(kTerms * S_), "tsne grid spectra");
    kspec_ = DeviceArray<float>(r, static_cast<size_t>(S_), "tsne kernel spectrum");
  }
  ~FftGrid() {
    for (cufftHandle h : {fwd_, inv_, kplan_})
      if (h) cufftDestroy(h);
  }
  FftGrid(const FftGrid&) = delete;
  FftGrid& operator=(const FftGrid&) = delete;
  int64_t M() const { return M_; }
  float* charges() { return in_.data(); }
  const float* potentials() const { return out_.data(); }

  void set_kernel(double delta) {
    if (delta == delta_) return;
    DeviceArray<double> k(r_, static_cast<size_t>(M_ * M_), "tsne kernel grid");
    DeviceArray<cufftDoubleComplex> ks(r_, static_cast<size_t>(S_), "tsne kernel transform");
    kernel_grid_kernel<<<blocks_for(M_ * M_), kThreads, 0, r_.stream>>>(M_, delta, k.data());
    SCURRY_CUDA_LAUNCH();
    SCURRY_CUFFT(cufftExecD2Z(kplan_, k.data(), ks.data()));
    kernel_spectrum_kernel<<<blocks_for(S_), kThreads, 0, r_.stream>>>(ks.data(), S_,
                                                                       1.0 / static_cast<double>(M_ * M_), kspec_.data());
    SCURRY_CUDA_LAUNCH();
    SCURRY_CUDA(cudaStreamSynchronize(r_.stream));  // before k and ks go
    delta_ = delta;
  }
  void clear_charges() { zero(r_, in_.data(), kTerms * M_ * M_); }
  void convolve() {
    SCURRY_CUFFT(cufftExecR2C(fwd_, in_.data(), spec_.data()));
    multiply_kernel<<<blocks_for(kTerms * S_), kThreads, 0, r_.stream>>>(spec_.data(), kspec_.data(), S_);
    SCURRY_CUDA_LAUNCH();
    SCURRY_CUFFT(cufftExecC2R(inv_, spec_.data(), out_.data()));
  }

 private:
  CudaResources& r_;
  int64_t M_, S_;
  double delta_ = -1;
  cufftHandle fwd_ = 0, inv_ = 0, kplan_ = 0;
  DeviceArray<float> in_, out_, kspec_;
  DeviceArray<cufftComplex> spec_;
};

// Phase clock: CUDA events at the phase boundaries of an iteration, read after the next sync.
enum Phase { kGrid, kFft, kInterp, kAttract, kUpdate, kPhases };

// The layout on the device and the repulsion, shared by tsne_gpu and tsne_repulsion_gpu.
class Layout {
 public:
  Layout(CudaResources& r, int64_t n, const TsneOptions& opt)
      : r_(r), n_(n), opt_(opt), y(r, static_cast<size_t>(2 * n), "tsne layout"),
        rep(r, static_cast<size_t>(2 * n), "tsne repulsion"), z(r, 1, "tsne Z"), bnd_(r, 2, "tsne bounds") {
    if (n > INT32_MAX) fail_input(kWhere, n, " cells is more than the GPU path's 2^31 - 1");
    const int64_t p = opt.n_interpolation_points;
    if (p < 2 || p > kMaxNodes)
      fail_input(kWhere, "the GPU path takes 2 to ", kMaxNodes, " interpolation points a box, not ", p,
                 "; use --device cpu");
    exact_ = tsne_detail::exact_repulsion(opt, n);
    const int64_t bchunk = std::max<int64_t>(kThreads, (2 * n + 1023) / 1024);
    bchunk_ = bchunk;
    nbnd_ = (2 * n + bchunk - 1) / bchunk;
    bpart_ = DeviceArray<double>(r, static_cast<size_t>(2 * nbnd_), "tsne bound partials");
    if (exact_) {
      zterm_ = DeviceArray<double>(r, static_cast<size_t>(n), "tsne Z terms");
    } else {
      zterm_ = DeviceArray<double>(r, blocks_for(n), "tsne Z partials");
      keys_ = DeviceArray<uint32_t>(r, static_cast<size_t>(n), "tsne box keys");
      skeys_ = DeviceArray<uint32_t>(r, static_cast<size_t>(n), "tsne box keys (sorted)");
      iota_ = DeviceArray<int32_t>(r, static_cast<size_t>(n), "tsne point ids");
      order_ = DeviceArray<int32_t>(r, static_cast<size_t>(n), "tsne points by box");
      iota_kernel<<<blocks_for(n), kThreads, 0, r.stream>>>(iota_.data(), n);
      SCURRY_CUDA_LAUNCH();
    }
    SCURRY_CUDA(cudaMallocHost(&host_bounds_, 2 * sizeof(double)));
    for (auto& e : ev_) SCURRY_CUDA(cudaEventCreate(&e));
  }
  ~Layout() {
    cudaFreeHost(host_bounds_);
    for (auto& e : ev_)
      if (e) cudaEventDestroy(e);
  }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;

  // The layout's bounds on the host (waits for the stream): every iteration's one sync.
  void bounds(double& lo, double& hi) {
    bounds_kernel<<<static_cast<unsigned>(nbnd_), kThreads, 0, r_.stream>>>(y.data(), y.data(), 2 * n_, bchunk_,
                                                                           bpart_.data(), bpart_.data() + nbnd_);
    SCURRY_CUDA_LAUNCH();
    bounds_kernel<<<1, kThreads, 0, r_.stream>>>(bpart_.data(), bpart_.data() + nbnd_, nbnd_, nbnd_, bnd_.data(),
                                                 bnd_.data() + 1);
    SCURRY_CUDA_LAUNCH();
    SCURRY_CUDA(cudaMemcpyAsync(host_bounds_, bnd_.data(), 2 * sizeof(double), cudaMemcpyDeviceToHost, r_.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r_.stream));
    lo = host_bounds_[0];
    hi = host_bounds_[1];
  }

  // rep and z for the layout y. timed: events recorded (the phases grid, FFT, interpolation).
  void repulsion(bool timed) {
    double lo, hi;
    bounds(lo, hi);
    if (pending_) collect();  // the last iteration's events are complete: the stream has synced
    const auto t0 = std::chrono::steady_clock::now();
    if (!std::isfinite(lo) || !std::isfinite(hi))
      fail("tsne: the layout diverged (non-finite coordinates); lower the learning_rate");
    if (exact_) {
      host_seconds += seconds_since(t0);
      if (timed) start(), record(kGrid), record(kFft);
      exact_kernel<<<blocks_for(n_), kThreads, 0, r_.stream>>>(y.data(), n_, rep.data(), zterm_.data());
      SCURRY_CUDA_LAUNCH();
      sum_fixed(r_, zterm_.data(), n_, z.data(), scratch_);
      if (timed) record(kInterp);
      return;
    }
    double span = hi - lo;
    if (!(span > 0)) span = 1e-12;
    const tsne_detail::GridShape shape = tsne_detail::grid_shape(span, opt_);
    const int64_t p = opt_.n_interpolation_points, M = shape.M, boxes = shape.boxes;
    const double bw = shape.bw, delta = bw / static_cast<double>(p), mid = 0.5 * (lo + hi);
    if (!grid_ || grid_->M() != M) {
      grid_.reset();  // the old grid's memory first
      grid_ = std::make_unique<FftGrid>(r_, M);
      const int64_t nb = boxes * boxes;
      if (starts_.size() < static_cast<size_t>(nb + 1))
        starts_ = DeviceArray<int32_t>(r_, static_cast<size_t>(nb + 1), "tsne box starts");
    }
    grid_->set_kernel(delta);
    host_seconds += seconds_since(t0);
    const int64_t nb = boxes * boxes;
    int bits = 1;
    while (bits < 32 && (int64_t{1} << bits) < nb) ++bits;
    if (timed) start();
    box_keys_kernel<<<blocks_for(n_), kThreads, 0, r_.stream>>>(y.data(), n_, lo, bw, boxes, keys_.data());
    SCURRY_CUDA_LAUNCH();
    size_t bytes = 0;
    SCURRY_CUDA(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys_.data(), skeys_.data(), iota_.data(),
                                                order_.data(), n_, 0, bits, r_.stream));
    if (sort_tmp_.size() < bytes) sort_tmp_ = DeviceArray<uint8_t>(r_, std::max<size_t>(bytes, 16), "tsne sort scratch");
    SCURRY_CUDA(cub::DeviceRadixSort::SortPairs(sort_tmp_.data(), bytes, keys_.data(), skeys_.data(), iota_.data(),
                                                order_.data(), n_, 0, bits, r_.stream));
    segment_starts_kernel<<<blocks_for(nb + 1), kThreads, 0, r_.stream>>>(skeys_.data(), n_, nb, starts_.data());
    SCURRY_CUDA_LAUNCH();
    grid_->clear_charges();
    const unsigned gb = blocks_for(nb, 1);
    switch (p) {
      case 2: spread_kernel<2><<<gb, kSpreadThreads, 0, r_.stream>>>(y.data(), order_.data(), starts_.data(), boxes, lo, bw, mid, M, grid_->charges()); break;
      case 3: spread_kernel<3><<<gb, kSpreadThreads, 0, r_.stream>>>(y.data(), order_.data(), starts_.data(), boxes, lo, bw, mid, M, grid_->charges()); break;
      case 4: spread_kernel<4><<<gb, kSpreadThreads, 0, r_.stream>>>(y.data(), order_.data(), starts_.data(), boxes, lo, bw, mid, M, grid_->charges()); break;
      default: spread_kernel<5><<<gb, kSpreadThreads, 0, r_.stream>>>(y.data(), order_.data(), starts_.data(), boxes, lo, bw, mid, M, grid_->charges()); break;
    }
    SCURRY_CUDA_LAUNCH();
    if (timed) record(kGrid);
    grid_->convolve();
    if (timed) record(kFft);
    const unsigned ib = blocks_for(n_);
    switch (p) {
      case 2: interpolate_kernel<2><<<ib, kThreads, 0, r_.stream>>>(y.data(), n_, boxes, lo, bw, mid, M, grid_->potentials(), rep.data(), zterm_.data()); break;
      case 3: interpolate_kernel<3><<<ib, kThreads, 0, r_.stream>>>(y.data(), n_, boxes, lo, bw, mid, M, grid_->potentials(), rep.data(), zterm_.data()); break;
      case 4: interpolate_kernel<4><<<ib, kThreads, 0, r_.stream>>>(y.data(), n_, boxes, lo, bw, mid, M, grid_->potentials(), rep.data(), zterm_.data()); break;
      default: interpolate_kernel<5><<<ib, kThreads, 0, r_.stream>>>(y.data(), n_, boxes, lo, bw, mid, M, grid_->potentials(), rep.data(), zterm_.data()); break;
    }
    SCURRY_CUDA_LAUNCH();
    sum_fixed(r_, zterm_.data(), static_cast<int64_t>(ib), z.data(), scratch_);
    if (timed) record(kInterp);
  }

  // Device time per phase (CUDA events): start() where an iteration's device work begins (after the
  // host's setup), record(ph) where phase ph ends, end_iteration() after the last phase; the elapsed
  // times are added to phase[] at the next sync (collect), never waiting on the GPU for them.
  void record(int ph) { SCURRY_CUDA(cudaEventRecord(ev_[ph], r_.stream)); }
  void end_iteration() {
    record(kUpdate);
    pending_ = true;
  }
  void finish() {
    SCURRY_CUDA(cudaStreamSynchronize(r_.stream));
    if (pending_) collect();
  }
  double phase[kPhases] = {};

  static double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }

  DeviceArray<double>& scratch() { return scratch_; }
  int64_t grid_size() const { return grid_ ? grid_->M() : 0; }

 private:
  void start() { SCURRY_CUDA(cudaEventRecord(ev_[kPhases], r_.stream)); }
  void collect() {
    cudaEvent_t prev = ev_[kPhases];
    for (int ph = 0; ph < kPhases; ++ph) {
      float ms = 0;
      SCURRY_CUDA(cudaEventElapsedTime(&ms, prev, ev_[ph]));
      phase[ph] += ms / 1000.0;
      prev = ev_[ph];
    }
    pending_ = false;
  }
  bool pending_ = false;

  CudaResources& r_;
  int64_t n_;
  TsneOptions opt_;
  bool exact_ = false;
  int64_t bchunk_ = 0, nbnd_ = 0;
  DeviceArray<double> bpart_;

 public:
  DeviceArray<double> y, rep, z;
  double host_seconds = 0;

 private:
  DeviceArray<double> bnd_, zterm_, scratch_;
  DeviceArray<uint32_t> keys_, skeys_;
  DeviceArray<int32_t> iota_, order_, starts_;
  DeviceArray<uint8_t> sort_tmp_;
  std::unique_ptr<FftGrid> grid_;
  double* host_bounds_ = nullptr;
  cudaEvent_t ev_[kPhases + 1] = {};
};

}  // namespace
}  // namespace gpu::tsne

namespace {

CudaResources& cuda_of(const Context& ctx) {
  if (ctx.backend() != Backend::cuda || ctx.cuda() == nullptr)
    fail_input("tsne", "the GPU t-SNE needs a CUDA context; use --device gpu or the CPU path");
  return *ctx.cuda();
}

void upload(CudaResources& r, double* to, const std::vector<double>& from) {
  SCURRY_CUDA(cudaMemcpyAsync(to, from.data(), from.size() * sizeof(double), cudaMemcpyHostToDevice, r.stream));
}

}  // namespace

double tsne_repulsion_gpu(const Context& ctx, const std::vector<double>& y, int64_t n, const TsneOptions& opt,
                          std::vector<double>& rep) {
  CudaResources& r = cuda_of(ctx);
  if (static_cast<int64_t>(y.size()) != 2 * n) fail_input("tsne", "the layout holds ", y.size(), " values, not 2 x ", n);
  gpu::tsne::Layout L(r, n, opt);
  upload(r, L.y.data(), y);
  L.repulsion(false);
  rep.resize(static_cast<size_t>(2 * n));
  double z = 0;
  SCURRY_CUDA(cudaMemcpyAsync(rep.data(), L.rep.data(), rep.size() * sizeof(double), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaMemcpyAsync(&z, L.z.data(), sizeof(double), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return z;
}

TsneResult tsne_gpu(const Context& ctx, const DenseF& X, const TsneOptions& opt) {
  using namespace gpu::tsne;
  using clock = std::chrono::steady_clock;
  CudaResources& r = cuda_of(ctx);
  const int64_t n = X.n_rows;
  tsne_detail::check_options(opt, n);
  const int threads = opt.n_jobs > 0 ? opt.n_jobs : std::max(1, ctx.threads());
  TsneResult res;
  auto t0 = clock::now();
  // Affinities: the kNN (exact, or IVF-Flat from knn_ivf_from cells under knn = auto), then P on the device.
  const int64_t k = tsne_detail::n_neighbors(opt, n);
  const KnnMetric metric = parse_knn_metric(opt.metric, "tsne");
  const bool ivf = opt.knn == "ivf" || (opt.knn == "auto" && n >= opt.knn_ivf_from);
  res.knn_used = ivf ? "ivf" : "exact";
  std::vector<int32_t> nbr;
  std::vector<double> sq;
  {
    const Knn knn = ivf ? knn_ivf_gpu(ctx, X, k + 1, metric, IvfOptions{}) : knn_exact_gpu(ctx, X, k + 1, metric);
    res.knn_seconds = Layout::seconds_since(t0);
    tsne_detail::neighbours_without_self(knn, k, metric, threads, nbr, sq);
  }
  DeviceP P = affinities(r, nbr, sq, n, k, opt.perplexity);
  nbr = {};
  sq = {};
  res.affinity_seconds = Layout::seconds_since(t0);
  t0 = clock::now();

  // The start on the host (the covariance on the device), then the iterations on the device.
  std::vector<double> y0;
  if (opt.init == "pca") {
    const std::vector<double> mean = tsne_detail::column_means(X, threads);
    y0 = tsne_detail::pca_layout(X, mean, covariance(r, X, mean), threads);
  } else {
    y0 = tsne_detail::random_layout(n, opt.random_state);
  }
  Layout L(r, n, opt);
  upload(r, L.y.data(), y0);
  DeviceArray<double> upd(r, static_cast<size_t>(2 * n), "tsne update"), gains(r, static_cast<size_t>(2 * n), "tsne gains"),
      att(r, static_cast<size_t>(2 * n), "tsne attraction");
  zero(r, upd.data(), 2 * n);
  upload(r, gains.data(), std::vector<double>(static_cast<size_t>(2 * n), 1.0));
  for (int64_t it = 0; it < opt.n_iter; ++it) {
    const bool explore = it < opt.exaggeration_iter;
    const double momentum = explore ? 0.5 : 0.8;
    const double ex = explore ? opt.early_exaggeration : 1.0;
    L.repulsion(true);
    attraction_kernel<<<blocks_for(n * kWarp), kThreads, 0, r.stream>>>(P.indptr.data(), P.indices.data(),
                                                                        P.values.data(), L.y.data(), n, ex, att.data());
    SCURRY_CUDA_LAUNCH();
    L.record(kAttract);
    update_kernel<<<blocks_for(2 * n), kThreads, 0, r.stream>>>(att.data(), L.rep.data(), L.z.data(), 2 * n, momentum,
                                                               opt.learning_rate, gains.data(), upd.data(), L.y.data());
    SCURRY_CUDA_LAUNCH();
    L.end_iteration();
  }
  L.repulsion(false);
  DeviceArray<double> klrow(r, static_cast<size_t>(n), "tsne KL terms"), kl(r, 1, "tsne KL");
  kl_kernel<<<blocks_for(n * kWarp), kThreads, 0, r.stream>>>(P.indptr.data(), P.indices.data(), P.values.data(),
                                                              L.y.data(), n, L.z.data(), klrow.data());
  SCURRY_CUDA_LAUNCH();
  sum_fixed(r, klrow.data(), n, kl.data(), L.scratch());
  std::vector<double> y(static_cast<size_t>(2 * n));
  SCURRY_CUDA(cudaMemcpyAsync(y.data(), L.y.data(), y.size() * sizeof(double), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaMemcpyAsync(&res.kl_divergence, kl.data(), sizeof(double), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  L.finish();
  res.embedding = DenseF(n, 2);
  for (int64_t i = 0; i < 2 * n; ++i) res.embedding.data[static_cast<size_t>(i)] = static_cast<float>(y[i]);
  res.optimize_seconds = Layout::seconds_since(t0);
  res.grid_seconds = L.phase[kGrid];
  res.fft_seconds = L.phase[kFft];
  res.interpolation_seconds = L.phase[kInterp];
  res.attraction_seconds = L.phase[kAttract];
  res.update_seconds = L.phase[kUpdate];
  res.host_seconds = L.host_seconds;
  res.grid_size = L.grid_size();
  res.p_nnz = P.nnz;
  return res;
}

}  // namespace scurry
