// scurry: the GPU half of rank_genes_groups (issue 18, point 5): the per-category statistics that
// every method starts from and, for wilcoxon, the rank sums, computed on the device; the host turns
// them into scores, p-values and orders with the same code as the CPU path (rank_genes_groups.cpp).
//
// Everything here is exact or order-free, so two runs give the same bits and the CPU path is the
// oracle: per-category sums and sums of squares are fixed-point sums as in gene_sums.cu over each
// category's rows (rows gathered in category order on the device); ranks are integers (twice the
// average rank of a tie group, s + e + 1 for the 0-based positions [s, e) it spans), summed in 64-bit
// integers; the tie terms t^3 - t per gene are added per thread in a fixed order and reduced by a
// fixed tree.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/dataset.hpp"
#include "exec/context.hpp"
#include "tl/rank_genes_groups.hpp"

namespace scurry {

// The devices a call on a GPU context runs on: `gpus` (--gpus) where there are several (ctx among them),
// else ctx alone.
inline std::vector<const Context*> gpu_devices(const Context& ctx, const std::vector<Context*>& gpus) {
  if (gpus.size() > 1) return std::vector<const Context*>(gpus.begin(), gpus.end());
  return {&ctx};
}

struct RankGenesGroupsGpu {
  GeneGroupStats st;
  // wilcoxon. Rest (ref < 0): one entry per (bucket b in [0, n_categories], gene), [b * G + j];
  // reference: one per (field f, gene), [f * G + j], ranks among the cells of field f and ref only.
  // rank2: twice the sum of the ranks of the bucket's (field's) nonzeros; ties: sum over the tie
  // groups of nonzeros of t^3 - t; n_neg: the nonzeros below zero (rest: per gene, [j]; reference:
  // per field and gene, of the pair's cells).
  std::vector<int64_t> rank2, n_neg;
  std::vector<double> ties;
  bool has_nan = false;  // the matrix holds NaN or inf: the ranks are not filled (compute on the CPU)
};

// Statistics of the cells x genes matrix x for the categories `codes` (-1 = none), as
// gene_group_stats; with `ranks`, the wilcoxon rank sums of every bucket (ref < 0) or of each
// field against ref. Throws scurry::Error where the GPU cannot (no CUDA build, out of memory).
// NaN or infinite values (which the CPU path skips or adds in float64) set has_nan instead: the caller
// computes on the CPU.
RankGenesGroupsGpu rank_genes_groups_gpu(const Context& ctx, const CsrF& x, const std::vector<int32_t>& codes,
                                         int64_t n_categories, bool ranks, int32_t ref,
                                         const std::vector<int32_t>& fields);
// The same for a dense row-major float32 matrix already on ctx's device (Dataset::device_x): its
// nonzeros are gathered in bucket order on the device, as the CSR path holds them, so the results
// are the CSR path's bits for to_csr_f of the same values. Returns false (res untouched) where the
// device has not the memory for them or x is on another device (the caller then tests the host's
// copy); looks_like_counts
// tells whether every value is a non-negative integer (rank_genes_groups' warning).
bool rank_genes_groups_gpu(const Context& ctx, const DeviceMatrix& x, const std::vector<int32_t>& codes,
                           int64_t n_categories, bool ranks, int32_t ref, const std::vector<int32_t>& fields,
                           RankGenesGroupsGpu& res, bool& looks_like_counts);
// A DeviceMatrix holding a copy of x on ctx's device (for the tests and callers that keep X there).
std::shared_ptr<const DeviceMatrix> device_matrix(const Context& ctx, const DenseF& x);
// The same over several GPUs (or several contexts on one): the genes split evenly between them, each
// device reading every row; the results do not depend on the number of devices.
RankGenesGroupsGpu rank_genes_groups_gpu(const std::vector<const Context*>& devices, const CsrF& x,
                                         const std::vector<int32_t>& codes, int64_t n_categories, bool ranks,
                                         int32_t ref, const std::vector<int32_t>& fields);

// The two-sided p-values of Student's t, p[i] = stats::t_two_sided_p(t[i], df[i]), on ctx's device
// (the same continued fraction, stats_core.hpp: equal to the CPU's within a few ulps).
std::vector<double> t_pvalues_gpu(const Context& ctx, const std::vector<double>& t, const std::vector<double>& df);

// score_genes on the device (score_genes.hpp): the matrix uploaded once (or streamed in chunks of
// rows where it does not fit); the per-gene sums over all cells (the statistics' fixed-point sums,
// one category) handed to `controls`, which returns per gene 1 for the set's genes, 2 for the control
// genes, 0 else (the host's binning and numpy's shuffle); then per cell the set's mean minus the
// controls' mean (one warp per row, float64 lanes combined by a fixed tree) into score (N values).
// Returns false (score untouched, controls not called) where the matrix holds NaN or inf: the
// caller scores on the CPU.
bool score_genes_gpu(const Context& ctx, const CsrF& x,
                     const std::function<std::vector<uint8_t>(const std::vector<double>& gene_sums)>& controls,
                     std::vector<double>& score);
// The same over several GPUs (or several contexts on one): each device reads every row and sums its
// share of the genes, then scores its share of the rows; the result does not depend on the number of
// devices.
bool score_genes_gpu(const std::vector<const Context*>& devices, const CsrF& x,
                     const std::function<std::vector<uint8_t>(const std::vector<double>& gene_sums)>& controls,
                     std::vector<double>& score);

// What this process's rank_genes_groups_gpu and t_pvalues_gpu calls since the last reset took, for
// `scurry bench --markers`: the per-group sums' kernels (CUDA events, every pass and chunk, no
// uploads), the p-value kernel (events), and the matrix's uploads (wall). Devices' times add up.
struct RggGpuTimes {
  double sums_s = 0, pvalues_s = 0, upload_s = 0;
};
void reset_rgg_gpu_times();
RggGpuTimes rgg_gpu_times();

}  // namespace scurry
