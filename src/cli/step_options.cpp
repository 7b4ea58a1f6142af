#include "cli/step_options.hpp"

#include <cmath>
#include <cstdlib>

#include "core/error.hpp"

namespace scurry::cli {

namespace {

template <class T>
void opt_value(CLI::App& cmd, const std::string& name, std::optional<T>& target, const std::string& help) {
  auto* o = cmd.add_option_function<T>(name, [&target](const T& v) { target = v; }, help);
  if (target) o->default_str(CLI::detail::to_string(*target));
}

}  // namespace

void add_knn_shard_option(CLI::App& cmd, KnnShard& target, const std::string& when) {
  cmd.add_option_function<std::string>(
         "--knn-shard", [&target](const std::string& v) { target = parse_knn_shard(v, "--knn-shard"); },
         when + ": the kNN splits the queries over the GPUs (each holds the whole index) or the index (each "
                "holds a share of the rows or IVF lists; per-query top-k lists merged); the same result")
      ->check(CLI::IsMember({"queries", "index"}))
      ->default_str(knn_shard_name(target));
}

size_t parse_size(const std::string& s, const char* option) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  std::string unit(end ? end : "");
  double mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KB" || unit == "KiB") mult = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TiB") mult = 1024.0 * 1024 * 1024 * 1024;
  else mult = -1;
  if (end == s.c_str() || mult < 0 || !(v >= 0) || !std::isfinite(v))
    throw InputError(std::string(option) + " " + s + ": not a size (give bytes or a number with K, M, G or T)");
  return static_cast<size_t>(v * mult);
}

void add_qc_options(CLI::App& cmd, PreprocessOptions& o) {
  cmd.add_option("--qc-vars", o.qc_vars,
                 "Gene sets for QC: mt (names starting MT-/mt-), ribo (RPS/RPL), hb, or a bool var column; "
                 "'none' for no set")
      ->delimiter(',')
      ->default_str(CLI::detail::join(o.qc_vars, ","));
  // scanpy's percent_top=None: 'none' leaves the pct_counts_in_top_n_genes columns (and their work) out.
  cmd.add_option_function<std::vector<std::string>>(
         "--percent-top",
         [&o](const std::vector<std::string>& v) {
           o.qc.percent_top.clear();
           if (v.size() == 1 && (v[0] == "none" || v[0] == "None")) return;
           for (const std::string& t : v) {
             size_t used = 0;
             long long n = 0;
             try {
               n = std::stoll(t, &used);
             } catch (const std::exception&) {
               used = 0;
             }
             if (used == 0 || used != t.size())
               throw CLI::ValidationError("--percent-top", "'" + t + "' is not a rank; give integers, e.g. 50,100, or none");
             o.qc.percent_top.push_back(n);
           }
         },
         "Ranks n for pct_counts_in_top_n_genes ('none': no such columns, scanpy's percent_top=None)")
      ->delimiter(',')
      ->default_str(CLI::detail::join(o.qc.percent_top, ","));
}

void add_filter_cells_options(CLI::App& cmd, FilterCellsOptions& o) {
  opt_value(cmd, "--min-genes", o.min_genes, "filter_cells: keep cells with at least this many genes expressed");
  opt_value(cmd, "--max-genes", o.max_genes, "filter_cells: keep cells with at most this many genes expressed");
  opt_value(cmd, "--min-counts", o.min_counts, "filter_cells: keep cells with at least this many counts");
  opt_value(cmd, "--max-counts", o.max_counts, "filter_cells: keep cells with at most this many counts");
}

void add_filter_genes_options(CLI::App& cmd, FilterGenesOptions& o, bool prefix_counts) {
  opt_value(cmd, "--min-cells", o.min_cells, "filter_genes: keep genes expressed in at least this many cells");
  opt_value(cmd, "--max-cells", o.max_cells, "filter_genes: keep genes expressed in at most this many cells");
  const std::string p = prefix_counts ? "--gene-" : "--";
  opt_value(cmd, p + "min-counts", o.min_counts, "filter_genes: keep genes with at least this many counts");
  opt_value(cmd, p + "max-counts", o.max_counts, "filter_genes: keep genes with at most this many counts");
}

void add_normalize_options(CLI::App& cmd, NormalizeTotalOptions& o) {
  cmd.add_option_function<std::string>(
         "--target-sum",
         [&o](const std::string& s) {
           if (s == "median" || s == "none") {
             o.target_sum.reset();
             return;
           }
           char* end = nullptr;
           const double v = std::strtod(s.c_str(), &end);
           if (end == s.c_str() || *end) throw InputError("--target-sum " + s + ": give a number or 'median'");
           o.target_sum = v;
         },
         "normalize_total: every cell's total after normalisation ('median': the median of the totals)")
      ->default_str(o.target_sum ? CLI::detail::to_string(*o.target_sum) : "median");
  cmd.add_flag("--exclude-highly-expressed", o.exclude_highly_expressed,
               "normalize_total: leave very highly expressed genes out of the totals");
  cmd.add_option("--max-fraction", o.max_fraction, "normalize_total: the fraction that makes a gene highly expressed")
      ->capture_default_str();
  cmd.add_option("--key-added", o.key_added, "normalize_total: obs column for the totals used");
}

