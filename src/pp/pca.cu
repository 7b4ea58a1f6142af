// PCA on the GPU (see kernels.cuh). FLOPs: n g^2 for the Gram matrix (SYRK), 2 n g k for the
// projection; the eigen-solve is O(g^3) on a g x g matrix, independent of n. Sharded (PcaRanks): each
// rank's Gram over its n_r rows, then one sum of g^2 + g doubles over the ranks (32 MB at g = 2000).
//
// Value types: pca_dense works on float32 data through cuBLAS's S routines and fp16/TF32 splits, so the
// Gram-side kernels (splits, chunk additions into the float64 Gram, centring) are written for the float32
// cuBLAS outputs they read. The X_pca post-processing (shift, sign flip, per-column max |value|) is
// templated on the value type V and explicitly instantiated for float and double (kernels.cuh). Dense
// matrices have no column-index type: element offsets are int64_t (n x k passes 2^31 at 43M cells x 50).
#include <cuda_fp16.h>
#include <cusolverDn.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "pp/kernels.cuh"

namespace scurry::gpu {

namespace {

constexpr int64_t kGramChunkRows = 1 << 16;  // fp32 SYRK over 65,536 rows, then added in float64
constexpr int kFlipChunks = 128;
constexpr int kThreads = 256;  // threads per block of the element-wise kernels and of column_max_abs

#define SCURRY_CUSOLVER(call)                                                                          \
  do {                                                                                                 \
    cusolverStatus_t st_ = (call);                                                                     \
    if (st_ != CUSOLVER_STATUS_SUCCESS) fail("cuSOLVER error ", static_cast<int>(st_), " in ", #call); \
  } while (0)

__global__ void add_upper(const float* src, double* dst, int64_t g) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= g * g) return;
  const int64_t row = i % g, col = i / g;  // column-major
  if (row <= col) dst[i] += src[i];
}

// Splits a into a TF32-representable high part and the float32 remainder (3xTF32: a.b ~ ah.bh + ah.bl + al.bh).
__global__ void split_tf32(const float* a, int64_t n, float* hi, float* lo) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float x = a[i];
  const float h = __uint_as_float(__float_as_uint(x) & 0xffffe000u);  // keep the 10 mantissa bits TF32 has
  hi[i] = h;
  lo[i] = x - h;
}

// Splits a into an fp16 high part and the fp16 remainder scaled by 2^11 (so that it stays a normal
// fp16 number): a.b ~ ah.bh + 2^-11 (ah.bl' + al'.bh).
__global__ void split_fp16(const float* a, int64_t n, __half* hi, __half* lo) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float x = a[i];
  const __half h = __float2half_rn(x);
  hi[i] = h;
  lo[i] = __float2half_rn((x - __half2float(h)) * 2048.f);
}

// G += hh + hl + hl^T (column-major g x g).
__global__ void add_gram3(const float* hh, const float* hl, double* G, int64_t g) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= g * g) return;
  const int64_t row = i % g, col = i / g;
  G[i] += static_cast<double>(hh[i]) + static_cast<double>(hl[i]) + static_cast<double>(hl[row * g + col]);
}

__global__ void add_vec(const float* src, double* dst, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] += src[i];
}

__global__ void fill_f(float* p, int64_t n, float v) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = v;
}

// Symmetrise from the upper triangle and fold the centring in: G - n mu mu^T.
__global__ void center_gram(double* G, const double* sum, int64_t g, double n, bool center) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= g * g) return;
  const int64_t row = i % g, col = i / g;
  if (row > col) return;
  double v = G[i];
  if (center) v -= sum[row] * sum[col] / n;
  G[i] = v;
  G[row * g + col] = v;
}

template <class V>
__global__ void subtract_cols(V* out, int64_t n, int k, const V* shift) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n * k) out[i] -= shift[i % k];
}

