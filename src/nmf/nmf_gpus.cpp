// scurry: NMF replicates spread over several GPUs (see nmf_fit_gpus in nmf.hpp): contiguous groups of
// replicates, one host thread per device, each with its own CudaResources and copy of X.
#include <algorithm>
#include <exception>
#include <thread>

#include "core/error.hpp"
#include "nmf/nmf.hpp"

namespace scurry {

NmfResult nmf_fit_gpus(const CsrF& X, NmfBatch init, const NmfOptions& opt, const std::vector<int>& devices,
                       const CudaOptions& base) {
  if (devices.empty()) fail_input("--gpus", "no GPU given");
  if (opt.loss == NmfLoss::itakura_saito)
    fail_input("--beta-loss", "itakura-saito runs on the CPU only; use --device cpu");
  if (init.R < 1) fail("nmf_fit_gpus: no replicates");
  const int R = init.R;
  const int D = std::min(static_cast<int>(devices.size()), R);
  std::vector<int> lo(D + 1);
  for (int d = 0; d <= D; ++d) lo[d] = d * (R / D) + std::min(d, R % D);
  std::vector<NmfResult> parts(D);
  std::vector<std::exception_ptr> errors(D);
  {
    std::vector<std::thread> workers;
    for (int d = 0; d < D; ++d)
      workers.emplace_back([&, d] {
        try {
          CudaOptions o = base;
          o.device = devices[d];
          // make_cuda_resources selects the device for this thread; the resources die in it too.
          const std::shared_ptr<CudaResources> res = make_cuda_resources(o);
          if (!res) fail_input("--device", "this scurry was built without CUDA; use --device cpu");
          parts[d] = nmf_fit_gpu_on(*res, X, nmf_batch_slice(init, lo[d], lo[d + 1]), opt);
        } catch (...) {
          errors[d] = std::current_exception();
        }
      });
    for (auto& w : workers) w.join();
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  NmfResult out;
  std::vector<NmfBatch> batches;
  for (auto& p : parts) {
    out.n_iter.insert(out.n_iter.end(), p.n_iter.begin(), p.n_iter.end());
    out.error.insert(out.error.end(), p.error.begin(), p.error.end());
    batches.push_back(std::move(p.f));
  }
  out.f = D == 1 ? std::move(batches[0]) : nmf_batch_concat(batches);
  return out;
}

}  // namespace scurry