void add_log1p_options(CLI::App& cmd, Log1pOptions& o) {
  opt_value(cmd, "--base", o.base, "log1p: base of the logarithm (default: natural)");
}

void add_hvg_options(CLI::App& cmd, HvgOptions& o) {
  cmd.add_option("--flavor", o.flavor, "highly_variable_genes: seurat, cell_ranger, seurat_v3 or pearson_residuals")
      ->check(CLI::IsMember({"seurat", "cell_ranger", "seurat_v3", "pearson_residuals"}))
      ->capture_default_str();
  cmd.add_option_function<int64_t>(
         "--n-top-genes",
         [&o](const int64_t& v) {
           if (v <= 0) o.n_top_genes.reset();
           else o.n_top_genes = v;
         },
         "highly_variable_genes: number of genes to keep (0: select by the mean/dispersion cut-offs)")
      ->default_str(o.n_top_genes ? std::to_string(*o.n_top_genes) : "0");
  cmd.add_option("--min-mean", o.min_mean, "highly_variable_genes: mean cut-off (low)")->capture_default_str();
  cmd.add_option("--max-mean", o.max_mean, "highly_variable_genes: mean cut-off (high)")->capture_default_str();
  cmd.add_option("--min-disp", o.min_disp, "highly_variable_genes: dispersion cut-off (low)")->capture_default_str();
  cmd.add_option("--max-disp", o.max_disp, "highly_variable_genes: dispersion cut-off (high)")->capture_default_str();
  cmd.add_option("--n-bins", o.n_bins, "highly_variable_genes: bins of the mean (seurat, cell_ranger)")->capture_default_str();
  cmd.add_option("--span", o.span, "highly_variable_genes: LOESS span (seurat_v3)")->capture_default_str();
  cmd.add_option("--batch-key", o.batch_key, "highly_variable_genes: obs column of batches");
  cmd.add_option("--theta", o.theta, "highly_variable_genes: overdispersion (pearson_residuals)")->capture_default_str();
  opt_value(cmd, "--clip", o.clip, "highly_variable_genes: clip for residuals (pearson_residuals; default sqrt(n))");
}

void add_scale_options(CLI::App& cmd, ScaleOptions& o) {
  cmd.add_option("--zero-center", o.zero_center, "scale: subtract each gene's mean (true/false)")->capture_default_str();
  cmd.add_option_function<double>(
         "--max-value",
         [&o](const double& v) {
           if (v <= 0) o.max_value.reset();
           else o.max_value = v;
         },
         "scale: clip scaled values above this (0: no clipping)")
      ->default_str(o.max_value ? CLI::detail::to_string(*o.max_value) : "0");
  cmd.add_flag("--clip-below", o.clip_below, "scale: also clip below -max_value (scanpy >= 1.10)");
}

void add_pca_options(CLI::App& cmd, PcaOptions& o) {
  opt_value(cmd, "--n-comps", o.n_comps, "pca: number of components");
  cmd.add_option("--svd-solver", o.svd_solver, "pca: auto, gram (exact), arpack (= gram) or randomized")
      ->check(CLI::IsMember({"auto", "gram", "arpack", "randomized"}))
      ->capture_default_str();
  cmd.add_option("--random-state", o.random_state, "pca: seed of the randomized solver")->capture_default_str();
}

void add_neighbors_options(CLI::App& cmd, NeighborsOptions& o) {
  cmd.add_option("--n-neighbors", o.n_neighbors, "neighbors: neighbours per cell, itself included")->capture_default_str();
  opt_value(cmd, "--n-pcs", o.n_pcs, "neighbors: use the first n_pcs columns of use_rep (default: all)");
  cmd.add_option("--use-rep", o.use_rep, "neighbors: obsm key of the representation (default X_pca, else X)");
  cmd.add_option("--metric", o.metric, "neighbors: euclidean or cosine")
      ->check(CLI::IsMember({"euclidean", "cosine"}))
      ->capture_default_str();
  cmd.add_option("--knn-algorithm", o.algorithm,
                 "neighbors: exact, ivf (IVF-Flat, approximate), hnsw (approximate; on the GPU the same as ivf) or "
                 "auto (CPU: exact up to 8192 cells, ivf above; GPU: exact up to 500,000 cells, ivf above)")
      ->check(CLI::IsMember({"exact", "ivf", "hnsw", "auto"}))
      ->capture_default_str();
}

