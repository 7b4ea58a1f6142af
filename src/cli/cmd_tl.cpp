// scurry tsne | diffmap | dpt | paga | dendrogram | embedding-density | kmeans IN -o OUT.h5ad: the
// embedding and graph tools of scanpy's `tl` (issue 22), each alone on the CPU, with scanpy's
// parameter names (dashes for underscores). Defaults come from the tools' Options structs.
#include <functional>
#include <memory>

#include "cli/commands.hpp"
#include "core/log.hpp"
#include "io/h5ad.hpp"
#include "io/read.hpp"
#include "tl/dendrogram.hpp"
#include "tl/diffmap.hpp"
#include "tl/draw_graph.hpp"
#include "tl/embedding_density.hpp"
#include "tl/kmeans.hpp"
#include "tl/paga.hpp"
#include "tl/tsne.hpp"

namespace scurry::cli {

void add_tsne_options(CLI::App& c, TsneOptions& o, const std::string& prefix) {
  c.add_option("--" + prefix + "n-pcs", o.n_pcs, "tsne: use the first n_pcs columns of the representation");
  c.add_option("--" + prefix + "use-rep", o.use_rep, "tsne: obsm key of the representation (default X_pca, else X)");
  c.add_option("--" + prefix + "perplexity", o.perplexity, "tsne: perplexity")->capture_default_str();
  c.add_option("--" + prefix + "early-exaggeration", o.early_exaggeration, "tsne: early exaggeration")
      ->capture_default_str();
  c.add_option("--" + prefix + "learning-rate", o.learning_rate, "tsne: learning rate")->capture_default_str();
  c.add_option("--" + prefix + "random-state", o.random_state, "tsne: seed (init 'random')")->capture_default_str();
  c.add_option("--" + prefix + "n-jobs", o.n_jobs, "tsne: threads (0: --threads)")->capture_default_str();
  c.add_option("--" + prefix + "metric", o.metric, "tsne: euclidean or cosine")->capture_default_str();
  c.add_option("--" + prefix + "n-iter", o.n_iter, "tsne: iterations")->capture_default_str();
  c.add_option("--" + prefix + "init", o.init, "tsne: pca or random")->capture_default_str();
  c.add_option("--" + prefix + "method", o.method, "tsne: auto (exact below --" + prefix + "exact-below cells, else fft), fft or exact")
      ->capture_default_str();
  c.add_option("--" + prefix + "knn", o.knn, "tsne: the affinities' kNN: auto (exact; on the GPU IVF-Flat from --" + prefix +
                                         "knn-ivf-from cells), exact or ivf")->capture_default_str();
  c.add_option("--" + prefix + "knn-ivf-from", o.knn_ivf_from, "tsne: knn auto's IVF threshold on the GPU (cells)")
      ->capture_default_str();
  c.add_option("--" + prefix + "exact-below", o.exact_below, "tsne: method auto's all-pairs threshold (cells)")
      ->capture_default_str();
}

void add_draw_graph_options(CLI::App& c, DrawGraphOptions& o, const std::string& prefix) {
  c.add_option("--" + prefix + "layout", o.layout, "draw_graph: layout (fa: ForceAtlas2; igraph's are not implemented)")
      ->capture_default_str();
  c.add_option("--" + prefix + "init-pos", o.init_pos, "draw_graph: obsm key of start coordinates (default: random)");
  c.add_option("--" + prefix + "root", o.root, "draw_graph: root of igraph's tree layouts (unused by fa)");
  c.add_option("--" + prefix + "random-state", o.random_state, "draw_graph: seed of the random start")->capture_default_str();
  c.add_option("--" + prefix + "n-jobs", o.n_jobs, "draw_graph: threads (0: --threads)")->capture_default_str();
  c.add_option("--" + prefix + "neighbors-key", o.neighbors_key, "draw_graph: uns key of the neighbours")->capture_default_str();
  c.add_option("--" + prefix + "obsp", o.obsp, "draw_graph: obsp key of the graph (instead of the neighbours')");
  c.add_option("--" + prefix + "key-added-ext", o.key_added_ext, "draw_graph: obsm key X_draw_graph_<ext> (default: the layout)");
  c.add_option("--" + prefix + "iterations", o.iterations, "draw_graph: ForceAtlas2 iterations")->capture_default_str();
}

namespace {

template <class Opt>
void add_tool(CLI::App& app, GlobalOptions& g, const std::string& name, const std::string& help,
              const std::function<void(CLI::App&, Opt&)>& bind,
              const std::function<void(Context&, Dataset&, const Opt&)>& run, bool gpu = false) {
  struct Cmd {
    std::string input, output;
    ReadOptions read;
    Opt opt;
  };
  auto o = std::make_shared<Cmd>();
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->add_option("IN", o->input, "Input: an h5ad file (after pca / neighbors / clustering as the tool needs)")
      ->required();
  cmd->add_option("-o,--output", o->output, "Output .h5ad file (written atomically)")->required();
  bind(*cmd, o->opt);
  cmd->callback([&g, o, run, name, gpu] {
    log::set_quiet(g.quiet);
    check_output_path(o->output, ".h5ad", "-o/--output");
    check_free_space(o->output, input_bytes(o->input), true);
    Context ctx = make_context(g);
    if (ctx.backend() == Backend::cuda && !gpu) {
      log::info(name + " runs on the CPU");
      ctx = Context::cpu(g.context.threads);
    }
    Dataset d = read_any(o->input, o->read);
    run(ctx, d, o->opt);
    make_parent_dirs(o->output);
    write_h5ad(d, o->output);
    log::info("wrote " + o->output);
  });
}

}  // namespace

void add_tl_commands(CLI::App& app, GlobalOptions& g) {
  add_tool<TsneOptions>(app, g, "tsne", "tsne: t-SNE embedding (obsm X_tsne), sklearn's TSNE as scanpy calls it, FFT-accelerated",
                        [](CLI::App& c, TsneOptions& o) { add_tsne_options(c, o, ""); },
                        [](Context& ctx, Dataset& d, const TsneOptions& o) { tsne(ctx, d, o); }, true);
  add_tool<DiffmapOptions>(app, g, "diffmap", "diffmap: diffusion map of the neighbours graph (obsm X_diffmap, uns diffmap_evals)",
                           [](CLI::App& c, DiffmapOptions& o) {
                             c.add_option("--n-comps", o.n_comps, "number of diffusion components")->capture_default_str();
                             c.add_option("--neighbors-key", o.neighbors_key, "uns key of the neighbours")->capture_default_str();
                             c.add_option("--random-state", o.random_state, "seed of the iterative solver")->capture_default_str();
                           },
                           [](Context& ctx, Dataset& d, const DiffmapOptions& o) { diffmap(ctx, d, o); });
  add_tool<DptOptions>(app, g, "dpt", "dpt: diffusion pseudotime from a root cell (obs dpt_pseudotime)",
                       [](CLI::App& c, DptOptions& o) {
                         c.add_option("--n-dcs", o.n_dcs, "diffusion components used")->capture_default_str();
                         c.add_option("--root-cell", o.root_cell, "index of the root cell (default: uns['iroot'])");
                         c.add_option("--neighbors-key", o.neighbors_key, "uns key of the neighbours")->capture_default_str();
                       },
                       [](Context& ctx, Dataset& d, const DptOptions& o) { dpt(ctx, d, o); });
  add_tool<PagaOptions>(app, g, "paga", "paga: connectivity of groups (uns paga: connectivities, connectivities_tree)",
                        [](CLI::App& c, PagaOptions& o) {
                          c.add_option("--groups", o.groups, "obs column of groups (default leiden, else louvain)");
                          c.add_option("--model", o.model, "connectivity model (v1.2)")->capture_default_str();
                          c.add_option("--neighbors-key", o.neighbors_key, "uns key of the neighbours")->capture_default_str();
                        },
                        [](Context& ctx, Dataset& d, const PagaOptions& o) { paga(ctx, d, o); });
  add_tool<DendrogramOptions>(app, g, "dendrogram", "dendrogram: hierarchical clustering of groups (uns dendrogram_<groupby>)",
                              [](CLI::App& c, DendrogramOptions& o) {
                                c.add_option("--groupby", o.groupby, "obs column of groups")->required();
                                c.add_option("--n-pcs", o.n_pcs, "use the first n_pcs columns of the representation");
                                c.add_option("--use-rep", o.use_rep, "obsm key of the representation (default X_pca)");
                                c.add_option("--cor-method", o.cor_method, "pearson or spearman")->capture_default_str();
                                c.add_option("--linkage-method", o.linkage_method, "complete, single, average or weighted")
                                    ->capture_default_str();
                                c.add_option("--key-added", o.key_added, "uns key (default dendrogram_<groupby>)");
                              },
                              [](Context& ctx, Dataset& d, const DendrogramOptions& o) { dendrogram(ctx, d, o); });
  add_tool<EmbeddingDensityOptions>(
      app, g, "embedding-density", "embedding_density: Gaussian kernel density of cells in an embedding (obs <basis>_density)",
      [](CLI::App& c, EmbeddingDensityOptions& o) {
        c.add_option("--basis", o.basis, "embedding: obsm X_<basis> (umap, tsne, diffmap, fa, ...)")->capture_default_str();
        c.add_option("--groupby", o.groupby, "obs column: densities within each category");
        c.add_option("--key-added", o.key_added, "obs column (default <basis>_density[_<groupby>])");
        c.add_option("--components", o.components, "two 1-based components")->capture_default_str();
      },
      [](Context& ctx, Dataset& d, const EmbeddingDensityOptions& o) { embedding_density(ctx, d, o); });
  add_tool<DrawGraphOptions>(
      app, g, "draw-graph", "draw_graph: ForceAtlas2 layout of the neighbours graph (obsm X_draw_graph_fa), as scanpy's layout='fa'",
      [](CLI::App& c, DrawGraphOptions& o) { add_draw_graph_options(c, o, ""); },
      [](Context& ctx, Dataset& d, const DrawGraphOptions& o) { draw_graph(ctx, d, o); });
  add_tool<KmeansClusterOptions>(app, g, "kmeans", "kmeans: k-means clusters of cells in X_pca (obs kmeans)",
                                 [](CLI::App& c, KmeansClusterOptions& o) {
                                   c.add_option("--n-clusters", o.n_clusters, "clusters")->capture_default_str();
                                   c.add_option("--use-rep", o.use_rep, "obsm key of the representation (default X_pca)");
                                   c.add_option("--n-pcs", o.n_pcs, "use the first n_pcs columns")->capture_default_str();
                                   c.add_option("--random-state", o.random_state, "seed")->capture_default_str();
                                   c.add_option("--n-init", o.n_init, "runs; the least inertia wins")->capture_default_str();
                                   c.add_option("--key-added", o.key_added, "obs column")->capture_default_str();
                                 },
                                 [](Context& ctx, Dataset& d, const KmeansClusterOptions& o) { kmeans_cluster(ctx, d, o); });
}

}  // namespace scurry::cli
