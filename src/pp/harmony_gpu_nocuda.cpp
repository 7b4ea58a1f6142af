// Built without CUDA: Harmony runs on the CPU only.
#include "core/error.hpp"
#include "pp/harmony_gpu.hpp"

namespace scurry {

HarmonyResult harmony_gpu(const Context&, const DenseD&, const std::vector<std::vector<int32_t>>&,
                          const std::vector<int32_t>&, const HarmonyOptions&) {
  fail_input("harmony_integrate (gpu)", "this scurry was built without CUDA; use --device cpu");
}

HarmonyResult harmony_gpu(const Context&, const DenseF&, const std::vector<std::vector<int32_t>>&,
                          const std::vector<int32_t>&, const HarmonyOptions&, DenseF&) {
  fail_input("harmony_integrate (gpu)", "this scurry was built without CUDA; use --device cpu");
}

HarmonyResult detail::harmony_gpu_rank(const Context&, const HarmonySetup&, const std::vector<int32_t>&, const double*,
                                       const float*, const HarmonyOptions&, const HarmonyRank&, double*, float*) {
  fail_input("harmony_integrate (gpu)", "this scurry was built without CUDA; use --device cpu");
}

}  // namespace scurry