void add_umap_options(CLI::App& cmd, UmapOptions& o, bool prefixed) {
  cmd.add_option("--min-dist", o.min_dist, "umap: minimum distance between embedded points")->capture_default_str();
  cmd.add_option("--spread", o.spread, "umap: scale of the embedded points")->capture_default_str();
  cmd.add_option("--n-components", o.n_components, "umap: embedding dimensions")->capture_default_str();
  opt_value(cmd, "--maxiter", o.maxiter, "umap: epochs (default 500 up to 10,000 cells, else 200)");
  cmd.add_option("--negative-sample-rate", o.negative_sample_rate, "umap: negative samples per edge")->capture_default_str();
  cmd.add_option("--init-pos", o.init_pos, "umap: spectral, random or an obsm key")->capture_default_str();
  cmd.add_option(prefixed ? "--umap-random-state" : "--random-state", o.random_state, "umap: seed")->capture_default_str();
  cmd.add_option(prefixed ? "--umap-sgd" : "--sgd", o.sgd,
                 "umap: batched (every cell moved once per epoch by the sum of its edges' moves: parallel, the same "
                 "bits for any thread count and on the GPU run to run) or sequential (umap-learn's edge order, one "
                 "CPU thread)")
      ->check(CLI::IsMember({"batched", "sequential"}))
      ->capture_default_str();
}

void add_leiden_options(CLI::App& cmd, LeidenOptions& o, bool prefixed) {
  if (prefixed) {
    cmd.add_option("--resolution", o.resolution, "leiden: higher gives more, smaller clusters")->capture_default_str();
  } else {
    // Several resolutions in one call: --resolution 0.5,1.0,2.0 writes leiden_0.5, leiden_1.0, ...
    cmd.add_option_function<std::vector<double>>(
           "--resolution",
           [&o](const std::vector<double>& v) {
             if (v.size() == 1) {
               o.resolution = v[0];
               o.resolutions.clear();
             } else {
               o.resolutions = v;
             }
           },
           "leiden: higher gives more, smaller clusters; several (0.5,1.0,2.0) write obs <key-added>_<resolution>")
        ->delimiter(',')
        ->default_str(std::to_string(o.resolution));
    cmd.add_option_function<std::string>(
        "--restrict-to",
        [&o](const std::string& v) {
          const size_t colon = v.find(':');
          if (colon == std::string::npos || colon == 0 || colon + 1 == v.size())
            fail_input("--restrict-to", "'", v, "' is not KEY:CAT[,CAT...] (an obs key and its categories)");
          o.restrict_key = v.substr(0, colon);
          o.restrict_categories.clear();
          std::string rest = v.substr(colon + 1);
          size_t start = 0;
          while (start <= rest.size()) {
            const size_t comma = rest.find(',', start);
            const std::string c = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
            if (c.empty()) fail_input("--restrict-to", "'", v, "' has an empty category");
            o.restrict_categories.push_back(c);
            if (comma == std::string::npos) break;
            start = comma + 1;
          }
        },
        "leiden: KEY:CAT[,CAT...]: cluster only the cells of those categories of obs KEY (labels \"CAT,<new>\"; "
        "key leiden_R by default)");
    cmd.add_option("--obsp", o.obsp, "leiden: obsp key of the graph (instead of the neighbours' connectivities)");
  }
  cmd.add_option(prefixed ? "--leiden-flavor" : "--flavor", o.flavor,
                 "leiden: leidenalg (scanpy's default) or igraph (scanpy 1.10's flavor='igraph'; with --n-iterations 2 "
                 "its future default)")
      ->capture_default_str()
      ->check(CLI::IsMember({"leidenalg", "igraph"}));
  cmd.add_option(prefixed ? "--leiden-directed" : "--directed", o.directed,
                 "leiden: treat the graph as directed (default: true for leidenalg, false for igraph; igraph needs false)");
  cmd.add_option(prefixed ? "--leiden-use-weights" : "--use-weights", o.use_weights, "leiden: use the edge weights")
      ->capture_default_str();
  cmd.add_option("--n-iterations", o.n_iterations, "leiden: iterations (negative: until stable)")->capture_default_str();
  cmd.add_option(prefixed ? "--leiden-random-state" : "--random-state", o.random_state, "leiden: seed")
      ->capture_default_str();
}

