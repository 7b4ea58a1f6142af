// scurry: Harmony over several GPUs of one host (harmony_gpu.hpp: harmony_gpus): the cells split into
// contiguous balanced ranges, one host thread per context running harmony_gpu.cu's rank
// (detail::harmony_gpu_rank) with a ThreadComm; each rank writes its rows of the result. Errors: a
// failing rank marks the group failed (its peers' collectives throw ThreadCommAborted instead of
// waiting), and the first error that is not "another rank failed" reaches the caller.
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "exec/comm_thread.hpp"
#include "pp/harmony_gpu.hpp"

namespace scurry {

namespace {

void check_contexts(const std::vector<Context*>& ctxs) {
  if (ctxs.empty()) fail_input("harmony_integrate (gpus)", "no GPU context given");
  for (size_t q = 0; q < ctxs.size(); ++q) {
    const Context* c = ctxs[q];
    if (!c || c->backend() != Backend::cuda || !c->cuda())
      fail_input("harmony_integrate (gpus)", "every context must be a CUDA context (--device gpu)");
    for (size_t p = 0; p < q; ++p)  // a context's stream and handles serve one thread
      if (ctxs[p] == c) fail_input("harmony_integrate (gpus)", "context ", q, " is context ", p, " again");
  }
}

// Rank q's cells: [N q / R, N (q + 1) / R).
int64_t range_start(int64_t N, int R, int q) { return N / R * q + std::min<int64_t>(q, N % R); }

// The ranks on their threads; Zd or Zf the embedding, outd or outf the result (st.N x st.d, host).
HarmonyResult run_ranks(const std::vector<Context*>& ctxs, const detail::HarmonySetup& st,
                        const std::vector<int32_t>& n_levels, const double* Zd, const float* Zf,
                        const HarmonyOptions& opt, double* outd, float* outf) {
  const int R = static_cast<int>(ctxs.size());
  if (st.N < R)
    fail_input("harmony_integrate (gpus)", st.N, " cells cannot be split over ", R, " GPUs (a GPU would get none)");
  int fail_rank = -1;  // SCURRY_HARMONY_GPUS_FAIL_RANK=q: rank q throws (a test knob)
  if (const char* e = std::getenv("SCURRY_HARMONY_GPUS_FAIL_RANK")) fail_rank = std::atoi(e);
  const std::vector<std::shared_ptr<ThreadComm>> tc = make_thread_comms(R);
  std::vector<HarmonyResult> res(static_cast<size_t>(R));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(R));
  {
    std::vector<std::thread> workers;
    for (int q = 0; q < R; ++q)
      workers.emplace_back([&, q] {
        try {
          const int64_t lo = range_start(st.N, R, q), hi = range_start(st.N, R, q + 1);
          const detail::HarmonyRank part{lo, hi - lo, tc[q].get(), q == fail_rank};
          res[q] = detail::harmony_gpu_rank(*ctxs[q], st, n_levels, Zd, Zf, opt, part, outd, outf);
        } catch (...) {
          errors[q] = std::current_exception();
          tc[q]->fail_all();
        }
      });
    for (auto& w : workers) w.join();
  }
  rethrow_rank_errors(errors);
  return std::move(res[0]);  // the objective and counts: the same bits on every rank
}

}  // namespace

HarmonyResult harmony_gpus(const std::vector<Context*>& ctxs, const DenseF& Z,
                           const std::vector<std::vector<int32_t>>& codes, const std::vector<int32_t>& n_levels,
                           const HarmonyOptions& opt, DenseF& Z_corr) {
  check_contexts(ctxs);
  if (ctxs.size() == 1) return harmony_gpu(*ctxs[0], Z, codes, n_levels, opt, Z_corr);
  const bool finite = detail::all_finite(Z.data.data(), static_cast<int64_t>(Z.data.size()), ctxs[0]->threads());
  const detail::HarmonySetup st = detail::harmony_setup(Z.n_rows, Z.n_cols, finite, codes, n_levels, opt);
  DenseF out(st.N, st.d);
  HarmonyResult r = run_ranks(ctxs, st, n_levels, nullptr, Z.data.data(), opt, nullptr, out.data.data());
  Z_corr = std::move(out);
  return r;
}

HarmonyResult harmony_gpus(const std::vector<Context*>& ctxs, const DenseD& Z,
                           const std::vector<std::vector<int32_t>>& codes, const std::vector<int32_t>& n_levels,
                           const HarmonyOptions& opt) {
  check_contexts(ctxs);
  if (ctxs.size() == 1) return harmony_gpu(*ctxs[0], Z, codes, n_levels, opt);
  const detail::HarmonySetup st = detail::harmony_setup(Z, codes, n_levels, opt);
  DenseD out(st.N, st.d);
  HarmonyResult r = run_ranks(ctxs, st, n_levels, Z.data.data(), nullptr, opt, out.data.data(), nullptr);
  r.Z_corr = std::move(out);
  return r;
}

}  // namespace scurry
