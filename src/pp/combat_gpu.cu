// scurry: ComBat on the GPU (combat.hpp; issue 21 point 2). The matrix goes to the device once and
// is read in three passes, as on the CPU path: (1) D^T Y per batch and covariate
// (gpu::design_sums), (2) per batch and gene the sum and the sum of squares of the residuals
// Y - D B_hat, (3) the adjustment, element-wise. Between the passes, the small p x g and batch x gene
// math (the fit B_hat, the pooled variance, the priors and the empirical-Bayes iteration) runs on the
// host with the CPU path's code (combat.cpp's detail::). Sums are float64 over fixed chunks of rows,
// added in a fixed order: two runs give the same bits.
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "exec/cuda_resources.cuh"
#include "pp/combat.hpp"
#include "pp/fixed_order_sums.cuh"

namespace scurry {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMinChunkRows = 512;
constexpr size_t kSharedBytes = 48 * 1024;

// Residual r_ij = y_ij - B[b_i, j] - sum_c cov_ic B[nb + c, j]. One thread per gene, one block row
// per chunk of rows; per batch b: part[(2 b g + j) * nch + ch] = sum of r, part[((2 b + 1) g + j) *
// nch + ch] = sum of r^2 (shared-memory accumulators, acc[a * blockDim + t]).
__global__ void residual_sums(const float* Y, int64_t n, int64_t g, const int32_t* codes, int64_t nb, const double* cov,
                              int64_t nc, const double* B, int64_t chunk, int64_t nch, double* part) {
  extern __shared__ double acc[];
  const int T = blockDim.x, t = threadIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * T + t, ch = blockIdx.y;
  for (int64_t a = 0; a < 2 * nb; ++a) acc[a * T + t] = 0;
  if (j >= g) return;
  const int64_t i0 = ch * chunk, i1 = min(n, i0 + chunk);
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t b = codes[i];
    double cf = 0;
    for (int64_t c = 0; c < nc; ++c) cf += cov[i * nc + c] * B[(nb + c) * g + j];
    const double r = static_cast<double>(Y[i * g + j]) - B[b * g + j] - cf;
    acc[2 * b * T + t] += r;
    acc[(2 * b + 1) * T + t] += r * r;
  }
  for (int64_t a = 0; a < 2 * nb; ++a) part[(a * g + j) * nch + ch] = acc[a * T + t];
}

// y = (s - gamma*[b, j]) mult[b, j] + stand, s = (y - stand) / sig_j (0 where var_pooled is 0),
// stand = grand_j + sum_c cov_ic B[nb + c, j]. One thread per value.
__global__ void adjust(float* Y, int64_t n, int64_t g, const int32_t* codes, int64_t nb, const double* cov, int64_t nc,
                       const double* B, const double* grand, const double* var_pooled, const double* sig,
                       const double* gamma, const double* mult) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * g) return;
  const int64_t i = e / g, j = e % g, b = codes[i];
  double cf = 0;
  for (int64_t c = 0; c < nc; ++c) cf += cov[i * nc + c] * B[(nb + c) * g + j];
  const double stand = grand[j] + cf;
  const double s = var_pooled[j] == 0 ? 0.0 : (static_cast<double>(Y[e]) - stand) / sig[j];
  Y[e] = static_cast<float>((s - gamma[b * g + j]) * mult[b * g + j] + stand);
}