// Per (component, chunk of rows): the entry of largest |value| (first index among ties). kThreads threads.
template <class V>
__global__ void __launch_bounds__(kThreads) argmax_abs(const V* out, int64_t n, int k, V* best_abs, int64_t* best_idx,
                                                       V* best_val) {
  const int j = blockIdx.x, chunk = blockIdx.y;
  const int64_t r0 = n * chunk / kFlipChunks, r1 = n * (chunk + 1) / kFlipChunks;
  V ba = V(-1), bv = V(0);
  int64_t bi = INT64_MAX;
  for (int64_t i = r0 + threadIdx.x; i < r1; i += kThreads) {
    const V v = out[i * k + j], a = v < V(0) ? -v : v;
    if (a > ba || (a == ba && i < bi)) ba = a, bi = i, bv = v;
  }
  __shared__ V sa[kThreads], sv[kThreads];
  __shared__ int64_t si[kThreads];
  sa[threadIdx.x] = ba, si[threadIdx.x] = bi, sv[threadIdx.x] = bv;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const int o = threadIdx.x + s;
      if (sa[o] > sa[threadIdx.x] || (sa[o] == sa[threadIdx.x] && si[o] < si[threadIdx.x]))
        sa[threadIdx.x] = sa[o], si[threadIdx.x] = si[o], sv[threadIdx.x] = sv[o];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    best_abs[j * kFlipChunks + chunk] = sa[0];
    best_idx[j * kFlipChunks + chunk] = si[0];
    best_val[j * kFlipChunks + chunk] = sv[0];
  }
}

template <class V>
__global__ void flip_cols(V* out, int64_t n, int k, const V* sign) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n * k) out[i] *= sign[i % k];
}

unsigned blocks(int64_t n, int t = kThreads) { return static_cast<unsigned>((n + t - 1) / t); }

// SCURRY_PROFILE=1: phase times of the PCA (CUDA events) on stderr.
struct PhaseTimer {
  cudaStream_t s;
  bool on = std::getenv("SCURRY_PROFILE") != nullptr;
  cudaEvent_t last{};
  explicit PhaseTimer(cudaStream_t st, bool silent = false) : s(st) {
    on = on && !silent;  // (several ranks: only rank 0 reports)
    if (on) cudaEventCreate(&last), cudaEventRecord(last, s);
  }
  void mark(const char* what) {
    if (!on) return;
    cudaEvent_t e;
    cudaEventCreate(&e);
    cudaEventRecord(e, s);
    cudaEventSynchronize(e);
    float ms = 0;
    cudaEventElapsedTime(&ms, last, e);
    std::fprintf(stderr, "  pca_dense %-12s %8.3f ms\n", what, ms);
    cudaEventDestroy(last);
    last = e;
  }
  ~PhaseTimer() {
    if (on) cudaEventDestroy(last);
  }
};

}  // namespace

template <class V>
void subtract_columns(CudaResources& r, V* x, int64_t n, int k, const V* d_shift) {
  if (n <= 0 || k <= 0) return;
  subtract_cols<V><<<blocks(n * k), kThreads, 0, r.stream>>>(x, n, k, d_shift);
  SCURRY_CUDA_LAUNCH();
}

template <class V>
void scale_columns(CudaResources& r, V* x, int64_t n, int k, const V* d_factor) {
  if (n <= 0 || k <= 0) return;
  flip_cols<V><<<blocks(n * k), kThreads, 0, r.stream>>>(x, n, k, d_factor);
  SCURRY_CUDA_LAUNCH();
}

