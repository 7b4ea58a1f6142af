// scurry: marker genes, as scanpy 1.9.6's `sc.tl.rank_genes_groups` (t-test, t-test_overestim_var,
// wilcoxon with tie_correct, logreg) and `sc.tl.filter_rank_genes_groups`, writing uns[key_added]
// exactly as scanpy does (record arrays names/scores/pvals/pvals_adj/logfoldchanges, params,
// pts/pts_rest dataframes).
//
// How it is computed (the shape a GPU backend reproduces): one pass over the cells x genes CSR gives
// per-category float64 sums, sums of squares and nonzero counts per gene (GeneGroupStats; fixed row
// blocks combined in block order). wilcoxon then takes the matrix gene-major (a parallel counting
// transpose) and, per gene, sorts only its nonzeros: all zeros share one average rank (Mann &
// Whitney 1947; tie correction as scipy.stats.tiecorrect), rank sums per category in one pass.
// Genes are independent, so results do not depend on the thread count. "rest" statistics are the
// totals minus the group's.
//
// Known differences from scanpy:
// - scanpy orders equal scores with np.argsort (not stable); here equal scores keep gene order.
// - logreg: sklearn's LogisticRegression (lbfgs, L2, C = 1, max_iter = 100) is replaced by our own
//   L-BFGS (m = 10, backtracking Armijo line search) on the same objective
//   sum_i CE_i + ||W||^2 / (2C) (intercepts unpenalised), from zero, 100 iterations at most: the
//   coefficients agree with sklearn's where both converge; scanpy's top genes are matched at >= 80%.
// - mask_var (scanpy 1.10) is accepted: only genes with var[mask_var] true are tested.
// - pts with method logreg are computed too.
//
// SCURRY_RGG_TIMES=1 in the environment prints each phase's wall and CPU seconds to stderr.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/row_blocks.hpp"
#include "exec/context.hpp"

