#include "pp/preprocess.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/memory.hpp"
#include "core/matrix_view.hpp"
#include "exec/parallel.hpp"

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

// layers['counts'] without a second copy of the matrix (issue 19 point 5). Until the HVG subset the
// counts have X's sparsity (normalize_total and log1p change X's values in place), so only their
// values are kept beside X -- as uint16 when every one is an integer in [0, 65535], as counts are,
// else as float32 -- and the layer is made at the subset, for the kept genes only: the same matrix
// as copying X and subsetting the copy, at 2 bytes a nonzero instead of 8 (+ 8 for the subset).
struct CountValues {
  DType dtype = DType::f32;            // the counts' dtype (the layer is written with it)
  std::unique_ptr<uint16_t[]> small;   // the values, when all are integers in [0, 65535]
  std::vector<float> full;             // else a copy of them
  float at(int64_t p) const { return small ? static_cast<float>(small[static_cast<size_t>(p)]) : full[static_cast<size_t>(p)]; }
};

constexpr int64_t kValueBlock = int64_t{1} << 20;  // fixed blocks of values (any thread count: the same result)

CountValues save_count_values(const Context& ctx, const CsrF& x, DType dt) {
  CountValues c;
  c.dtype = dt;
  const int64_t nnz = x.nnz(), blocks = (nnz + kValueBlock - 1) / kValueBlock;
  const float* v = x.data.data();
  std::vector<uint8_t> fits(static_cast<size_t>(blocks), 0);
  parallel_for(ctx.threads(), blocks, [&](int64_t b) {
    bool ok = true;
    for (int64_t p = b * kValueBlock, e = std::min(nnz, p + kValueBlock); p < e; ++p)
      ok &= (v[p] >= 0.0f) & (v[p] <= 65535.0f) & (std::floor(v[p]) == v[p]);  // (NaN fails all three)
    fits[static_cast<size_t>(b)] = ok;
  });
  if (std::all_of(fits.begin(), fits.end(), [](uint8_t f) { return f != 0; })) {
    c.small.reset(new uint16_t[static_cast<size_t>(std::max<int64_t>(nnz, 1))]);  // filled below, no zero fill
    uint16_t* s = c.small.get();
    parallel_for(ctx.threads(), blocks, [&](int64_t b) {
      for (int64_t p = b * kValueBlock, e = std::min(nnz, p + kValueBlock); p < e; ++p) s[p] = static_cast<uint16_t>(v[p]);
    });
  } else {
    c.full = x.data;
  }
  return c;
}

// The row pointers of x restricted to the columns whose remap entry is >= 0.
std::vector<int64_t> kept_indptr(const Context& ctx, const CsrF& x, const RowBlocks& rb, const std::vector<int32_t>& remap) {
  std::vector<int64_t> len(static_cast<size_t>(x.n_rows) + 1, 0);
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    for (int64_t r = rb.begin(b); r < rb.end(b); ++r) {
      int64_t k = 0;
      for (int64_t p = x.indptr[r]; p < x.indptr[r + 1]; ++p) k += remap[static_cast<size_t>(x.indices[p])] >= 0;
      len[static_cast<size_t>(r) + 1] = k;
    }
  });
  for (size_t r = 1; r < len.size(); ++r) len[r] += len[r - 1];
  return len;
}