template <class V>
std::vector<ColumnMaxAbs> column_max_abs(CudaResources& r, const V* x, int64_t n, int k) {
  std::vector<ColumnMaxAbs> best(static_cast<size_t>(std::max(k, 0)), ColumnMaxAbs{-1.0, 0.0, INT64_MAX});
  if (k <= 0) return best;
  const size_t m = static_cast<size_t>(k) * kFlipChunks;
  DeviceArray<V> babs(r, m, "column max |value|"), bval(r, m, "column max |value|");
  DeviceArray<int64_t> bidx(r, m, "column max |value| rows");
  // (n = 0 too: every chunk then reports no row)
  argmax_abs<V><<<dim3(k, kFlipChunks), kThreads, 0, r.stream>>>(x, n, k, babs.data(), bidx.data(), bval.data());
  SCURRY_CUDA_LAUNCH();
  std::vector<V> ha(m), hv(m);
  std::vector<int64_t> hi(m);
  SCURRY_CUDA(cudaMemcpyAsync(ha.data(), babs.data(), m * sizeof(V), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaMemcpyAsync(hv.data(), bval.data(), m * sizeof(V), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaMemcpyAsync(hi.data(), bidx.data(), m * sizeof(int64_t), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  for (int j = 0; j < k; ++j) {
    size_t b = static_cast<size_t>(j) * kFlipChunks;
    for (int c = 1; c < kFlipChunks; ++c) {
      const size_t o = static_cast<size_t>(j) * kFlipChunks + c;
      if (ha[o] > ha[b] || (ha[o] == ha[b] && hi[o] < hi[b])) b = o;
    }
    if (ha[b] >= V(0) && hi[b] != INT64_MAX) best[j] = {static_cast<double>(ha[b]), static_cast<double>(hv[b]), hi[b]};
  }
  return best;
}

#define SCURRY_PCA_POST(V)                                                             \
  template void subtract_columns<V>(CudaResources&, V*, int64_t, int, const V*);       \
  template void scale_columns<V>(CudaResources&, V*, int64_t, int, const V*);          \
  template std::vector<ColumnMaxAbs> column_max_abs<V>(CudaResources&, const V*, int64_t, int);
SCURRY_PCA_POST(float)
SCURRY_PCA_POST(double)
#undef SCURRY_PCA_POST

// ---- the block-wise Gram accumulator -------------------------------------------------------------

struct GramAccumulator::Impl {
  CudaResources& r;
  int64_t g, chunk;
  bool fp32_gram, fp16_gram;
  DeviceArray<double> G, sum;
  DeviceArray<float> Gf, sumf, ones, Gf2, thi, tlo;
  DeviceArray<__half> hhi, hlo;
  Impl(CudaResources& res, int64_t genes, int64_t max_rows) : r(res), g(genes), chunk(std::max<int64_t>(1, std::min(max_rows, kGramChunkRows))) {
    // The Gram matrix, by SCURRY_PCA_GRAM: fp32 (cuBLAS SSYRK, 51 TFLOP/s peak); tf32x3 (two TF32
    // tensor-core GEMMs on the high/low split of each chunk, float32-level accuracy); fp16x2 (default:
    // the same two GEMMs on an fp16 high/low split, 11 + 11 bits, the low part scaled by 2^11 so that it
    // stays normal; the values are scaled and clipped, far inside fp16's range). At 1.3M x 2000 on the
    // H200: fp16x2 38 ms, tf32x3 97 ms; both pass the GPU-vs-CPU PCA tests.
    // (cuBLAS SSYRK + SSYR2K in TF32 math mode, one triangle only, measured 4.4x slower on the H200 at
    // 1.3M x 2000: 431 ms against 97 ms for the two GEMMs.)
    const char* gram_env = std::getenv("SCURRY_PCA_GRAM");
    const std::string gram_mode = gram_env ? gram_env : "fp16x2";
    if (gram_mode != "fp32" && gram_mode != "tf32x3" && gram_mode != "fp16x2")
      throw InputError("SCURRY_PCA_GRAM must be fp16x2, tf32x3 or fp32, not '" + gram_mode + "'");
    fp32_gram = gram_mode == "fp32";
    fp16_gram = gram_mode == "fp16x2";
    G = DeviceArray<double>(r, g * g, "Gram matrix");
    sum = DeviceArray<double>(r, g, "column sums");
    Gf = DeviceArray<float>(r, g * g, "Gram chunk");
    sumf = DeviceArray<float>(r, g, "column sums chunk");
    ones = DeviceArray<float>(r, chunk, "ones");
    if (fp16_gram) {
      Gf2 = DeviceArray<float>(r, g * g, "Gram chunk (cross terms)");
      hhi = DeviceArray<__half>(r, chunk * g, "fp16 split (high)");
      hlo = DeviceArray<__half>(r, chunk * g, "fp16 split (low)");
    } else if (!fp32_gram) {
      Gf2 = DeviceArray<float>(r, g * g, "Gram chunk (cross terms)");
      thi = DeviceArray<float>(r, chunk * g, "TF32 split (high)");
      tlo = DeviceArray<float>(r, chunk * g, "TF32 split (low)");
    }
    SCURRY_CUDA(cudaMemsetAsync(G.data(), 0, g * g * 8, r.stream));
    SCURRY_CUDA(cudaMemsetAsync(sum.data(), 0, g * 8, r.stream));
    fill_f<<<blocks(chunk), kThreads, 0, r.stream>>>(ones.data(), chunk, 1.f);
    SCURRY_CUDA_LAUNCH();
  }
  void release_scratch() {
    Gf.release(), sumf.release(), ones.release();
    Gf2.release(), thi.release(), tlo.release(), hhi.release(), hlo.release();
  }
  // G += A^T A, sum += A^T 1 for the row-major rows x g block A, in chunks of at most `chunk` rows
  // (each chunk's fp32 products added into the float64 accumulators).
  void add(const float* X, int64_t n) {
    if (!Gf.data()) fail("internal: GramAccumulator::add after finish");
    cublasHandle_t h = r.cublas;
    const float one = 1.f, zero = 0.f;
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
      const int rows = static_cast<int>(std::min(chunk, n - r0));
      const float* A = X + r0 * g;  // column-major g x rows, lda g
      if (fp32_gram) {
        SCURRY_CUBLAS(cublasSsyrk(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, static_cast<int>(g), rows, &one, A,
                                  static_cast<int>(g), &zero, Gf.data(), static_cast<int>(g)));
      } else if (fp16_gram) {
        split_fp16<<<blocks(rows * g), kThreads, 0, r.stream>>>(A, rows * g, hhi.data(), hlo.data());
        SCURRY_CUDA_LAUNCH();
        const int gi = static_cast<int>(g);
        const float lo_scale = 1.f / 2048.f;
        SCURRY_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, gi, gi, rows, &one, hhi.data(), CUDA_R_16F, gi, hhi.data(),
                                   CUDA_R_16F, gi, &zero, Gf.data(), CUDA_R_32F, gi, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        SCURRY_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, gi, gi, rows, &lo_scale, hhi.data(), CUDA_R_16F, gi,
                                   hlo.data(), CUDA_R_16F, gi, &zero, Gf2.data(), CUDA_R_32F, gi, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
      } else {
        split_tf32<<<blocks(rows * g), kThreads, 0, r.stream>>>(A, rows * g, thi.data(), tlo.data());
        SCURRY_CUDA_LAUNCH();
        const int gi = static_cast<int>(g);
        SCURRY_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, gi, gi, rows, &one, thi.data(), CUDA_R_32F, gi, thi.data(),
                                   CUDA_R_32F, gi, &zero, Gf.data(), CUDA_R_32F, gi, CUBLAS_COMPUTE_32F_FAST_TF32,
                                   CUBLAS_GEMM_DEFAULT));
        SCURRY_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, gi, gi, rows, &one, thi.data(), CUDA_R_32F, gi, tlo.data(),
                                   CUDA_R_32F, gi, &zero, Gf2.data(), CUDA_R_32F, gi, CUBLAS_COMPUTE_32F_FAST_TF32,
                                   CUBLAS_GEMM_DEFAULT));
      }
      SCURRY_CUBLAS(cublasSgemv(h, CUBLAS_OP_N, static_cast<int>(g), rows, &one, A, static_cast<int>(g), ones.data(), 1,
                                &zero, sumf.data(), 1));
      if (fp32_gram) {
        add_upper<<<blocks(g * g), kThreads, 0, r.stream>>>(Gf.data(), G.data(), g);
        SCURRY_CUDA_LAUNCH();
      } else {
        add_gram3<<<blocks(g * g), kThreads, 0, r.stream>>>(Gf.data(), Gf2.data(), G.data(), g);
        SCURRY_CUDA_LAUNCH();
      }
      add_vec<<<blocks(g), kThreads, 0, r.stream>>>(sumf.data(), sum.data(), g);
      SCURRY_CUDA_LAUNCH();
    }
  }
};

