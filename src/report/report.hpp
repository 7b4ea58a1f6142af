// scurry report: the run report, one self-contained HTML page (inline CSS, figures as inline SVG
// with PNG data URIs for the many-point layers; no script, no reference to any other file or to the
// network) with the plots of the scanpy tutorial, drawn from whatever slots a result holds:
//   summary (input, shape, scurry's version, device, command), parameters (every uns[*]['params']
//   and the filters), QC violins (n_genes_by_counts, total_counts, pct_counts_mt) and the scatter of
//   total_counts against n_genes_by_counts with the filter thresholds drawn, what the filters
//   removed, the highest expressed genes (scanpy's pl.highest_expr_genes), the HVG mean/dispersion
//   plot, the PCA variance ratio, the UMAP coloured by cluster (legend with cluster sizes), by
//   total_counts, pct_counts_mt and the top marker genes, the marker table and dotplot
//   (uns['rank_genes_groups']), the per-step timings (table and bar chart) and the warnings; for cNMF,
//   the k-selection plot (stability and error against K) and each program's usage on the UMAP
//   (obsm['cnmf_usages_k<K>'], as scurry cnmf run --write-h5ad writes it).
// A section whose slots are absent is replaced by a one-line note saying which slot is missing.
//
// Sizes: every many-point plot is a raster of fixed size (points drawn into a PNG; the QC scatter
// becomes a density above ReportOptions::density_above cells); violins are binned kernel densities
// and the boxplots come from fixed-bin histograms, so the page is about the same size (well under
// 1 MB of figures) at 1,000 and at 10 million cells.
//
// Statistics over the expression matrix (highest expressed genes, dotplot) are per-block partials
// (rows in fixed blocks of ReportOptions::block_rows) summed in block order (exec/parallel.hpp's
// reduce_blocks): the same bits for any thread count, and the shape a GPU kernel can reproduce.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/row_blocks.hpp"
#include "core/timings.hpp"

namespace scurry::report {

struct ReportOptions {
  int top_genes = 20;            // highest expressed genes shown (scanpy's n_top = 30; the tutorial's 20)
  int dotplot_genes_per_group = 3;  // top markers per cluster in the dotplot
  int marker_table_genes = 5;    // markers listed per cluster in the table
  int umap_marker_genes = 4;     // UMAP panels coloured by marker genes (top marker of the first clusters)
  int raster_px = 400;           // side of the plot area of embeddings and scatters (pixels)
  int64_t density_above = 100000;  // QC scatter: a density (cells per pixel) above this many cells
  int64_t block_rows = 2048;     // rows per block of the expression passes
  int hist_bins = 5000;          // bins over [0, 100] % of the boxplots' histograms (0.02 % wide)
  int threads = 0;               // 0: all hardware threads
  uint64_t seed = 0;             // order in which categorical points are drawn (a seeded shuffle)
};

// What the page is made from. `data` holds obs, var, obsm, uns and raw's var; its X and raw's X are
// not read (the expression matrix comes through `expression`, streamed by row blocks).
struct ReportInput {
  const Dataset* data = nullptr;
  RowSource* expression = nullptr;        // cells x genes, or null: no gene-level sections
  std::vector<std::string> expression_genes;  // its column names
  bool expression_log1p = true;           // log1p of normalised counts (raw/X): expm1 gives counts
  std::string expression_slot;            // "raw/X", "X": named in the page
  std::string result_path;                // the file shown (scurry report) or written (scurry run)
  std::string made_by;                    // "scurry report", "scurry run"
  // From the run (scurry run) or from uns['scurry'] (a result scurry wrote; see store_run_info).
  std::vector<TimingStep> timings;
  std::vector<std::string> warnings;
  // cNMF's k selection (NAME.k_selection_stats.df.txt of scurry cnmf / cNMF): empty when not given.
  std::vector<double> cnmf_k, cnmf_stability, cnmf_error;
  std::string cnmf_source;
};

// Tukey's box of a distribution: quartiles, whiskers at the furthest values within 1.5 IQR.
struct Box {
  double q1 = 0, med = 0, q3 = 0, lo = 0, hi = 0, min = 0, max = 0;
};

// The gene-level statistics of the page, from the expression matrix streamed in row blocks (two
// passes): scanpy's highest_expr_genes (each gene's percentage of each cell's counts; counts =
// expm1(value) when log1p), the dotplot's share of cells expressing (value > 0) and mean value per
// (group, gene), and every cell's value of a few genes (the UMAP panels).
struct ExpressionStats {
  std::vector<double> mean_pct;              // per gene: mean over cells of its % of the cell's counts
  std::vector<int64_t> top;                  // the top_genes genes by mean_pct, highest first (ties: lower index)
  std::vector<Box> top_box;                  // their boxes, from histograms of hist_bins bins over [0, 100] %
  std::vector<double> dot_frac, dot_mean;    // [group * dot_genes.size() + s]
  std::vector<std::vector<double>> cell_values;  // per cell gene: the value of every cell
};
// group_codes: per cell its group (-1: none), or null; n_groups groups.
ExpressionStats expression_stats(RowSource& src, bool log1p, const std::vector<int32_t>* group_codes, int n_groups,
                                 const std::vector<int64_t>& dot_genes, const std::vector<int64_t>& cell_genes,
                                 const ReportOptions& opt);

// The page. Throws InputError naming `result_path` for slots of the wrong shape.
std::string report_html(const ReportInput& in, const ReportOptions& opt = {});

// The report of a dataset held in memory (scurry run, after its steps): gene expression from raw.X
// (all genes; log1p when uns['log1p'] exists), else from X unless X is scaled (var['std']).
std::string report_of_dataset(const Dataset& d, const std::string& result_path, const std::string& made_by,
                              const std::vector<TimingStep>& timings, const std::vector<std::string>& warnings,
                              const ReportOptions& opt = {});

// The facts of a run a later `scurry report RESULT.h5ad` needs, stored in d.uns['scurry'] by
// `scurry run` before it writes: version, device, command, input and its shape, the filters
// (thresholds, cells and genes before and after), the warnings so far and the timings so far (run
// passes them only with --report: the rest is the same for two runs of one command, the timings are
// not, and two runs without --report write identical files).
struct RunInfo {
  std::string input, device, command;
  int64_t input_obs = -1, input_vars = -1;  // the input's shape (-1: unknown)
  std::vector<std::pair<std::string, double>> cell_thresholds;  // "min_genes" -> 200, ...
  std::vector<std::pair<std::string, double>> gene_thresholds;  // "min_cells" -> 3, ...
  int64_t genes_after_filter = -1;          // raw's genes (all genes that passed filter_genes)
};
void store_run_info(Dataset& d, const RunInfo& info, const std::vector<TimingStep>& timings,
                    const std::vector<std::string>& warnings);

}  // namespace scurry::report
