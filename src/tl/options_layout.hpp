// scurry: the layout of the structs the Python package hands the core libraries (the steps' Options,
// Dataset). The extension and the core libraries are compiled apart where the package is built
// against a prebuilt core (bench/gpu_package/run.sh builds the extension on the GPU machine against
// a bundled libscurry_py_core.so): a header changed between the two (a field added to an Options
// struct) makes each side read the other's fields at other offsets, a crash far from the cause
// (bench/RESULTS.md section 66: IvfCpuOptions gained a field, and neighbors read key_added from the
// bytes of hnsw.random_state). options_layout_here() is that hash as the caller's translation unit
// sees the headers; options_layout_of_library() as the core library was compiled: the extension
// refuses to load when they differ.
#pragma once
#include <cstdint>

#include "core/dataset.hpp"
#include "get/aggregate.hpp"
#include "graph/leiden.hpp"
#include "graph/neighbors.hpp"
#include "graph/umap.hpp"
#include "nmf/cnmf_files.hpp"
#include "nmf/cnmf_steps.hpp"
#include "pp/combat.hpp"
#include "pp/filter.hpp"
#include "pp/harmony.hpp"
#include "pp/hvg.hpp"
#include "pp/normalize.hpp"
#include "pp/pca.hpp"
#include "pp/qc.hpp"
#include "pp/regress_out.hpp"
#include "pp/scale.hpp"
#include "pp/scrublet.hpp"
#include "tl/dendrogram.hpp"
#include "tl/diffmap.hpp"
#include "tl/draw_graph.hpp"
#include "tl/embedding_density.hpp"
#include "tl/paga.hpp"
#include "tl/rank_genes_groups.hpp"
#include "tl/score_genes.hpp"
#include "tl/tsne.hpp"

namespace scurry {

#define SCURRY_OPTIONS_LAYOUT_TYPES(X)                                                                      \
  X(Dataset) X(Matrix) X(AggregateOptions) X(CnmfConsensusArgs) X(CnmfPaths) X(CnmfPrepareArgs)              \
  X(CombatOptions) X(DendrogramOptions) X(DiffmapOptions) X(DptOptions) X(DrawGraphOptions)                  \
  X(EmbeddingDensityOptions) X(FilterCellsOptions) X(FilterGenesOptions) X(FilterRankGenesGroupsOptions)     \
  X(HarmonyOptions) X(HvgOptions) X(LeidenOptions) X(NeighborsOptions) X(IvfCpuOptions) X(HnswOptions)      \
  X(NormalizeTotalOptions) X(PagaOptions) X(PcaOptions) X(QcOptions) X(RankGenesGroupsOptions)               \
  X(RegressOutOptions) X(ScaleOptions) X(ScoreGenesOptions) X(ScrubletOptions) X(TsneOptions) X(UmapOptions)

// FNV-1a over each type's size and alignment, in the list's order.
inline uint64_t options_layout_here() {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 1099511628211ULL;
    }
  };
#define SCURRY_OPTIONS_LAYOUT_MIX(T) mix(sizeof(T)), mix(alignof(T));
  SCURRY_OPTIONS_LAYOUT_TYPES(SCURRY_OPTIONS_LAYOUT_MIX)
#undef SCURRY_OPTIONS_LAYOUT_MIX
  return h;
}

// The same, as the core library was compiled (options_layout.cpp).
uint64_t options_layout_of_library();

}  // namespace scurry