GramAccumulator::GramAccumulator(CudaResources& r, int64_t g, int64_t max_rows) : impl_(std::make_unique<Impl>(r, g, max_rows)) {}
GramAccumulator::~GramAccumulator() = default;
void GramAccumulator::add(const float* X, int64_t rows) { impl_->add(X, rows); }
int64_t GramAccumulator::n_genes() const { return impl_->g; }

GramEigen GramAccumulator::finish(int64_t n_all, int k, bool zero_center, const PcaRanks* ranks) {
  Impl& a = *impl_;
  CudaResources& r = a.r;
  const int64_t g = a.g;
  a.release_scratch();
  Comm* comm = ranks && ranks->comm && ranks->comm->size() > 1 ? ranks->comm : nullptr;
  if (k <= 0 || k > g || k >= n_all) fail("pca: n_comps must be in [1, min(n_cells, n_genes)), got ", k);
  PhaseTimer timer(r.stream, comm && comm->rank() != 0);
  DeviceArray<double>& G = a.G;
  DeviceArray<double>& sum = a.sum;
  if (comm) {  // the ranks' Gram matrices and column sums summed
    if (ranks->device_sum) {
      ranks->device_sum(G.data(), static_cast<size_t>(g * g), r.stream);
      ranks->device_sum(sum.data(), static_cast<size_t>(g), r.stream);
    } else {
      std::vector<double> h(static_cast<size_t>(g * g + g));
      SCURRY_CUDA(cudaMemcpyAsync(h.data(), G.data(), g * g * 8, cudaMemcpyDeviceToHost, r.stream));
      SCURRY_CUDA(cudaMemcpyAsync(h.data() + g * g, sum.data(), g * 8, cudaMemcpyDeviceToHost, r.stream));
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));
      comm->allreduce_sum(h.data(), h.size());
      SCURRY_CUDA(cudaMemcpyAsync(G.data(), h.data(), g * g * 8, cudaMemcpyHostToDevice, r.stream));
      SCURRY_CUDA(cudaMemcpyAsync(sum.data(), h.data() + g * g, g * 8, cudaMemcpyHostToDevice, r.stream));
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // h dies here
    }
    timer.mark("gram sum over ranks");
  }
  const bool solver = !comm || comm->rank() == 0;  // the rank that solves the eigenproblem
  center_gram<<<blocks(g * g), kThreads, 0, r.stream>>>(G.data(), sum.data(), g, static_cast<double>(n_all), zero_center);
  SCURRY_CUDA_LAUNCH();

  std::vector<double> h_sum(g), diag(g);
  SCURRY_CUDA(cudaMemcpyAsync(h_sum.data(), sum.data(), g * 8, cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaMemcpy2DAsync(diag.data(), 8, G.data(), (g + 1) * 8, 8, g, cudaMemcpyDeviceToHost, r.stream));

  // Eigenpairs of the (centred) Gram matrix, ascending (on the solving rank only).
  const int gi = static_cast<int>(g);
  int n_found = gi;
  int col0 = 0;  // column of the largest eigenpair's vector, counting down
  std::vector<double> h_w(g);
  int h_info = 0;
  std::vector<double> V(static_cast<size_t>(g) * k);
  if (solver) {
    cusolverDnHandle_t sh;
    SCURRY_CUSOLVER(cusolverDnCreate(&sh));
    struct Guard { cusolverDnHandle_t h; ~Guard() { cusolverDnDestroy(h); } } guard{sh};
    SCURRY_CUSOLVER(cusolverDnSetStream(sh, r.stream));
    DeviceArray<double> W(r, g, "eigenvalues");
    DeviceArray<int> info(r, 1, "cusolver info");
    // SCURRY_PCA_EIGEN=syevd: every eigenpair (divide and conquer); default syevdx: only the top k
    // (tridiagonal reduction, then bisection and inverse iteration for the k wanted).
    const char* eig_env = std::getenv("SCURRY_PCA_EIGEN");
    const bool all_pairs = eig_env && std::string(eig_env) == "syevd";
    int lwork = 0;
    if (all_pairs) {
      SCURRY_CUSOLVER(cusolverDnDsyevd_bufferSize(sh, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, gi, G.data(), gi,
                                                  W.data(), &lwork));
      DeviceArray<double> work(r, static_cast<size_t>(lwork), "cusolver workspace");
      SCURRY_CUSOLVER(cusolverDnDsyevd(sh, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, gi, G.data(), gi, W.data(),
                                       work.data(), lwork, info.data()));
      col0 = gi - 1;
    } else {
      const int il = gi - k + 1, iu = gi;  // 1-based, ascending
      SCURRY_CUSOLVER(cusolverDnDsyevdx_bufferSize(sh, CUSOLVER_EIG_MODE_VECTOR, CUSOLVER_EIG_RANGE_I, CUBLAS_FILL_MODE_UPPER,
                                                   gi, G.data(), gi, 0.0, 0.0, il, iu, &n_found, W.data(), &lwork));
      DeviceArray<double> work(r, static_cast<size_t>(lwork), "cusolver workspace");
      SCURRY_CUSOLVER(cusolverDnDsyevdx(sh, CUSOLVER_EIG_MODE_VECTOR, CUSOLVER_EIG_RANGE_I, CUBLAS_FILL_MODE_UPPER, gi,
                                        G.data(), gi, 0.0, 0.0, il, iu, &n_found, W.data(), work.data(), lwork,
                                        info.data()));
      if (n_found != k) fail("pca: cuSOLVER syevdx found ", n_found, " eigenpairs, expected ", k);
      col0 = k - 1;
    }
    SCURRY_CUDA(cudaMemcpyAsync(h_w.data(), W.data(), static_cast<size_t>(n_found) * 8, cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaMemcpyAsync(&h_info, info.data(), sizeof(int), cudaMemcpyDeviceToHost, r.stream));
    // Top-k eigenvectors: columns col0, col0 - 1, ... of G (column-major), largest first.
    SCURRY_CUDA(cudaMemcpyAsync(V.data(), G.data() + static_cast<int64_t>(col0 - k + 1) * g,
                                static_cast<size_t>(g) * k * 8, cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  }  // solver
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // h_sum, diag
  if (comm) {
    // The solver's eigenpairs, info, column sums and diagonal to every rank: all project with the same
    // components (and all fail together when the solve failed).
    std::vector<double> top(static_cast<size_t>(k));
    if (solver)
      for (int j = 0; j < k; ++j) top[j] = h_w[col0 - j];
    std::vector<double> buf;
    buf.reserve(1 + k + 2 * g + V.size());
    buf.push_back(static_cast<double>(h_info));
    buf.insert(buf.end(), top.begin(), top.end());
    buf.insert(buf.end(), h_sum.begin(), h_sum.end());
    buf.insert(buf.end(), diag.begin(), diag.end());
    buf.insert(buf.end(), V.begin(), V.end());
    comm->broadcast(buf.data(), buf.size() * sizeof(double), 0);
    size_t p = 0;
    h_info = static_cast<int>(buf[p++]);
    col0 = k - 1;  // h_w[col0 - j] = j-th largest
    for (int j = 0; j < k; ++j) h_w[col0 - j] = buf[p++];
    std::copy_n(buf.begin() + p, g, h_sum.begin()), p += g;
    std::copy_n(buf.begin() + p, g, diag.begin()), p += g;
    std::copy_n(buf.begin() + p, V.size(), V.begin());
  }
  if (h_info != 0) fail("pca: cuSOLVER eigen-solve failed (info ", h_info, ")");
  for (int j = 0; j < k / 2; ++j)  // ascending -> descending
    std::swap_ranges(V.begin() + static_cast<size_t>(j) * g, V.begin() + static_cast<size_t>(j + 1) * g,
                     V.begin() + static_cast<size_t>(k - 1 - j) * g);
  timer.mark("eigen");
  GramEigen e;
  e.eig.resize(k);
  for (int j = 0; j < k; ++j) e.eig[j] = h_w[col0 - j];
  e.V = std::move(V);
  e.sum = std::move(h_sum);
  e.diag = std::move(diag);
  a.G.release(), a.sum.release();
  return e;
}

void pca_project(CudaResources& r, const float* X, int64_t n, int64_t g, int k, const float* dV, const float* dshift,
                 float* d_xpca) {
  const float one = 1.f, zero = 0.f;
  // X_pca^T (k x n, column-major) = V^T (k x g) * X^T (g x n); then - shift.
  for (int64_t r0 = 0; r0 < n; r0 += kGramChunkRows * 16) {
    const int rows = static_cast<int>(std::min(kGramChunkRows * 16, n - r0));
    SCURRY_CUBLAS(cublasSgemm(r.cublas, CUBLAS_OP_T, CUBLAS_OP_N, k, rows, static_cast<int>(g), &one, dV,
                              static_cast<int>(g), X + r0 * g, static_cast<int>(g), &zero, d_xpca + r0 * k, k));
  }
  if (dshift) subtract_columns(r, d_xpca, n, k, dshift);
}

PcaSolution pca_solution(const GramEigen& e, int64_t g, int k, int64_t n_all, bool zero_center) {
  PcaSolution s;
  const double nn = static_cast<double>(n_all);
  s.mean.resize(static_cast<size_t>(g));
  for (int64_t i = 0; i < g; ++i) s.mean[i] = zero_center ? e.sum[i] / nn : 0.0;
  s.total_variance = 0;
  if (zero_center) {  // eigenvalue / (n - 1) over the total variance (ddof 1)
    for (int64_t i = 0; i < g; ++i) s.total_variance += e.diag[i];
    s.total_variance /= (nn - 1);
    s.variance.resize(static_cast<size_t>(k));
    for (int j = 0; j < k; ++j) s.variance[j] = e.eig[j] / (nn - 1);
  } else {
    // pca.cpp's semantics without centring (scikit-learn's TruncatedSVD): the ddof-0 variance of each
    // X_pca column (xpca_column_variance, after the projection) over the total ddof-0 per-gene variance.
    for (int64_t i = 0; i < g; ++i) s.total_variance += std::max(0.0, e.diag[i] - e.sum[i] * e.sum[i] / nn);
    s.total_variance /= nn;
  }
  if (!(s.total_variance > 0))
    throw InputError("pca: every gene is constant across cells (total variance 0); PCA has nothing to explain");
  // Projection: X_pca = X V - mu^T V.
  s.Vf.assign(e.V.begin(), e.V.end());  // column-major g x k
  s.shift.assign(static_cast<size_t>(k), 0.f);
  for (int j = 0; j < k; ++j) {
    double acc = 0;
    for (int64_t i = 0; i < g; ++i) acc += s.mean[i] * e.V[static_cast<size_t>(j) * g + i];
    s.shift[j] = static_cast<float>(acc);
  }
  return s;
}

std::vector<double> xpca_column_variance(const float* hx, int64_t n, int k, int64_t n_all, Comm* comm) {
  const double nn = static_cast<double>(n_all);
  std::vector<double> m(static_cast<size_t>(k), 0.0), ss(static_cast<size_t>(k), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int j = 0; j < k; ++j) m[j] += hx[static_cast<size_t>(i) * k + j];
  if (comm) comm->allreduce_sum(m.data(), m.size());
  for (double& x : m) x /= nn;
  for (int64_t i = 0; i < n; ++i)
    for (int j = 0; j < k; ++j) {
      const double dl = hx[static_cast<size_t>(i) * k + j] - m[j];
      ss[j] += dl * dl;
    }
  if (comm) comm->allreduce_sum(ss.data(), ss.size());
  for (int j = 0; j < k; ++j) ss[j] /= nn;
  return ss;
}

std::vector<ColumnMaxAbs> host_column_max_abs(const float* x, int64_t n, int k) {
  std::vector<ColumnMaxAbs> best(static_cast<size_t>(std::max(k, 0)), ColumnMaxAbs{-1.0, 0.0, INT64_MAX});
  for (int64_t i = 0; i < n; ++i)
    for (int j = 0; j < k; ++j) {
      const double v = x[static_cast<size_t>(i) * k + j], a = std::fabs(v);
      if (a > best[j].abs) best[j] = {a, v, i};
    }
  return best;
}

std::vector<float> pca_signs(std::vector<ColumnMaxAbs> best, int64_t n, Comm* comm) {
  const int k = static_cast<int>(best.size());
  int64_t row0 = 0;  // this rank's first global row
  if (comm) {
    const std::vector<int64_t> rows = allgather_count(*comm, n);
    for (int q = 0; q < comm->rank(); ++q) row0 += rows[q];
  }
  for (auto& b : best)
    if (b.row != INT64_MAX) b.row += row0;  // global row (INT64_MAX: none)
  if (comm) {
    std::vector<ColumnMaxAbs> all(static_cast<size_t>(k) * comm->size());
    comm->allgather(best.data(), best.size() * sizeof(ColumnMaxAbs), all.data());
    for (int q = 0; q < comm->size(); ++q)  // rank order: a tie keeps the lower row
      for (int j = 0; j < k; ++j) {
        const ColumnMaxAbs& o = all[static_cast<size_t>(q) * k + j];
        if (o.abs > best[j].abs || (o.abs == best[j].abs && o.row < best[j].row)) best[j] = o;
      }
  }
  std::vector<float> sign(static_cast<size_t>(k), 1.f);
  for (int j = 0; j < k; ++j)
    if (best[j].val < 0) sign[j] = -1.f;
  return sign;
}

std::vector<double> signed_components(const std::vector<double>& V, const std::vector<float>& sign, int64_t g, int k) {
  std::vector<double> c(static_cast<size_t>(g) * k);
  for (int64_t i = 0; i < g; ++i)
    for (int j = 0; j < k; ++j) c[i * k + j] = sign[j] * V[static_cast<size_t>(j) * g + i];
  return c;
}

PcaGpuResult pca_dense(CudaResources& r, const float* X, int64_t n, int64_t g, int k, bool zero_center, float* d_xpca,
                       const PcaRanks* ranks) {
  return pca_rows(r, [X, g](int64_t a, int64_t) { return X + a * g; }, n, g, std::max<int64_t>(n, 1), k, zero_center,
                  d_xpca, ranks);
}

PcaGpuResult pca_rows(CudaResources& r, const DenseRows& rows, int64_t n, int64_t g, int64_t chunk_rows, int k,
                      bool zero_center, float* d_xpca, const PcaRanks* ranks) {
  if (chunk_rows < 1) fail("internal: pca_rows: chunk_rows ", chunk_rows);
  auto each_chunk = [&](const std::function<void(const float*, int64_t, int64_t)>& fn) {
    for (int64_t a = 0; a < n; a += chunk_rows) {
      const int64_t m = std::min(chunk_rows, n - a);
      fn(rows(a, m), a, m);
    }
  };
  Comm* comm = ranks && ranks->comm && ranks->comm->size() > 1 ? ranks->comm : nullptr;
  int64_t n_all = n;  // cells over all ranks
  if (comm) comm->allreduce_sum(&n_all, 1);
  if (k <= 0 || k > g || k >= n_all) fail("pca: n_comps must be in [1, min(n_cells, n_genes)), got ", k);
  PhaseTimer timer(r.stream, comm && comm->rank() != 0);
  GramEigen e;
  {
    GramAccumulator acc(r, g, std::min(n, chunk_rows));
    each_chunk([&](const float* X, int64_t, int64_t m) { acc.add(X, m); });
    timer.mark("gram");
    e = acc.finish(n_all, k, zero_center, ranks);
  }
  PcaSolution sol = pca_solution(e, g, k, n_all, zero_center);
  PcaGpuResult res;
  res.mean = sol.mean;
  res.total_variance = sol.total_variance;
  res.variance = sol.variance;
  DeviceArray<float> dV(r, sol.Vf.size(), "PCA components"), dshift(r, k, "PCA shift");
  SCURRY_CUDA(cudaMemcpyAsync(dV.data(), sol.Vf.data(), sol.Vf.size() * 4, cudaMemcpyHostToDevice, r.stream));
  SCURRY_CUDA(cudaMemcpyAsync(dshift.data(), sol.shift.data(), k * 4, cudaMemcpyHostToDevice, r.stream));
  each_chunk([&](const float* X, int64_t a, int64_t m) {
    pca_project(r, X, m, g, k, dV.data(), dshift.data(), d_xpca + a * k);
  });
  timer.mark("projection");
  if (!zero_center) {  // the column variances of X_pca, on the host, over the ranks
    std::vector<float> hx(static_cast<size_t>(n) * k);
    if (!hx.empty()) SCURRY_CUDA(cudaMemcpyAsync(hx.data(), d_xpca, hx.size() * 4, cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    res.variance = xpca_column_variance(hx.data(), n, k, n_all, comm);
  }
  const std::vector<float> sign = pca_signs(column_max_abs(r, static_cast<const float*>(d_xpca), n, k), n, comm);
  SCURRY_CUDA(cudaMemcpyAsync(dshift.data(), sign.data(), k * 4, cudaMemcpyHostToDevice, r.stream));
  scale_columns(r, d_xpca, n, k, static_cast<const float*>(dshift.data()));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  timer.mark("sign flip");
  res.components = signed_components(e.V, sign, g, k);
  return res;
}

}  // namespace scurry::gpu