namespace scurry {

struct RankGenesGroupsOptions {
  std::string groupby;                 // obs column (categorical, or strings: categories sorted)
  std::vector<std::string> groups;     // empty = 'all'; else the groups to test, in this order
  std::string reference = "rest";      // 'rest' or one group
  std::string method = "t-test";       // t-test | t-test_overestim_var | wilcoxon | logreg
  std::optional<int64_t> n_genes;      // genes per group in the tables; unset = all genes
  bool rankby_abs = false;             // rank by |score| (the scores themselves stay signed)
  bool pts = false;                    // fraction of cells expressing each gene (pts, pts_rest)
  bool tie_correct = false;            // wilcoxon: tie-corrected variance
  std::string corr_method = "benjamini-hochberg";  // or bonferroni
  std::optional<bool> use_raw;         // unset = use raw when the Dataset has one (scanpy 1.9)
  std::string layer;                   // test this layer instead of X ("" = X or raw)
  std::string mask_var;                // boolean var column: test only those genes ("" = all)
  std::string key_added = "rank_genes_groups";
  // logreg (sklearn's LogisticRegression defaults)
  double logreg_C = 1.0;
  int logreg_max_iter = 100;
  double logreg_tol = 1e-4;
};

// Per-gene, per-category statistics over the nonzeros: what every method starts from. Index
// [c * n_genes + j] for category c in [0, n_categories], the last one holding the cells whose
// group is missing.
struct GeneGroupStats {
  int64_t n_genes = 0, n_categories = 0;
  std::vector<int64_t> n_cells;  // n_categories + 1
  std::vector<double> sum, sum_sq;
  std::vector<int64_t> nnz;
};

struct RankGenesGroupsResult {
  std::string method, corr_method, groupby, reference, layer;
  bool use_raw = false;
  std::vector<std::string> groups_order;  // the groups tested (incl. the reference when one is given)
  std::vector<std::string> group_names;   // the record fields: groups_order less the reference
  std::vector<std::string> gene_names;    // the genes tested (after mask_var)
  int64_t n_top = 0;                      // rows of the tables
  // Per field (group_names order), per gene (gene_names order): the test's values.
  std::vector<std::vector<double>> scores, pvals, pvals_adj, logfoldchanges;
  // Per field: the n_top gene indices, best first.
  std::vector<std::vector<int64_t>> order;
  // pts: per groups_order entry, per gene; pts_rest per groups_order entry (reference 'rest' only).
  std::vector<std::vector<double>> pts, pts_rest;
  bool has_pvals() const { return !pvals.empty(); }
};

// The test on a Dataset (X, a layer or raw, as the options say). Throws InputError naming the
// problem (a missing or non-categorical groupby column, an unknown group or reference, a group of
// fewer than 2 cells, use_raw without raw, ...).
// The checks of the options alone (no data: method, corr_method, n_genes): InputError naming the bad
// value. `scurry run` calls it before its first step; rank_genes_groups() calls it too.
void validate_rank_genes_groups_options(const RankGenesGroupsOptions& opt);
RankGenesGroupsResult rank_genes_groups(const Dataset& d, const RankGenesGroupsOptions& opt, const Context& ctx);
// On a GPU context the statistics, the wilcoxon ranks, the t-tests' p-values (rank_genes_groups_gpu.hpp)
// and logreg's objective (logreg_gpu.hpp) run on the device; a matrix with NaN on the CPU threads.
// `gpus` (--gpus): several GPU contexts sharing the genes of the statistics and ranks (ctx is the
// first; logreg's objective on ctx alone); the results are the same bits for any number of them.
RankGenesGroupsResult rank_genes_groups(const Dataset& d, const RankGenesGroupsOptions& opt, const Context& ctx,
                                        const std::vector<Context*>& gpus);

// Low level: the statistics of a cells x genes CSR matrix for cell categories `codes` (-1 = none)
// in [0, n_categories): one pass over the rows in fixed blocks, float64 partials combined in block
// order (zeros and NaN skipped).
GeneGroupStats gene_group_stats(const CsrF& cells_by_genes, const std::vector<int32_t>& codes, int64_t n_categories,
                                const Context& ctx);

// gene_group_stats of a matrix read in row ranges instead of held (scurry run's CPU path, which lets
// raw/X go after writing it, reads it back from its output this way), the same bits as on the whole
// matrix: the same fixed blocks, each block's rows read in pieces of at most `piece_rows` (one
// read_rows call at a time). `counts_like`: whether every stored value is a non-negative integer
// (the count check's finding).
GeneGroupStats gene_group_stats(RowSource& rows, const std::vector<int32_t>& codes, int64_t n_categories,
                                const Context& ctx, int64_t piece_rows, bool* counts_like = nullptr);
// rank_genes_groups (then stored as rank_genes_groups_inplace does) on raw's genes, the matrix read
// from `rows` (raw/X's shape), on the CPU: t-test or t-test_overestim_var (their statistics are sums
// over the cells), no layer or mask_var (else InputError).
RankGenesGroupsResult rank_genes_groups_inplace(Dataset& d, const RankGenesGroupsOptions& opt, const Context& ctx,
                                                RowSource& rows);

// Writes the result into d.uns[key] as scanpy 1.9.6 does.
void store_rank_genes_groups(Dataset& d, const RankGenesGroupsResult& r, const std::string& key);

// rank_genes_groups followed by store_rank_genes_groups(d, r, opt.key_added).
RankGenesGroupsResult rank_genes_groups_inplace(Dataset& d, const RankGenesGroupsOptions& opt, const Context& ctx,
                                                const std::vector<Context*>& gpus = {});

// sc.get.rank_genes_groups_df(adata, group=None, key=key): one row per (group, rank), columns group,
// names, scores, logfoldchanges, pvals, pvals_adj (those present), pct_nz_group / pct_nz_reference
// when pts were computed. Read from d.uns[key] (works on files written by scanpy too).
Table rank_genes_groups_df(const Dataset& d, const std::string& key = "rank_genes_groups");
// The same table as tab-separated text (header line, then rows; numbers with 9 significant digits).
std::string rank_genes_groups_tsv(const Table& t);

struct FilterRankGenesGroupsOptions {
  std::string key = "rank_genes_groups";
  std::string groupby;                 // "" = uns[key]['params']['groupby']
  std::optional<bool> use_raw;         // unset = uns[key]['params']['use_raw'] (scanpy 1.9.6: True)
  bool log = true;                     // values are log: fold change = exp(mean_in) / exp(mean_out)
  std::string key_added = "rank_genes_groups_filtered";
  double min_in_group_fraction = 0.25;
  double min_fold_change = 1;
  double max_out_group_fraction = 0.5;
  bool compare_abs = false;            // scanpy 1.9: |log fold change| compared
};

// sc.tl.filter_rank_genes_groups (scanpy 1.9.6): copies uns[key] to uns[key_added] with the names of
// genes failing a criterion replaced by NaN (the string "nan" in the names record array, as pandas
// writes float NaN among strings).
void filter_rank_genes_groups(Dataset& d, const FilterRankGenesGroupsOptions& opt, const Context& ctx);

}  // namespace scurry