void add_rank_genes_groups_options(CLI::App& cmd, RankGenesGroupsOptions& o, std::string& tsv, bool in_run,
                                   bool* enabled) {
  const std::string pre = in_run ? "--markers-" : "--";
  const auto methods = CLI::IsMember({"t-test", "t-test_overestim_var", "wilcoxon", "logreg"});
  if (in_run) {
    cmd.add_option("--markers", o.method,
                   "End with rank_genes_groups (uns['rank_genes_groups']) by this method: t-test, "
                   "t-test_overestim_var, wilcoxon or logreg")
        ->check(methods)
        ->capture_default_str();
    if (enabled) cmd.add_flag("!--no-markers", *enabled, "Do not end with rank_genes_groups");
  } else {
    cmd.add_option("--method", o.method, "rank_genes_groups: t-test, t-test_overestim_var, wilcoxon or logreg")
        ->check(methods)
        ->capture_default_str();
  }
  cmd.add_option(pre + "groupby", o.groupby, "rank_genes_groups: the obs column of groups")->capture_default_str();
  cmd.add_option(pre + "groups", o.groups, "rank_genes_groups: test only these groups (default: all)")->delimiter(',');
  cmd.add_option(pre + "reference", o.reference, "rank_genes_groups: 'rest' or the group to compare with")
      ->capture_default_str();
  opt_value(cmd, pre + "n-genes", o.n_genes, "rank_genes_groups: genes per group in the tables (default: all)");
  cmd.add_flag(pre + "rankby-abs", o.rankby_abs, "rank_genes_groups: rank genes by |score|");
  cmd.add_flag(pre + "pts", o.pts, "rank_genes_groups: also the fraction of cells expressing each gene (pts, pts_rest)");
  cmd.add_flag(pre + "tie-correct", o.tie_correct, "rank_genes_groups: wilcoxon's tie-corrected variance");
  cmd.add_option(pre + "corr-method", o.corr_method, "rank_genes_groups: benjamini-hochberg or bonferroni")
      ->check(CLI::IsMember({"benjamini-hochberg", "bonferroni"}))
      ->capture_default_str();
  cmd.add_flag_function(
      pre + "use-raw,!" + pre + "no-use-raw", [&o](int64_t n) { o.use_raw = n > 0; },
      "rank_genes_groups: test raw (default: when the input has raw, as scanpy)");
  cmd.add_option(pre + "layer", o.layer, "rank_genes_groups: test this layer instead of X");
  cmd.add_option(pre + "mask-var", o.mask_var, "rank_genes_groups: test only the genes of this boolean var column");
  cmd.add_option(pre + "key-added", o.key_added, "rank_genes_groups: the uns key written")->capture_default_str();
  cmd.add_option(in_run ? "--markers-tsv" : "--tsv", tsv,
                 "Also write the table of sc.get.rank_genes_groups_df (group, names, scores, logfoldchanges, pvals, "
                 "pvals_adj[, pct_nz_group, pct_nz_reference]) to this file");
}

void add_aggregate_options(CLI::App& cmd, AggregateOptions& o) {
  cmd.add_option("--by", o.by, "aggregate: obs columns to group the cells by (comma-separated)")
      ->delimiter(',')
      ->required();
  cmd.add_option("--func", o.func, "aggregate: sum, mean, count_nonzero and/or var (comma-separated), one layer each")
      ->delimiter(',')
      ->check(CLI::IsMember({"sum", "mean", "count_nonzero", "var"}))
      ->required();
  cmd.add_option("--mask", o.mask, "aggregate: only the cells where this boolean obs column is true");
  cmd.add_option("--dof", o.dof, "aggregate: var's delta degrees of freedom")->capture_default_str();
  cmd.add_option("--layer", o.layer, "aggregate: this layer instead of X");
}

void add_preprocess_options(CLI::App& cmd, PreprocessOptions& o) {
  add_qc_options(cmd, o);
  add_filter_cells_options(cmd, o.filter_cells);
  add_filter_genes_options(cmd, o.filter_genes, true);
  add_normalize_options(cmd, o.normalize);
  add_log1p_options(cmd, o.log1p);
  add_hvg_options(cmd, o.hvg);
  add_scale_options(cmd, o.scale);
  add_pca_options(cmd, o.pca);
  cmd.add_option("--skip", o.skip,
                 "Steps to leave out: qc, filter_cells, filter_genes, normalize_total, log1p, "
                 "highly_variable_genes, scale, pca (CPU only)")
      ->delimiter(',')
      ->check(CLI::IsMember({"qc", "filter_cells", "filter_genes", "normalize_total", "log1p",
                             "highly_variable_genes", "scale", "pca"}));
  cmd.add_flag("!--no-raw", o.raw, "Do not keep the log-normalised matrix of all genes in raw");
  cmd.add_flag("!--no-counts-layer", o.counts_layer, "Do not keep the filtered counts in layers['counts']");
  cmd.add_flag("!--no-subset-hvg", o.subset_hvg, "Scale and PCA on all genes (PCA then uses the HVG mask)");
}

}  // namespace scurry::cli
