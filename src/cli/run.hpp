// scurry run: the pipeline. A run is a list of named steps, each a function void(Context&, Dataset&,
// Timings&), executed in order; a step either is timed as a whole or records its own sub-steps
// (preprocess times each of its steps). Adding a step means:
//   1. a field `XxxOptions xxx;` in RunOptions (the defaults stay in XxxOptions),
//   2. its command-line options in add_run_options() (names = scanpy's parameter names with dashes;
//      the preprocessing options are bound in step_options.cpp),
//   3. one entry in build_pipeline() (between preprocess and write).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/dataset.hpp"
#include "exec/context.hpp"
#include "io/h5ad.hpp"
#include "core/timings.hpp"
#include "io/read.hpp"
#include "graph/leiden.hpp"
#include "graph/neighbors.hpp"
#include "graph/umap.hpp"
#include "pp/harmony.hpp"
#include "pp/preprocess.hpp"
#include "pp/preprocess_stream.hpp"
#include "pp/scrublet.hpp"
#include "tl/rank_genes_groups.hpp"

namespace scurry::cli {

struct RunOptions {
  std::string input;    // INPUT: h5ad, 10x .h5 or 10x mtx directory
  std::string output;   // -o/--output: the result, .h5ad
  std::string timings;  // --timings: per-step timings as JSON ("" = not written)
  std::string report;   // --report: the HTML run report (report/report.hpp; "" = not written)
  ReadOptions read;
  H5adWriteOptions write;
  NeighborsOptions neighbors;
  UmapOptions umap;
  LeidenOptions leiden;
  bool graph = true;  // --no-graph: stop after PCA
  bool tsne = false;  // --tsne: also t-SNE (obsm X_tsne, tl/tsne.hpp's defaults), after Leiden
  bool paga = false;  // --paga: also PAGA of the Leiden clusters (uns paga), after Leiden
  bool draw_graph = false;  // --draw-graph: also ForceAtlas2 (obsm X_draw_graph_fa, tl/draw_graph.hpp's defaults)
  // --markers METHOD / --no-markers: end with rank_genes_groups by leiden (scanpy's default method,
  // t-test); --markers-tsv: also its rank_genes_groups_df table.
  bool markers = true;
  RankGenesGroupsOptions rank_genes_groups = [] {
    RankGenesGroupsOptions r;
    r.groupby = "leiden";
    return r;
  }();
  std::string markers_tsv;
  // --stream (--device gpu): the preprocessing streamed over row blocks read lazily from the input
  // (preprocess_stream.hpp); also chosen by itself when the input's matrix would not fit the device.
  // --no-stream: never.
  std::optional<bool> stream;
  StreamOptions stream_opt;  // --stream-block-nnz, --stream-host-store
  // --gpus (set by run_ranks, not parsed here): the GPUs the preprocessing (streamed or not) and
  // --integrate harmony spread over; empty or one: the Context's GPU. Not owned.
  std::vector<Context*> gpus;
  // Issue 21. --integrate harmony: Harmony on X_pca after the preprocessing (batch keys: --harmony-key,
  // else --batch-key), the kNN on X_pca_harmony. --scrublet: Scrublet on the counts before the
  // preprocessing, per --batch-key batch (cmd_integrate.cpp binds both).
  std::string integrate;
  HarmonyOptions harmony;
  bool scrublet = false;
  ScrubletOptions scrublet_opt;
  PreprocessOptions preprocess = [] {
    PreprocessOptions p;
    p.qc_vars = {"mt"};  // the scanpy tutorial's QC of mitochondrial genes
    return p;
  }();
};

using StepFn = std::function<void(Context&, Dataset&, Timings&)>;
struct Step {
  std::string name;  // shown in the timing table and the JSON ("read", "write", ...)
  StepFn run;
  bool self_timed = false;  // records its own sub-steps into the Timings
};

// Binds RunOptions to the `run` subcommand's options.
void add_run_options(CLI::App& cmd, RunOptions& o);
// The steps to run, in order, for these options: read, qc-check, ..., write.
std::vector<Step> build_pipeline(const RunOptions& o);

}  // namespace scurry::cli