template <class T>
DeviceArray<T> upload(CudaResources& r, const std::vector<T>& v, const char* what) {
  DeviceArray<T> d(r, v.size(), what);
  if (!v.empty()) SCURRY_CUDA(cudaMemcpyAsync(d.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, r.stream));
  return d;
}
std::vector<double> download(CudaResources& r, const double* p, size_t n) {
  std::vector<double> h(n);
  if (n) SCURRY_CUDA(cudaMemcpyAsync(h.data(), p, n * sizeof(double), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return h;
}

}  // namespace

CombatResult combat_dense_gpu(const Context& ctx, DenseF& Y, const std::vector<int32_t>& codes, int32_t nb,
                              const DenseD& cov) {
  const int64_t n = Y.n_rows, g = Y.n_cols, nc = cov.n_cols, p = nb + nc;
  if (static_cast<int64_t>(codes.size()) != n || (nc > 0 && cov.n_rows != n))
    fail("combat: codes/covariates do not match the matrix rows");
  std::vector<double> nbatch(static_cast<size_t>(nb), 0.0);
  for (int32_t c : codes) {
    if (c < 0 || c >= nb) fail("combat: a batch code is out of range");
    nbatch[c] += 1.0;
  }
  for (int32_t b = 0; b < nb; ++b)
    if (nbatch[b] < 2) fail_input("combat", "batch ", b, " has fewer than 2 cells; ComBat needs at least 2 cells per batch");
  if (ctx.backend() != Backend::cuda || !ctx.cuda()) fail("combat (gpu): the context has no CUDA device");
  CudaResources& r = *ctx.cuda();
  SCURRY_CUDA(cudaSetDevice(r.device));
  int T = 256;
  while (T > 32 && static_cast<size_t>(2 * nb) * T * sizeof(double) > kSharedBytes) T /= 2;
  if (static_cast<size_t>(2 * nb) * T * sizeof(double) > kSharedBytes)
    fail_input("combat (gpu)", nb, " batches exceed the GPU path's limit of ", kSharedBytes / (64 * sizeof(double)),
               "; use --device cpu");
  const size_t G = static_cast<size_t>(g);
  DeviceArray<float> dY = upload(r, Y.data, "combat matrix");
  DeviceArray<int32_t> dcodes = upload(r, codes, "combat batches");
  DeviceArray<double> dcov = upload(r, cov.data, "combat covariates");
  // Pass 1: D^T Y on the device; D^T D (p x p) on the host (batch counts, per-batch covariate sums,
  // the covariates' Gram matrix).
  std::vector<double> acc;
  {
    const int64_t chunk = gpu::chunk_for(n, p * g, kMinChunkRows), nch = gpu::n_chunks(n, chunk);
    DeviceArray<double> part(r, static_cast<size_t>(p * g * nch), "combat partial sums");
    gpu::design_sums(r, dY.data(), n, g, dcodes.data(), nb, dcov.data(), nc, false, chunk, nch, part.data());
    DeviceArray<double> out(r, static_cast<size_t>(p * g), "combat D^T Y");
    gpu::reduce_partials(r, part.data(), p * g, nch, out.data());
    acc = download(r, out.data(), static_cast<size_t>(p * g));
  }
  std::vector<double> DtD(static_cast<size_t>(p * p), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t b = codes[i];
    DtD[b * p + b] += 1.0;
    for (int64_t c = 0; c < nc; ++c) {
      const double x = cov(i, c);
      DtD[b * p + nb + c] += x;
      for (int64_t e = 0; e < nc; ++e) DtD[(nb + c) * p + nb + e] += x * cov(i, e);
    }
  }
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t c = 0; c < nc; ++c) DtD[(nb + c) * p + b] = DtD[b * p + nb + c];
  acc.insert(acc.end(), DtD.begin(), DtD.end());
  std::vector<double> B, grand, scale;
  detail::combat_fit(acc, nbatch, n, g, p, B, grand, scale);
  DeviceArray<double> dB = upload(r, B, "combat B_hat");
  // Pass 2: the residuals' per-batch sums and sums of squares.
  std::vector<double> rs;
  {
    const int64_t w = 2 * static_cast<int64_t>(nb) * g;
    const int64_t chunk = gpu::chunk_for(n, w, kMinChunkRows), nch = gpu::n_chunks(n, chunk);
    DeviceArray<double> part(r, static_cast<size_t>(w * nch), "combat residual partial sums");
    const dim3 grid(gpu::grid_for(g, T), gpu::as_grid(nch));
    residual_sums<<<grid, T, static_cast<size_t>(2 * nb) * T * sizeof(double), r.stream>>>(
        dY.data(), n, g, dcodes.data(), nb, dcov.data(), nc, dB.data(), chunk, nch, part.data());
    SCURRY_CUDA_LAUNCH();
    DeviceArray<double> out(r, static_cast<size_t>(w), "combat residual sums");
    gpu::reduce_partials(r, part.data(), w, nch, out.data());
    rs = download(r, out.data(), static_cast<size_t>(w));
  }
  CombatResult res = detail::combat_eb(rs, B, grand, scale, nbatch, n, g);
  // Pass 3: adjusted = (s - gamma*[b]) / sqrt(delta*[b]) * sqrt(var_pooled) + stand_mean.
  std::vector<double> sig(G), mult(static_cast<size_t>(nb) * G);
  for (size_t j = 0; j < G; ++j) sig[j] = std::sqrt(res.var_pooled[j]);
  for (int32_t b = 0; b < nb; ++b)
    for (size_t j = 0; j < G; ++j) mult[b * G + j] = sig[j] / std::sqrt(res.delta_star[b * G + j]);
  DeviceArray<double> dgrand = upload(r, grand, "combat grand mean");
  DeviceArray<double> dvp = upload(r, res.var_pooled, "combat pooled variance");
  DeviceArray<double> dsig = upload(r, sig, "combat pooled sd");
  DeviceArray<double> dgamma = upload(r, res.gamma_star, "combat gamma*");
  DeviceArray<double> dmult = upload(r, mult, "combat scale");
  adjust<<<gpu::grid_for(n * g, kThreads), kThreads, 0, r.stream>>>(dY.data(), n, g, dcodes.data(), nb, dcov.data(), nc,
                                                                     dB.data(), dgrand.data(), dvp.data(), dsig.data(),
                                                                     dgamma.data(), dmult.data());
  SCURRY_CUDA_LAUNCH();
  SCURRY_CUDA(cudaMemcpyAsync(Y.data.data(), dY.data(), Y.data.size() * sizeof(float), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return res;
}

}  // namespace scurry
