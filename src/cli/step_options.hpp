// scurry CLI: the command-line options of each preprocessing step, bound once and shared by
// `scurry run` and the single-step subcommands, so that a step's options have the same names
// everywhere: scanpy's parameter names with dashes. Defaults are not repeated here: an option left
// out keeps the value of the Options struct it binds to (the scanpy tutorial's for `run`).
#pragma once
#include <CLI/CLI.hpp>

#include "graph/leiden.hpp"
#include "graph/neighbors.hpp"
#include "graph/umap.hpp"
#include "pp/preprocess.hpp"
#include "get/aggregate.hpp"
#include "tl/rank_genes_groups.hpp"

namespace scurry::cli {

void add_qc_options(CLI::App& cmd, PreprocessOptions& o);
// `prefix_counts`: in `run`, filter_genes' min_counts/max_counts are --gene-min-counts/--gene-max-counts
// (filter_cells has the plain names); the filter-genes subcommand uses the plain names.
void add_filter_cells_options(CLI::App& cmd, FilterCellsOptions& o);
void add_filter_genes_options(CLI::App& cmd, FilterGenesOptions& o, bool prefix_counts);
void add_normalize_options(CLI::App& cmd, NormalizeTotalOptions& o);
void add_log1p_options(CLI::App& cmd, Log1pOptions& o);
void add_hvg_options(CLI::App& cmd, HvgOptions& o);
void add_scale_options(CLI::App& cmd, ScaleOptions& o);
void add_pca_options(CLI::App& cmd, PcaOptions& o);
// The whole chain: every step's options plus --skip, --no-raw, --no-counts-layer, --no-subset-hvg.
void add_preprocess_options(CLI::App& cmd, PreprocessOptions& o);

// The graph steps. Where two steps share a scanpy parameter name inside `run` (random_state), the
// later steps' options carry the step's name: --umap-random-state, --leiden-random-state,
// --neighbors-random-state (`prefixed`); the single-step subcommands use the plain names.
void add_neighbors_options(CLI::App& cmd, NeighborsOptions& o);
void add_umap_options(CLI::App& cmd, UmapOptions& o, bool prefixed);
void add_leiden_options(CLI::App& cmd, LeidenOptions& o, bool prefixed);
// rank_genes_groups. `in_run`: inside `run` the method is --markers METHOD (and --no-markers turns the
// step off through `enabled`), the other options carry the prefix --markers- where their plain name
// could be mistaken for another step's (--markers-groupby, --markers-n-genes, ...); the
// rank-genes-groups subcommand uses scanpy's plain names. `tsv`: --tsv FILE (--markers-tsv in run),
// the sc.get.rank_genes_groups_df table.
void add_rank_genes_groups_options(CLI::App& cmd, RankGenesGroupsOptions& o, std::string& tsv, bool in_run,
                                   bool* enabled = nullptr);

// sc.get.aggregate: --by, --func, --mask, --dof, --layer.
void add_aggregate_options(CLI::App& cmd, AggregateOptions& o);

// --knn-shard queries|index (parse_knn_shard), for `run --gpus` and `bench --graph --gpus`; `when`
// starts the help ("With --gpus").
void add_knn_shard_option(CLI::App& cmd, KnnShard& target, const std::string& when);

// "8G", "512M", "1.5GiB", "1000000" -> bytes; InputError naming the option otherwise.
size_t parse_size(const std::string& s, const char* option);

}  // namespace scurry::cli
