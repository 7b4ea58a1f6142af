// Built without CUDA: rank_genes_groups runs on the CPU only.
#include "core/error.hpp"
#include "tl/rank_genes_groups_gpu.hpp"

namespace scurry {

RankGenesGroupsGpu rank_genes_groups_gpu(const Context&, const CsrF&, const std::vector<int32_t>&, int64_t, bool,
                                         int32_t, const std::vector<int32_t>&) {
  fail_input("rank_genes_groups (gpu)", "this scurry was built without CUDA; use --device cpu");
}

RankGenesGroupsGpu rank_genes_groups_gpu(const std::vector<const Context*>&, const CsrF&, const std::vector<int32_t>&,
                                         int64_t, bool, int32_t, const std::vector<int32_t>&) {
  fail_input("rank_genes_groups (gpu)", "this scurry was built without CUDA; use --device cpu");
}

bool rank_genes_groups_gpu(const Context&, const DeviceMatrix&, const std::vector<int32_t>&, int64_t, bool, int32_t,
                           const std::vector<int32_t>&, RankGenesGroupsGpu&, bool&) {
  fail_input("rank_genes_groups (gpu)", "this scurry was built without CUDA; use --device cpu");
}

std::shared_ptr<const DeviceMatrix> device_matrix(const Context&, const DenseF&) {
  fail_input("rank_genes_groups (gpu)", "this scurry was built without CUDA; use --device cpu");
}

std::vector<double> t_pvalues_gpu(const Context&, const std::vector<double>&, const std::vector<double>&) {
  fail_input("t_pvalues_gpu", "this scurry was built without CUDA; use --device cpu");
}

bool score_genes_gpu(const Context&, const CsrF&, const std::function<std::vector<uint8_t>(const std::vector<double>&)>&,
                     std::vector<double>&) {
  fail_input("score_genes (gpu)", "this scurry was built without CUDA; use --device cpu");
}

bool score_genes_gpu(const std::vector<const Context*>&, const CsrF&,
                     const std::function<std::vector<uint8_t>(const std::vector<double>&)>&, std::vector<double>&) {
  fail_input("score_genes (gpu)", "this scurry was built without CUDA; use --device cpu");
}

void reset_rgg_gpu_times() {}
RggGpuTimes rgg_gpu_times() { return {}; }

}  // namespace scurry
