// scurry: the spectral layout of a graph already on the GPU (UMAP's start on the device,
// umap_gpu.cu): spectral_layout's iterative solver (spectral.hpp) with its block products on the
// device, on the graph as umap prunes it, without the graph's round trip through the host.
#pragma once
#include <cstdint>
#include <optional>

#include "exec/cuda_resources.cuh"
#include "exec/device_csr.cuh"
#include "graph/spectral.hpp"

namespace scurry::spectral {

struct DeviceStart {
  DeviceArray<double> block;  // n x width doubles, row-major; columns 0 .. dim - 1 are the layout
  int64_t width = 0;
  SpectralStats stats;
};

// spectral_layout(ctx, prune_graph(g, min_weight), opt) for n > opt.dense_max_nodes, on r's device:
// entries of g below min_weight, and zeros, count as absent. nullopt when a node has no entry left.
// The caller must check that the pruned graph is connected (connected_components_above): the solver
// does not, and its result means nothing on a graph of several components.
std::optional<DeviceStart> device_spectral_start(CudaResources& r, const DeviceCsr& g, float min_weight,
                                                 const SpectralOptions& opt);

}  // namespace scurry::spectral
