#include "pp/preprocess.hpp"

#include <algorithm>
#include <optional>

#include "core/error.hpp"
#include "core/log.hpp"

namespace scurry {

std::vector<std::string> qc_var_names(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& v : names)
    if (!v.empty() && v != "none") out.push_back(v);
  return out;
}

void mark_qc_vars(Dataset& d, const std::vector<std::string>& names) {
  for (const auto& v : qc_var_names(names)) {
    if (v == "mt") mark_gene_prefix(d, "mt", {"MT-", "mt-", "Mt-"});
    else if (v == "ribo") mark_gene_prefix(d, "ribo", {"RPS", "RPL", "Rps", "Rpl", "rps", "rpl"});
    else if (v == "hb") mark_gene_prefix(d, "hb", {"HBA", "HBB", "HBD", "HBE", "HBG", "HBM", "HBQ", "HBZ", "Hba", "Hbb"});
    else if (!d.var.has(v))
      throw InputError("--qc-vars " + v + ": not a known gene set (mt, ribo, hb) and not a var column of the input");
  }
}

namespace {
bool skipped(const PreprocessOptions& o, const std::string& step) {
  return std::find(o.skip.begin(), o.skip.end(), step) != o.skip.end();
}
std::string shape(const Dataset& d) {
  return detail::concat(d.n_obs(), " x ", d.n_vars(), d.X.is_sparse() ? detail::concat(", nnz ", d.X.nnz()) : "");
}
}  // namespace

void preprocess(Context& ctx, Dataset& d, const PreprocessOptions& o, Timings* timings) {
  if (ctx.backend() == Backend::cuda) return preprocess_gpu(ctx, d, o, timings);
  Timings local;
  Timings& t = timings ? *timings : local;
  auto run = [&](const std::string& name, auto&& fn) {
    if (skipped(o, name)) return;
    auto scope = t.scope(name);
    fn();
    scope.set_extra(shape(d));
  };
  run("qc", [&] {
    mark_qc_vars(d, o.qc_vars);
    QcOptions q = o.qc;
    q.qc_vars = qc_var_names(o.qc_vars);
    calculate_qc_metrics(ctx, d, q);
  });
  // The filters read QC's per-cell and per-gene sums when QC ran on X (no second pass over the data;
  // QC counts entries != 0 where the filters count entries > 0: the same for counts, which `scurry run`
  // checks to be non-negative). filter_genes reuses QC's gene sums only when no cell was removed.
  const bool qc_ran = !skipped(o, "qc") && o.qc.layer.empty() && o.qc.expr_type == "counts" && o.qc.var_type == "genes";
  const bool single = std::holds_alternative<CsrF>(d.X.m) || std::holds_alternative<DenseF>(d.X.m);
  bool cells_removed = false;
  run("filter_cells", [&] {
    if (!qc_ran) {
      cells_removed = filter_cells(ctx, d, o.filter_cells).kept.size() != static_cast<size_t>(d.n_obs());
      return;
    }
    const auto& ng = d.obs.numeric("n_genes_by_counts");
    FilterCellsResult r = filter_cells_from_stats(std::vector<int64_t>(ng.begin(), ng.end()), d.obs.numeric("total_counts"),
                                                  o.filter_cells, &ctx.comm());
    cells_removed = r.kept.size() != r.keep.size();
    apply_filter_cells(d, r, single);
  });
  {
    // Cells removed on any rank: every rank takes the same filter_genes path below.
    int64_t removed = cells_removed ? 1 : 0;
    ctx.comm().allreduce_sum(&removed, 1);
    cells_removed = removed > 0;
  }
  run("filter_genes", [&] {
    if (!qc_ran || cells_removed) {
      filter_genes(ctx, d, o.filter_genes);
      return;
    }
    const auto& nc = d.var.numeric("n_cells_by_counts");
    FilterGenesResult r = filter_genes_from_stats(std::vector<int64_t>(nc.begin(), nc.end()), d.var.numeric("total_counts"),
                                                  o.filter_genes);
    apply_filter_genes(d, r, single);
  });
  if (o.counts_layer && !d.X.empty()) d.layers["counts"] = d.X;
  if (!skipped(o, "normalize_total") && !skipped(o, "log1p")) {
    // One pass: normalize_total and log1p fused (the same bits as the two steps apart).
    run("normalize_total+log1p", [&] { normalize_log1p(ctx, d, o.normalize, o.log1p); });
  } else {
    run("normalize_total", [&] { normalize_total(ctx, d, o.normalize); });
    run("log1p", [&] { log1p(ctx, d, o.log1p); });
  }
  run("highly_variable_genes", [&] {
    HvgOptions h = o.hvg;
    if ((h.flavor == "seurat_v3" || h.flavor == "pearson_residuals") && h.layer.empty()) {
      if (!d.layers.count("counts"))
        throw InputError("highly_variable_genes flavor " + h.flavor + " needs the counts: keep layers['counts']");
      h.layer = "counts";
    }
    h.subset = false;
    highly_variable_genes(ctx, d, h);
    std::vector<int64_t> keep;
    if (o.subset_hvg) {
      const auto& hv = d.var.boolean("highly_variable");
      for (size_t g = 0; g < hv.size(); ++g)
        if (hv[g]) keep.push_back(static_cast<int64_t>(g));
    }
    if (o.raw) {
      d.raw = std::make_shared<Dataset>();
      d.raw->var = d.var;
      if (o.subset_hvg) {
        // raw takes X itself (no copy of every nonzero: 1.4 GB at 100,000 cells), X becomes a copy
        // of its HVG columns (the same entries, in the same order, as subsetting a copy in place).
        d.raw->X = std::move(d.X);
        d.X = Matrix();
        d.subset_vars(keep);
        d.X = take_cols(d.raw->X, keep);
        return;
      }
      d.raw->X = d.X;
    }
    if (o.subset_hvg) d.subset_vars(keep);
  });
  run("scale", [&] { scale(ctx, d, o.scale); });
  run("pca", [&] { pca(ctx, d, o.pca); });
}

}  // namespace scurry
