// scurry: batches of NMF replicates fitted one after another on one GPU that holds X once (see
// nmf_fit_gpu_batches in nmf.hpp): what cNMF's factorize runs on the device, as `cnmf bench` does;
// and the usage refits of several spectra against one X held once (NmfGpuRefits: k_selection_plot).
//
// X is uploaded, checked and laid out (dense or CSR, nmf_device_x) once for the largest batch; then
// per batch its factors are uploaded, fitted (nmf_fit_device) and H downloaded (W only on request:
// cNMF's factorize keeps only the spectra). The next batch's initialisation is made on a host
// thread while the current one fits, so the host's numpy-stream draws overlap the device, into the
// storage of the host W just uploaded.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <future>
#include <string>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/cuda_resources.cuh"
#include "exec/device_csr.cuh"
#include "nmf/nmf.hpp"
#include "nmf/nmf_gpu.cuh"

namespace scurry {

void nmf_fit_gpu_batches(const Context& ctx, const CsrF& X, int n_batches, int64_t max_rk,
                         const std::function<NmfBatch(int, std::vector<float>&)>& make, const NmfOptions& opt,
                         const std::function<void(int, NmfResult&)>& done, bool want_w) {
  CudaResources* resp = ctx.cuda();
  if (!resp) fail_input("--device", "the GPU NMF needs a CUDA context (--device gpu)");
  if (opt.loss == NmfLoss::itakura_saito) fail_input("--beta-loss", "itakura-saito runs on the CPU only; use --device cpu");
  if (n_batches < 1) return;
  CudaResources& res = *resp;
  nmf_gpu_check_x(X);
  // The last uploaded batch's host W: the next init (on its own thread) writes into its storage,
  // without allocating, faulting in and zero-filling ~12 GB again. Declared before `next`, whose
  // destructor waits for the init that may still use it.
  std::vector<float> spare;
  auto make_next = [&](int b) {
    return std::async(std::launch::async, [&make, &spare, b] {
      NmfBatch nb = make(b, spare);
      std::vector<float>().swap(spare);  // not taken: freed before the fit's next batch
      return nb;
    });
  };
  std::future<NmfBatch> next = make_next(0);
  NmfBatch first = next.get();
  const int k0 = std::max(1, first.k);
  const int r_plan = static_cast<int>(std::max<int64_t>(1, (max_rk + k0 - 1) / k0));
  const NmfDeviceX x = nmf_device_x(res, upload(res, X), &X, opt, r_plan, k0);
  log::info(std::string("NMF on the GPU: X laid out ") + (x.dense ? "dense" : "sparse") + " once for " +
            std::to_string(n_batches) + " batches");
  NmfBatch cur = std::move(first);
  // SCURRY_NMF_BATCH_TIMES=1: each batch's phases (check, upload of the factors, fit, download, the caller's
  // writes, the wait for the next batch's init) on stderr.
  const char* pe = std::getenv("SCURRY_NMF_BATCH_TIMES");
  const bool prof = pe && std::string(pe) == "1";
  auto t0 = std::chrono::steady_clock::now();
  std::string line;
  auto lap = [&](const char* what) {
    if (!prof) return;
    SCURRY_CUDA(cudaStreamSynchronize(res.stream));
    const auto now = std::chrono::steady_clock::now();
    line += std::string(" ") + what + " " + std::to_string(std::chrono::duration<double>(now - t0).count());
    t0 = now;
  };
  for (int b = 0; b < n_batches; ++b) {
    line.clear();
    nmf_gpu_check_batch(X, cur, "nmf_fit_gpu_batches: batch " + std::to_string(b));
    lap("check");
    NmfDeviceFactors f = nmf_upload_factors(res, cur);
    lap("upload");
    // The host copy of W is not needed while it fits: the next init reuses its storage.
    if (b + 1 < n_batches) spare = std::move(cur.W);
    std::vector<float>().swap(cur.W);
    if (b + 1 < n_batches) next = make_next(b + 1);
    NmfDeviceStats st = nmf_fit_device(res, x, f, opt, true);
    lap("fit");
    NmfResult out;
    out.f.n = f.n, out.f.g = f.g, out.f.k = f.k, out.f.R = f.R;
    out.f.Ht.resize(f.Ht.size());
    copy_to_host(res, out.f.Ht.data(), f.Ht.data(), f.Ht.size() * sizeof(float));
    if (want_w) {
      out.f.W.resize(f.W.size());
      copy_to_host(res, out.f.W.data(), f.W.data(), f.W.size() * sizeof(float));
    }
    out.n_iter = std::move(st.n_iter);
    out.error = std::move(st.error);
    f = NmfDeviceFactors{};
    lap("download");
    done(b, out);
    lap("write");
    if (b + 1 < n_batches) cur = next.get();
    lap("wait_init");
    if (prof) std::fprintf(stderr, "[nmf batches] batch %d (k %d, R %d):%s s\n", b, out.f.k, out.f.R, line.c_str());
  }
}

struct NmfGpuRefits::Impl {
  CudaResources* res = nullptr;
  NmfOptions opt;
  int max_k = 0;
  NmfDeviceX x;
};

NmfGpuRefits::NmfGpuRefits(const Context& ctx, const CsrF& X, NmfOptions opt, int max_k) : impl_(std::make_unique<Impl>()) {
  impl_->res = ctx.cuda();
  if (!impl_->res) fail_input("--device", "the GPU NMF needs a CUDA context (--device gpu)");
  if (opt.loss == NmfLoss::itakura_saito) fail_input("--beta-loss", "itakura-saito runs on the CPU only; use --device cpu");
  if (max_k < 1 || max_k > kNmfGpuMaxK)
    fail_input("-k", "the GPU NMF handles 1 to ", kNmfGpuMaxK, " components (got ", max_k, ")");
  nmf_gpu_check_x(X);
  opt.update_h = false;
  impl_->opt = opt;
  impl_->max_k = max_k;
  impl_->x = nmf_device_x(*impl_->res, upload(*impl_->res, X), &X, opt, 1, max_k);
}

NmfGpuRefits::~NmfGpuRefits() = default;

DenseF NmfGpuRefits::refit(const DenseF& H, double* frob_err_sq) {
  Impl& m = *impl_;
  const int k = static_cast<int>(H.n_rows);
  if (H.n_cols != m.x.g) fail("NmfGpuRefits::refit: H has ", H.n_cols, " columns but X has ", m.x.g);
  if (k < 1 || k > m.max_k) fail("NmfGpuRefits::refit: H has ", k, " rows, outside 1..", m.max_k);
  // nmf_fit_w_fixed_h's start: zeros for cd, sqrt(mean(X) / k) for mu (the sum summed as it does).
  float fill = 0;
  if (m.opt.solver == NmfSolver::mu) {
    const double cells = static_cast<double>(m.x.n) * static_cast<double>(m.x.g);
    fill = static_cast<float>(std::sqrt(cells > 0 ? m.x.sum / cells / k : 0.0));
  }
  NmfBatch b = NmfBatch::from(DenseF(m.x.n, k, fill), H);
  NmfDeviceFactors f = nmf_upload_factors(*m.res, b);
  std::vector<float>().swap(b.W);
  NmfDeviceStats st = nmf_fit_device(*m.res, m.x, f, m.opt, frob_err_sq != nullptr);
  if (frob_err_sq) {
    const double e = m.opt.loss == NmfLoss::frobenius ? st.error.at(0)
                                                       : nmf_device_objective(*m.res, m.x, f, NmfLoss::frobenius).at(0);
    *frob_err_sq = e * e;
  }
  DenseF W(m.x.n, k);
  copy_to_host(*m.res, W.data.data(), f.W.data(), W.data.size() * sizeof(float));
  return W;
}

}  // namespace scurry
