// scurry report RESULT -o OUT.html: the run report (src/report/report.hpp) of a result, an h5ad file
// or zarr store written by scurry run or by scanpy. The metadata (obs, var, obsm, uns, raw's var)
// are read whole; the expression matrix of all genes (raw/X, else X unless it is scaled) is streamed
// by row blocks, never held whole. Sections whose slots are absent say so.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "nmf/cnmf_steps.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timings.hpp"
#include "io/format.hpp"
#include "io/h5ad.hpp"
#include "io/zarr.hpp"
#include "nmf/cnmf_files.hpp"
#include "report/report.hpp"

namespace scurry::cli {

namespace {

struct ReportCmdOptions {
  std::string input, output;
  std::string cnmf_stats;  // NAME.k_selection_stats.df.npz (cNMF's) or a TSV of its columns
  report::ReportOptions report;
};

void make_report(const GlobalOptions& g, const ReportCmdOptions& o) {
  log::set_quiet(g.quiet);
  check_output_path(o.output, ".html", "-o/--output");
  std::error_code ec;
  if (!std::filesystem::exists(o.input, ec)) fail_input(o.input, "no such file or directory");
  const double t0 = Timings::wall_now();
  report::ReportInput in;
  if (!o.cnmf_stats.empty()) {  // read first: a bad file fails before the big read
    // cNMF's k_selection_stats.df.npz (or a TSV of its columns; nmf/cnmf_steps.hpp)
    const CnmfKSelectionStats t = read_k_selection_stats(o.cnmf_stats);
    for (size_t r = 0; r < t.k.size(); ++r) {
      in.cnmf_k.push_back(static_cast<double>(t.k[r]));
      in.cnmf_stability.push_back(t.stability[r]);
      in.cnmf_error.push_back(t.prediction_error[r]);
    }
    if (in.cnmf_k.empty()) fail_input(o.cnmf_stats, "the k-selection table has no rows");
    in.cnmf_source = o.cnmf_stats;
  }
  const Format f = detect_format(o.input);
  if (f != Format::h5ad && f != Format::zarr)
    fail_input(o.input, "scurry report reads an h5ad file or a zarr store (a result of scurry run or scanpy)");
  H5adReadOptions ro;
  ro.read_x = false, ro.read_layers = false, ro.read_raw_x = false;
  const Dataset d = f == Format::h5ad ? read_h5ad(o.input, ro) : read_zarr(o.input, ro);
  const H5adSummary sum = f == Format::h5ad ? summarize_h5ad(o.input) : summarize_zarr(o.input);
  bool has_raw_x = false, has_x = false;
  for (const auto& s : sum.slots) has_raw_x |= s.name == "raw/X", has_x |= s.name == "X";
  in.data = &d;
  in.result_path = o.input;
  in.made_by = "scurry report";
  std::unique_ptr<RowSource> src;
  auto reader = [&](const std::string& slot) -> std::unique_ptr<RowSource> {
    if (f == Format::h5ad) return std::make_unique<H5adRowReader>(o.input, slot);
    return std::make_unique<ZarrRowReader>(o.input, slot, g.context.threads);
  };
  if (has_raw_x && d.raw) {
    src = reader("raw/X"), in.expression_slot = "raw/X", in.expression_genes = d.raw->var.index;
  } else if (has_x && !d.var.has("std")) {  // a scaled X (var['std']: scanpy's pp.scale) is not expression
    src = reader("X"), in.expression_slot = "X", in.expression_genes = d.var.index;
  }
  in.expression = src.get();
  in.expression_log1p = d.uns.count("log1p") != 0;
  report::ReportOptions ropt = o.report;
  ropt.threads = g.context.threads;
  const std::string html = report::report_html(in, ropt);
  write_text_atomic(o.output, html);
  if (!log::quiet())
    std::printf("scurry report: %s -> %s (%.1f kB, %.2f s)\n", o.input.c_str(), o.output.c_str(),
                static_cast<double>(html.size()) / 1024.0, Timings::wall_now() - t0);
}

}  // namespace

void add_report_command(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<ReportCmdOptions>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Write the HTML report (one self-contained page of QC, HVG, PCA, UMAP, marker and timing plots) of a result");
  cmd->add_option("RESULT", o->input, "A result: an h5ad file or zarr store from scurry run or scanpy")->required();
  cmd->add_option("-o,--output", o->output, "Output .html file (written atomically)")->required();
  cmd->add_option("--top-genes", o->report.top_genes, "Highest expressed genes shown")->capture_default_str();
  cmd->add_option("--marker-genes", o->report.umap_marker_genes, "UMAP panels coloured by a top marker gene")
      ->capture_default_str();
  cmd->add_option("--cnmf-stats", o->cnmf_stats,
                  "cNMF's NAME.k_selection_stats.df.txt (scurry cnmf): add the k-selection plot (usages in obsm['cnmf_usages_k<K>'] are drawn on the UMAP by themselves)");
  cmd->callback([&g, o] { make_report(g, *o); });
}

}  // namespace scurry::cli