// Those columns of x (renumbered by remap; in order) with the values val(p) of x's entries p: a new
// matrix (x is left as it is), built in parallel over fixed row blocks.
template <class Val>
CsrF select_cols(const Context& ctx, const CsrF& x, const RowBlocks& rb, const std::vector<int32_t>& remap,
                 int64_t n_keep, const std::vector<int64_t>& indptr, Val val) {
  CsrF m;
  m.n_rows = x.n_rows, m.n_cols = n_keep;
  m.indptr = indptr;
  resize_large(m.indices, static_cast<size_t>(indptr.back()));
  resize_large(m.data, static_cast<size_t>(indptr.back()));
  int32_t* mi = m.indices.data();
  float* mv = m.data.data();
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    for (int64_t r = rb.begin(b); r < rb.end(b); ++r) {
      int64_t q = indptr[static_cast<size_t>(r)];
      const int64_t q_end = indptr[static_cast<size_t>(r) + 1];
      int64_t p = x.indptr[r];
      const int64_t p_end = x.indptr[r + 1];
      // Without a branch on whether a column is kept (a kept gene's place among the row's entries is
      // unpredictable: the branch missed on about one entry in five): every entry is written at q and
      // q advances only for kept ones, so a dropped entry's write is overwritten by the next kept
      // one. While q < q_end the write lands inside this row; once the row's kept entries are all
      // written the rest are only skipped (a write at q_end would be the next row's first entry,
      // which another thread may own).
      for (; p < p_end && q < q_end; ++p) {
        const int32_t j = remap[static_cast<size_t>(x.indices[p])];
        mi[q] = j;
        mv[q] = val(p);
        q += j >= 0 ? 1 : 0;
      }
    }
  });
  return m;
}

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
  // The HVG subset of a CSR X takes a new, small copy of X's kept genes (and the counts layer's,
  // from their saved values), so that the full matrices are let go: see CountValues.
  const std::string& flavor = o.hvg.flavor;
  const bool lean = std::holds_alternative<CsrF>(d.X.m) && o.subset_hvg && !skipped(o, "highly_variable_genes") &&
                    flavor != "seurat_v3" && flavor != "pearson_residuals" && !d.layers.count("counts");
  std::optional<CountValues> counts;
  if (o.counts_layer && !d.X.empty()) {
    if (lean) counts = save_count_values(ctx, d.X.csr_f(), d.X.dtype);
    else d.layers["counts"] = d.X;
  }
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
    if (lean) return;  // raw and the subset below, outside this step's time when they are written
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
  if (lean) {
    // raw = X of all genes, handed to early_write when there is one (which writes it and lets the
    // chain drop it), else kept; then X and the counts layer of the HVGs only.
    const auto& hv = d.var.boolean("highly_variable");
    std::vector<int64_t> keep;
    std::vector<int32_t> remap(hv.size(), -1);
    for (size_t g = 0; g < hv.size(); ++g)
      if (hv[g]) remap[g] = static_cast<int32_t>(keep.size()), keep.push_back(static_cast<int64_t>(g));
    bool raw_written = false;
    if (o.raw) {
      d.raw = std::make_shared<Dataset>();
      d.raw->var = d.var;
      raw_written = o.early_write && o.early_write("raw/X", d.X);  // (timed by the caller)
    }
    CsrF x, c;
    {
      Timings::Scope s = t.scope("subset");
      if (o.raw && !raw_written) d.raw->X = d.X;
      // The counts' subset first, so that their saved values go before X's subset is made.
      const CsrF& full = d.X.csr_f();
      const RowBlocks rb = row_blocks_by_nnz(full.indptr.data(), full.n_rows, int64_t{1} << 18);
      const std::vector<int64_t> ptr = kept_indptr(ctx, full, rb, remap);
      const int64_t nk = static_cast<int64_t>(keep.size());
      if (counts) c = select_cols(ctx, full, rb, remap, nk, ptr, [&](int64_t p) { return counts->at(p); });
      const DType ct = counts ? counts->dtype : DType::f32;
      counts.reset();
      x = select_cols(ctx, full, rb, remap, nk, ptr, [&](int64_t p) { return full.data[static_cast<size_t>(p)]; });
      const DType xt = d.X.dtype;
      d.X = Matrix();  // the full matrix let go (raw has its own copy, or is in the output)
      d.subset_vars(keep);  // var (and any layer of the input)
      d.X = Matrix(std::move(x), xt);
      s.set_extra(shape(d));
      if (o.counts_layer) {
        Matrix layer(std::move(c), ct);
        if (!(o.early_write && o.early_write("layers/counts", layer))) d.layers["counts"] = std::move(layer);
      }
    }
  }
  run("scale", [&] { scale(ctx, d, o.scale); });
  run("pca", [&] { pca(ctx, d, o.pca); });
}

}  // namespace scurry
