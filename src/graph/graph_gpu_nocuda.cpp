// Built without CUDA: the GPU UMAP layout and Leiden are not there.
#include "core/error.hpp"
#include "graph/leiden_gpu.hpp"
#include "graph/spectral_ops.hpp"
#include "graph/umap_gpu.hpp"

namespace scurry {
namespace {
[[noreturn]] void no_cuda(const char* step) {
  fail_input(step, "this scurry was built without CUDA; use --device cpu");
}
}  // namespace

UmapResult umap_gpu(const Context&, const CsrF&, const DenseF&, const UmapOptions&) { no_cuda("umap (gpu)"); }
UmapResult umap_gpu(const Context&, const CsrF&, const UmapOptions&, const DenseF*, const RepresentationFn&) {
  no_cuda("umap (gpu)");
}
LeidenResult leiden_gpu(const Context&, const CsrF&, const LeidenOptions&) { no_cuda("leiden (gpu)"); }
LeidenResult leiden_gpus(const std::vector<Context*>&, const CsrF&, const LeidenOptions&) { no_cuda("leiden (gpu)"); }
std::unique_ptr<spectral::BlockOps> spectral::device_block_ops(const Context&, const CsrF&, const std::vector<double>&,
                                                               int64_t, int) {
  no_cuda("spectral layout (gpu)");
}
}  // namespace scurry
