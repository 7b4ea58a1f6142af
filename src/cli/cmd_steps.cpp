// scurry <step> IN -o OUT.h5ad: each preprocessing step alone (read, the step on the CPU, write), with
// the same option names as in `scurry run`.
#include <functional>
#include <memory>

#include "cli/commands.hpp"
#include "cli/step_options.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/h5ad.hpp"
#include "io/read.hpp"
#include "tl/score_genes.hpp"

namespace scurry::cli {

namespace {

struct StepCommand {
  std::string input, output;
  ReadOptions read;
  PreprocessOptions pp;
  bool counts_layer = false;  // --counts-layer: layers['counts'] = the step's input X
  bool keep_raw = false;      // --keep-raw: raw = X and var after the step (before an HVG --subset)
};

// adata.raw = adata: X and var (and varm) as they are now.
void keep_raw(Dataset& d) {
  d.settle();
  d.raw = std::make_shared<Dataset>();
  d.raw->X = d.X;
  d.raw->var = d.var;
  d.raw->varm = d.varm;
}

void add_step(CLI::App& app, GlobalOptions& g, const std::string& name, const std::string& help,
              const std::function<void(CLI::App&, PreprocessOptions&)>& bind,
              const std::function<void(Context&, Dataset&, const PreprocessOptions&)>& run) {
  auto o = std::make_shared<StepCommand>();
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->add_option("IN", o->input, "Input: an h5ad file, a 10x .h5 file or a 10x mtx directory")->required();
  cmd->add_option("-o,--output", o->output, "Output .h5ad file (written atomically)")->required();
  bind(*cmd, o->pp);
  cmd->add_flag("--counts-layer", o->counts_layer,
                "Keep this step's input X in layers['counts'] (as `adata.layers['counts'] = adata.X.copy()` before it)");
  cmd->add_flag("--keep-raw", o->keep_raw,
                "Keep X and var after this step in raw (`adata.raw = adata`; highly-variable-genes --subset: before the "
                "subset, so raw holds every gene)");
  cmd->callback([&g, o, run, name] {
    log::set_quiet(g.quiet);
    check_output_path(o->output, ".h5ad", "-o/--output");
    // The output keeps every cell and gene of the input, but for the filters and --subset.
    const bool shrinks = name.rfind("filter-", 0) == 0 || (name == "highly-variable-genes" && o->pp.hvg.subset);
    check_free_space(o->output, input_bytes(o->input), !shrinks);
    Context ctx = make_context(g);
    Dataset d = read_any(o->input, o->read);
    if (ctx.backend() == Backend::cuda) {
      log::info(name + " runs on the CPU (single steps are CPU steps; `scurry run --device gpu` runs the chain on the GPU)");
      ctx = Context::cpu(g.context.threads);
    }
    d.settle();
    if (o->counts_layer) {
      if (d.X.empty()) fail_input("--counts-layer", "the input has no X to keep");
      d.layers["counts"] = d.X;
    }
    if (o->keep_raw && name == "highly-variable-genes" && o->pp.hvg.subset) {
      // as the tutorial (and `scurry run`): HVG, raw = every gene, then the subset
      PreprocessOptions p = o->pp;
      p.hvg.subset = false;
      run(ctx, d, p);
      keep_raw(d);
      std::vector<int64_t> keep;
      const auto& hv = d.var.boolean("highly_variable");
      for (size_t j = 0; j < hv.size(); ++j)
        if (hv[j]) keep.push_back(static_cast<int64_t>(j));
      d.subset_vars(keep);
    } else {
      run(ctx, d, o->pp);
      if (o->keep_raw) keep_raw(d);
    }
    make_parent_dirs(o->output);
    write_h5ad(d, o->output);
    log::info("wrote " + o->output);
  });
}

template <class Opt>
void add_graph_step(CLI::App& app, GlobalOptions& g, const std::string& name, const std::string& help,
                    const std::function<void(CLI::App&, Opt&)>& bind,
                    const std::function<void(Context&, Dataset&, const Opt&)>& run) {
  struct Cmd {
    std::string input, output;
    ReadOptions read;
    Opt opt;
  };
  auto o = std::make_shared<Cmd>();
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->add_option("IN", o->input, "Input: an h5ad file (after pca / neighbors)")->required();
  cmd->add_option("-o,--output", o->output, "Output .h5ad file (written atomically)")->required();
  bind(*cmd, o->opt);
  cmd->callback([&g, o, run] {
    log::set_quiet(g.quiet);
    check_output_path(o->output, ".h5ad", "-o/--output");
    check_free_space(o->output, input_bytes(o->input), true);
    Context ctx = make_context(g);
    Dataset d = read_any(o->input, o->read);
    run(ctx, d, o->opt);
    make_parent_dirs(o->output);
    write_h5ad(d, o->output);
    log::info("wrote " + o->output);
  });
}

// A step's contexts: with --gpus, the other GPUs' contexts first (making one selects its device on
// this thread), the main one (the first listed GPU) last; fn(main, every context, main first).
void with_step_contexts(const GlobalOptions& g, const std::function<void(Context&, const std::vector<Context*>&)>& fn) {
  const std::vector<int> devices = selected_gpus(g);
  GlobalOptions gm = g;
  if (!devices.empty()) gm.context.cuda.device = devices[0];
  GpuContexts extra = make_extra_gpu_contexts(gm, devices);
  Context ctx = make_context(gm);
  fn(ctx, extra.with_main(ctx));
}

void add_rank_genes_groups_command(CLI::App& app, GlobalOptions& g) {
  struct Cmd {
    std::string input, output, tsv;
    ReadOptions read;
    RankGenesGroupsOptions opt;
  };
  auto o = std::make_shared<Cmd>();
  o->opt.groupby = "leiden";
  CLI::App* cmd = app.add_subcommand("rank-genes-groups",
                                     "rank_genes_groups: marker genes of each group (uns rank_genes_groups)");
  cmd->add_option("IN", o->input, "Input: an h5ad file with the groups in obs (after leiden)")->required();
  cmd->add_option("-o,--output", o->output, "Output .h5ad file (written atomically)")->required();
  add_rank_genes_groups_options(*cmd, o->opt, o->tsv, false);
  cmd->add_option("--gpus", g.gpus, "With --device gpu: share the genes between these GPUs (all, a count N, or 0,2)");
  cmd->callback([&g, o] {
    log::set_quiet(g.quiet);
    check_output_path(o->output, ".h5ad", "-o/--output");
    if (!o->tsv.empty()) check_output_path(o->tsv, "", "--tsv");
    check_free_space(o->output, input_bytes(o->input), true);
    // --device gpu: on the GPU (--gpus: the genes shared between several)
    with_step_contexts(g, [&](Context& ctx, const std::vector<Context*>& gpus) {
      Dataset d = read_any(o->input, o->read);
      rank_genes_groups_inplace(d, o->opt, ctx, gpus);
      make_parent_dirs(o->output);
      write_h5ad(d, o->output);
      if (!o->tsv.empty()) write_text_atomic(o->tsv, rank_genes_groups_tsv(rank_genes_groups_df(d, o->opt.key_added)));
    });
    log::info("wrote " + o->output);
  });
}

void add_aggregate_command(CLI::App& app, GlobalOptions& g) {
  struct Cmd {
    std::string input, output;
    ReadOptions read;
    AggregateOptions opt;
  };
  auto o = std::make_shared<Cmd>();
  CLI::App* cmd = app.add_subcommand("aggregate",
                                     "aggregate: pseudobulk of the cells by obs columns (sc.get.aggregate's AnnData)");
  cmd->add_option("IN", o->input, "Input: an h5ad file, a 10x .h5 file or a 10x mtx directory")->required();
  cmd->add_option("-o,--output", o->output, "Output .h5ad file: one row per group, a layer per function, no X")
      ->required();
  add_aggregate_options(*cmd, o->opt);
  cmd->add_option("--gpus", g.gpus, "With --device gpu: share the genes between these GPUs (all, a count N, or 0,2)");
  cmd->callback([&g, o] {
    log::set_quiet(g.quiet);
    check_output_path(o->output, ".h5ad", "-o/--output");
    // --device gpu: the per-group reductions on the GPU (--gpus: the genes shared between several)
    int64_t n_groups = 0;
    with_step_contexts(g, [&](Context& ctx, const std::vector<Context*>& gpus) {
      const Dataset d = read_any(o->input, o->read);
      const Dataset out = aggregate(d, o->opt, ctx, gpus);
      make_parent_dirs(o->output);
      H5adWriteOptions w;
      w.allow_no_x = true;  // as sc.get.aggregate: X is None
      write_h5ad(out, o->output, w);
      n_groups = out.n_obs();
    });
    log::info("wrote " + o->output + " (" + std::to_string(n_groups) + " groups)");
  });
}

// scurry score-genes / score-genes-cell-cycle: sc.tl.score_genes (obs[--score-name]) and
// sc.tl.score_genes_cell_cycle (obs S_score, G2M_score, phase); on the GPU with --device gpu.
void add_score_genes_commands(CLI::App& app, GlobalOptions& g) {
  struct Cmd {
    std::string input, output;
    ReadOptions read;
    ScoreGenesOptions opt;
    std::vector<std::string> s_genes, g2m_genes;
    int64_t random_state = 0;
  };
  for (bool cycle : {false, true}) {
    auto o = std::make_shared<Cmd>();
    CLI::App* cmd = app.add_subcommand(
        cycle ? "score-genes-cell-cycle" : "score-genes",
        cycle ? "score_genes_cell_cycle: S_score, G2M_score and phase in obs (Tirosh et al. 2016's genes by default)"
              : "score_genes: a gene set's score per cell in obs (its mean minus that of control genes)");
    cmd->add_option("IN", o->input, "Input: an h5ad file (log-normalised values)")->required();
    cmd->add_option("-o,--output", o->output, "Output .h5ad file (written atomically)")->required();
    if (cycle) {
      cmd->add_option("--s-genes", o->s_genes, "S phase genes (comma-separated; default Tirosh et al.'s)")->delimiter(',');
      cmd->add_option("--g2m-genes", o->g2m_genes, "G2M phase genes (comma-separated; default Tirosh et al.'s)")
          ->delimiter(',');
    } else {
      cmd->add_option("--genes", o->opt.gene_list, "score_genes: the gene set (comma-separated)")
          ->delimiter(',')
          ->required();
      cmd->add_option("--ctrl-size", o->opt.ctrl_size, "score_genes: control genes drawn per expression bin")
          ->capture_default_str();
      cmd->add_option("--score-name", o->opt.score_name, "score_genes: the obs column written")->capture_default_str();
    }
    cmd->add_option("--gene-pool", o->opt.gene_pool, "score_genes: draw the controls from these genes (default all)")
        ->delimiter(',');
    cmd->add_option("--n-bins", o->opt.n_bins, "score_genes: expression bins of the genes")->capture_default_str();
    cmd->add_option("--random-state", o->random_state, "score_genes: numpy seed of the control genes' draw")
        ->check(CLI::Range(int64_t{0}, int64_t{4294967295}))
        ->capture_default_str();
    cmd->add_flag_function(
        "--use-raw,!--no-use-raw", [o](int64_t n) { o->opt.use_raw = n > 0; },
        "score_genes: score raw (default: when the input has raw, as scanpy)");
    cmd->add_option("--gpus", g.gpus,
                    "With --device gpu: share the genes' sums and the cells' scores between these GPUs (all, a count N, or 0,2)");
    cmd->callback([&g, o, cycle] {
      log::set_quiet(g.quiet);
      check_output_path(o->output, ".h5ad", "-o/--output");
      o->opt.random_state = static_cast<uint32_t>(o->random_state);
      with_step_contexts(g, [&](Context& ctx, const std::vector<Context*>& gpus) {
        Dataset d = read_any(o->input, o->read);
        if (cycle)
          score_genes_cell_cycle(d, o->s_genes.empty() ? tirosh_s_genes() : o->s_genes,
                                 o->g2m_genes.empty() ? tirosh_g2m_genes() : o->g2m_genes, o->opt, ctx, gpus);
        else
          score_genes_inplace(d, o->opt, ctx, gpus);
        make_parent_dirs(o->output);
        write_h5ad(d, o->output);
      });
      log::info("wrote " + o->output);
    });
  }
}

}  // namespace

void add_step_commands(CLI::App& app, GlobalOptions& g) {
  add_step(app, g, "qc", "calculate_qc_metrics: per-cell and per-gene QC columns",
           [](CLI::App& c, PreprocessOptions& p) {
             add_qc_options(c, p);
             c.add_option("--layer", p.qc.layer, "calculate_qc_metrics: use layers[LAYER] instead of X");
           },
           [](Context& ctx, Dataset& d, const PreprocessOptions& p) {
             mark_qc_vars(d, p.qc_vars);
             QcOptions q = p.qc;
             q.qc_vars = qc_var_names(p.qc_vars);
             calculate_qc_metrics(ctx, d, q);
           });
  add_step(app, g, "filter-cells", "filter_cells: keep cells by genes or counts",
           [](CLI::App& c, PreprocessOptions& p) {
             p.filter_cells = {};
             add_filter_cells_options(c, p.filter_cells);
           },
           [](Context& ctx, Dataset& d, const PreprocessOptions& p) { filter_cells(ctx, d, p.filter_cells); });
  add_step(app, g, "filter-genes", "filter_genes: keep genes by cells or counts",
           [](CLI::App& c, PreprocessOptions& p) {
             p.filter_genes = {};
             add_filter_genes_options(c, p.filter_genes, false);
           },
           [](Context& ctx, Dataset& d, const PreprocessOptions& p) { filter_genes(ctx, d, p.filter_genes); });
  add_step(app, g, "normalize-total", "normalize_total: scale every cell to the same total",
           [](CLI::App& c, PreprocessOptions& p) {
             p.normalize = {};
             add_normalize_options(c, p.normalize);
             c.add_option("--layer", p.normalize.layer, "normalize_total: normalise layers[LAYER] instead of X");
           },
           [](Context& ctx, Dataset& d, const PreprocessOptions& p) { normalize_total(ctx, d, p.normalize); });
  add_step(app, g, "log1p", "log1p: log(1 + x) of X",
           [](CLI::App& c, PreprocessOptions& p) {
             add_log1p_options(c, p.log1p);
             c.add_option("--layer", p.log1p.layer, "log1p: transform layers[LAYER] instead of X");
           },
           [](Context& ctx, Dataset& d, const PreprocessOptions& p) { log1p(ctx, d, p.log1p); });
  add_step(app, g, "highly-variable-genes", "highly_variable_genes: seurat, cell_ranger, seurat_v3, pearson_residuals",
           [](CLI::App& c, PreprocessOptions& p) {
             add_hvg_options(c, p.hvg);
             c.add_option("--layer", p.hvg.layer, "Use layers[LAYER] (e.g. counts for seurat_v3)");
             c.add_flag("--subset", p.hvg.subset, "Keep only the highly variable genes");
           },
           [](Context& ctx, Dataset& d, const PreprocessOptions& p) { highly_variable_genes(ctx, d, p.hvg); });
  add_step(app, g, "scale", "scale: unit variance and zero mean per gene, clipped",
           [](CLI::App& c, PreprocessOptions& p) {
             p.scale = {};
             add_scale_options(c, p.scale);
             c.add_option("--layer", p.scale.layer, "scale: scale layers[LAYER] instead of X");
           },
           [](Context& ctx, Dataset& d, const PreprocessOptions& p) { scale(ctx, d, p.scale); });
  add_step(app, g, "pca", "pca: principal components (obsm X_pca, varm PCs, uns pca)",
           [](CLI::App& c, PreprocessOptions& p) { add_pca_options(c, p.pca); },
           [](Context& ctx, Dataset& d, const PreprocessOptions& p) { pca(ctx, d, p.pca); });
  add_graph_step<NeighborsOptions>(app, g, "neighbors", "neighbors: kNN graph, distances and UMAP connectivities",
                                   [](CLI::App& c, NeighborsOptions& o) {
                                     add_neighbors_options(c, o);
                                     c.add_option("--key-added", o.key_added,
                                                  "neighbors: uns[KEY], obsp[KEY_distances], obsp[KEY_connectivities] "
                                                  "(default: uns['neighbors'], obsp['distances'], obsp['connectivities'])");
                                   },
                                   [](Context& ctx, Dataset& d, const NeighborsOptions& o) { neighbors(ctx, d, o); });
  add_graph_step<UmapOptions>(app, g, "umap", "umap: 2-D embedding of the neighbours graph (obsm X_umap)",
                              [](CLI::App& c, UmapOptions& o) {
                                add_umap_options(c, o, false);
                                c.add_option("--neighbors-key", o.neighbors_key, "umap: the neighbours (uns[KEY]) to embed")
                                    ->capture_default_str();
                              },
                              [](Context& ctx, Dataset& d, const UmapOptions& o) { umap(ctx, d, o); });
  add_graph_step<LeidenOptions>(app, g, "leiden", "leiden: clusters of the neighbours graph (obs leiden)",
                                [](CLI::App& c, LeidenOptions& o) {
                                  add_leiden_options(c, o, false);
                                  c.add_option("--key-added", o.key_added, "leiden: the obs column written")
                                      ->capture_default_str();
                                  c.add_option("--neighbors-key", o.neighbors_key, "leiden: the neighbours (uns[KEY]) to cluster")
                                      ->capture_default_str();
                                },
                                [](Context& ctx, Dataset& d, const LeidenOptions& o) { leiden(ctx, d, o); });
  add_rank_genes_groups_command(app, g);
  add_aggregate_command(app, g);
  add_score_genes_commands(app, g);
}

}  // namespace scurry::cli
