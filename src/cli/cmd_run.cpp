// scurry run INPUT -o OUT.h5ad: read, run the pipeline's steps in order (each timed), write.
//
// Under an MPI launcher (`mpirun -np R scurry run ...`, a build with MPI) the run is sharded: every
// rank keeps one contiguous range of cells (balanced by nonzeros; pp/shard.hpp) and, for an h5ad input
// with only X to split (no layers, raw or obsp), reads only those cells' rows; otherwise it reads the
// input whole and keeps its range,
// the preprocessing chain runs on the shards (per-gene partials allreduced), the kNN search runs each
// rank's cells against all cells' PCA coordinates (gathered: n x 50), and rank 0 gathers the cells
// and the graph, then runs UMAP and Leiden, writes the result and prints the timings. An error on any
// rank ends all ranks (MPI_Abort with the exit code: 2 for bad input, 1 otherwise).
//
// With --device gpu --gpus all|N|0,1 (one process) the preprocessing runs over several GPUs of this
// host (preprocess_gpu_sharded: the cells split by nonzeros, one host thread per GPU); the kNN search
// splits its queries (--knn-shard index: its index) over them (knn_exact_gpus / knn_ivf_gpus), and so
// does --integrate harmony (harmony_gpus: the cells split); connectivities, UMAP and Leiden run on
// the first GPU.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <cstdio>
#include <cstring>
#include <future>
#include <exception>
#include <functional>
#include <new>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "cli/integrate_options.hpp"
#include "cli/step_options.hpp"
#include "cli/run.hpp"
#include "tl/paga.hpp"
#include "tl/draw_graph.hpp"
#include "tl/tsne.hpp"
#include "core/error.hpp"
#include "core/env_laps.hpp"
#include "core/log.hpp"
#include "core/timings.hpp"
#include "core/trace_point.hpp"
#include "exec/blas_core.hpp"
#include "exec/device_release.hpp"
#include "exec/device_tap.hpp"
#include "io/h5ad.hpp"
#include "io/zarr.hpp"
#include "io/read.hpp"
#include "core/row_blocks.hpp"
#include "io/format.hpp"
#include "pp/shard.hpp"
#include "report/report.hpp"
#include "graph/umap.hpp"
#include "graph/umap_gpu.hpp"
#include "graph/leiden.hpp"

namespace scurry::cli {

namespace {

std::string shape_of(const Dataset& d) {
  return std::to_string(d.n_obs()) + " x " + std::to_string(d.n_vars()) +
         (d.X.is_sparse() ? ", nnz " + std::to_string(d.X.nnz()) : std::string(", dense"));
}

// The run's facts for uns['scurry'] (report::store_run_info): the filters' thresholds, the command.
report::RunInfo run_info(const GlobalOptions& g, const RunOptions& o, const std::string& device) {
  report::RunInfo info;
  info.input = o.input, info.device = device;
  for (const auto& a : g.argv) info.command += (info.command.empty() ? "" : " ") + a;
  auto skipped = [&](const char* step) {
    return std::find(o.preprocess.skip.begin(), o.preprocess.skip.end(), step) != o.preprocess.skip.end();
  };
  const auto& fc = o.preprocess.filter_cells;
  if (!skipped("filter_cells")) {
    if (fc.min_genes) info.cell_thresholds.push_back({"min_genes", static_cast<double>(*fc.min_genes)});
    if (fc.max_genes) info.cell_thresholds.push_back({"max_genes", static_cast<double>(*fc.max_genes)});
    if (fc.min_counts) info.cell_thresholds.push_back({"min_counts", *fc.min_counts});
    if (fc.max_counts) info.cell_thresholds.push_back({"max_counts", *fc.max_counts});
  }
  const auto& fg = o.preprocess.filter_genes;
  if (!skipped("filter_genes")) {
    if (fg.min_cells) info.gene_thresholds.push_back({"min_cells", static_cast<double>(*fg.min_cells)});
    if (fg.max_cells) info.gene_thresholds.push_back({"max_cells", static_cast<double>(*fg.max_cells)});
    if (fg.min_counts) info.gene_thresholds.push_back({"gene_min_counts", *fg.min_counts});
    if (fg.max_counts) info.gene_thresholds.push_back({"gene_max_counts", *fg.max_counts});
  }
  return info;
}

// The timings go in only with --report: without it two runs still write identical files.
void finish_run_info(Dataset& d, report::RunInfo& info, const Timings& t, bool with_timings) {
  d.settle();
  info.genes_after_filter = d.raw ? d.raw->var.n_rows() : (d.var.has("highly_variable") ? -1 : d.n_vars());
  report::store_run_info(d, info, with_timings ? t.steps() : std::vector<TimingStep>{}, log::warnings_so_far());
}

// Every step's options, checked before the input is read (each step checks them again, with the
// same function): a bad value fails at once, not after the steps before it have run.
void validate_run_options(const RunOptions& o) {
  const PreprocessOptions& p = o.preprocess;
  validate_normalize_total_options(p.normalize);
  validate_log1p_options(p.log1p);
  validate_scale_options(p.scale);
  validate_pca_options(p.pca);
  if (o.graph) {
    validate_neighbors_options(o.neighbors);
    validate_umap_options(o.umap);
    validate_leiden_options(o.leiden);
    if (o.markers) validate_rank_genes_groups_options(o.rank_genes_groups);
  }
}

// After the read: the options that name slots of the input (obs columns, obsm keys, layers) name
// ones the input has or the run makes, so that a typo fails before the preprocessing, not after it.
void check_input_slots(const RunOptions& o, const Dataset& d) {
  auto need_obs = [&](const std::string& key, const char* option) {
    if (!key.empty() && !d.obs.has(key))
      fail_input(o.input, option, " '", key, "': obs has no such column");
  };
  need_obs(o.preprocess.hvg.batch_key, "--batch-key");
  if (o.integrate == "harmony")
    for (const auto& k : o.harmony.keys) need_obs(k, "--harmony-key");
  if (!o.graph) return;
  auto made_obsm = [&](const std::string& key) {
    return key == "X_pca" || (o.integrate == "harmony" && key == o.harmony.adjusted_basis) || d.obsm.count(key) > 0;
  };
  const std::string& rep = o.neighbors.use_rep;
  if (!rep.empty() && rep != "X" && !made_obsm(rep))
    fail_input(o.input, "--use-rep '", rep, "': obsm has no such key and the run makes none by that name");
  const std::string& init = o.umap.init_pos;
  if (init != "spectral" && init != "random" && init != "paga" && !made_obsm(init))
    fail_input(o.input, "--init-pos '", init, "': obsm has no such key (use spectral, random or an obsm key)");
  if (!o.markers) return;
  const RankGenesGroupsOptions& r = o.rank_genes_groups;
  if (r.groupby != o.leiden.key_added) need_obs(r.groupby, "--markers-groupby");
  const std::string& layer = r.layer;
  if (!layer.empty() && !d.layers.count(layer) && !(layer == "counts" && o.preprocess.counts_layer))
    fail_input(o.input, "--markers-layer '", layer, "': layers has no such key and the run makes none by that name");
  if (!r.mask_var.empty() && r.mask_var != "highly_variable" && !d.var.has(r.mask_var))
    fail_input(o.input, "--markers-mask-var '", r.mask_var, "': var has no such column");
}

void run_ranks(const GlobalOptions& g, const RunOptions& o) {
  trace_point("run: starts");
  // The outputs first: a bad name or an unwritable directory is reported before any work.
  log::set_quiet(g.quiet);
  validate_run_options(o);
  check_output_path(o.output, ".h5ad", "-o/--output");
  if (!o.timings.empty()) check_output_path(o.timings, ".json", "--timings");
  if (!o.markers_tsv.empty()) check_output_path(o.markers_tsv, "", "--markers-tsv");
  if (!o.report.empty()) {  // its directory is made now: an uncreatable one fails before any work
    check_output_path(o.report, ".html", "--report");
    make_parent_dirs(o.report);
  }
  // --gpus: the first listed GPU is the main context's; the others' contexts are made first (making
  // one selects its device on this thread; the main context's must be selected last).
  const std::vector<int> devices = selected_gpus(g);
  trace_point("run: gpus selected");
  GlobalOptions gm = g;
  if (!devices.empty()) gm.context.cuda.device = devices[0];
  if (devices.size() > 1 && launched_by_mpi())
    fail_input("--gpus", "several GPUs in one process cannot be combined with MPI ranks; give one of the two");
  trace_point("run: options checked");
  GpuContexts gpus = make_extra_gpu_contexts(gm, devices);
  Context ctx = make_distributed_context(gm);
  const std::vector<Context*>& all_gpus = gpus.with_main(ctx);
  trace_point("run: context made");
  // The output holds the counts (layers/counts, raw) of the input; a streamed run (GPU only) has no X,
  // counts or raw: then the estimate is only a warning.
  const bool may_stream = ctx.backend() == Backend::cuda && o.stream.value_or(true);
  if (ctx.comm().rank() == 0) check_free_space(o.output, input_bytes(o.input), !may_stream);

  std::string where = ctx.describe();
  if (all_gpus.size() > 1) {
    where += detail::concat("; preprocessing on ", all_gpus.size(), " GPUs:");
    for (int dev : devices) where += " " + std::to_string(dev);
  }
  log::info("using " + where + (ctx.comm().size() > 1 ? "; " + ctx.comm().describe() : std::string()));
  Timings t;
  t.set_argv(g.argv);
  t.set_meta("device", where);
  t.set_meta("blas_core", blas_core_name());
  t.set_meta("input", o.input);
  t.set_meta("output", o.output);

  Dataset d;
  RunOptions om = o;  // several GPUs: the preprocessing (streamed or not) spreads over them
  om.gpus = all_gpus;
  auto steps = build_pipeline(om);
  NeighborsOptions spread = o.neighbors;  // the kNN search (exact or IVF) over the GPUs too
  spread.gpus = all_gpus;
  if (all_gpus.size() > 1)
    for (auto& s : steps)
      if (s.name == "neighbors")
        s.run = [&spread](Context& ctx, Dataset& d, Timings&) { neighbors(ctx, d, spread); };
  // One GPU: UMAP and Leiden at once (both only read the graph): UMAP on a second context of the
  // device (its own stream and memory pool) in a thread, Leiden here; UMAP's slots are written once
  // both are done, so the output is the same as one after the other. SCURRY_RUN_SERIAL=1: in turn.
  std::shared_ptr<Context> side;
  const char* serial = std::getenv("SCURRY_RUN_SERIAL");
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    if (steps[i].name != "umap" || steps[i + 1].name != "leiden" || ctx.backend() != Backend::cuda ||
        ctx.comm().size() != 1 || all_gpus.size() > 1 || (serial && std::string(serial) == "1"))
      continue;
    side = std::make_shared<Context>(make_context(gm));
    steps[i] = {"umap+leiden", [&o, side](Context& ctx, Dataset& d, Timings& t) {
                  CsrF storage;
                  const CsrF& graph = neighbors_graph(d, o.umap.neighbors_key, "umap", storage);
                  DenseF init;
                  const DenseF* init_ptr = nullptr;
                  if (o.umap.init_pos != "spectral" && o.umap.init_pos != "random") {
                    auto it = d.obsm.find(o.umap.init_pos);
                    if (it == d.obsm.end())
                      fail_input("umap", "init_pos '", o.umap.init_pos, "' is neither spectral, random nor an obsm key");
                    init = to_dense_f(it->second);
                    init_ptr = &init;
                  }
                  // (uns read here, before leiden writes it on this thread; the function reads obsm only)
                  const RepresentationFn rep = umap_representation(d, o.umap.neighbors_key);
                  UmapResult res;
                  std::exception_ptr umap_err;
                  double umap_s = 0;
                  std::thread th([&] {
                    try {
                      const auto t0 = std::chrono::steady_clock::now();
                      res = umap_gpu(*side, graph, o.umap, init_ptr, rep);
                      umap_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                    } catch (...) {
                      umap_err = std::current_exception();
                    }
                  });
                  const auto t0 = std::chrono::steady_clock::now();
                  std::exception_ptr leiden_err;
                  try {
                    leiden(ctx, d, o.leiden);
                  } catch (...) {
                    leiden_err = std::current_exception();
                  }
                  const double leiden_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                  th.join();
                  if (umap_err) std::rethrow_exception(umap_err);
                  if (leiden_err) std::rethrow_exception(leiden_err);
                  write_umap(d, res, o.umap);
                  log::info(detail::concat("umap (gpu, beside leiden): ", graph.n_rows, " cells, ", res.n_epochs,
                                           " epochs, ", res.init, " initialisation (", res.init_seconds, " s), ",
                                           umap_s, " s in all; leiden ", leiden_s, " s"));
                  t.set_meta("umap_seconds", std::to_string(umap_s));
                  t.set_meta("leiden_seconds", std::to_string(leiden_s));
                }};
    steps.erase(steps.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    break;
  }
  report::RunInfo info = run_info(g, o, where);
  trace_point("run: steps begin");
  for (size_t i = 0; i < steps.size(); ++i) {
    log::info("[" + std::to_string(i + 1) + "/" + std::to_string(steps.size()) + "] " + steps[i].name);
    // The facts a later `scurry report` needs go into uns['scurry'] (report/report.hpp).
    if (steps[i].name == "write") finish_run_info(d, info, t, !o.report.empty());
    if (steps[i].self_timed) {
      steps[i].run(ctx, d, t);
      continue;
    }
    Timings::Scope s = t.scope(steps[i].name);
    trace_point("step " + steps[i].name + " begins");
    steps[i].run(ctx, d, t);
    trace_point("step " + steps[i].name + " ran");
    s.set_extra(shape_of(d));
    if (steps[i].name == "read" && ctx.comm().size() == 1) info.input_obs = d.n_obs(), info.input_vars = d.n_vars();
  }
  trace_point("run: steps end");
  if (ctx.comm().rank() != 0) return;  // rank 0 writes and reports
  if (!o.report.empty()) {  // the HTML report, timed as a step of its own
    Timings::Scope s = t.scope("report");
    report::ReportOptions ro;
    ro.threads = ctx.threads();
    std::vector<TimingStep> steps_so_far = t.steps();
    write_text_atomic(o.report, report::report_of_dataset(d, o.output, "scurry run", steps_so_far, log::warnings_so_far(), ro));
  }
  if (!o.timings.empty()) write_text_atomic(o.timings, t.to_json() + "\n");

  if (!log::quiet()) {
    std::printf("scurry run: %s -> %s\n", o.input.c_str(), o.output.c_str());
    std::printf("  cells %lld, genes %lld, nnz %lld; %s\n\n", static_cast<long long>(d.n_obs()),
                static_cast<long long>(d.n_vars()),
                // (a CPU run lets its dense X go once written: n_obs x n_vars entries)
                static_cast<long long>(d.X.empty() ? d.n_obs() * d.n_vars() : d.X.nnz()), ctx.describe().c_str());
    if (d.obs.has("leiden")) {
      const auto& cl = std::get<CategoricalColumn>(d.obs.at("leiden").c);
      std::vector<int64_t> size(cl.categories.size(), 0);
      for (int32_t c : cl.codes)
        if (c >= 0) ++size[c];
      std::printf("  leiden: %zu clusters; cells per cluster:", size.size());
      for (size_t c = 0; c < size.size(); ++c) std::printf(" %s:%lld", cl.categories[c].c_str(), static_cast<long long>(size[c]));
      std::printf("\n\n");
    }
    t.print_table(stdout);
    if (!o.timings.empty()) std::printf("\ntimings written to %s\n", o.timings.c_str());
  }
}

void run_pipeline(const GlobalOptions& g, const RunOptions& o) {
  std::shared_ptr<Comm> comm = make_mpi_comm();
  if (comm->size() == 1) return run_ranks(g, o);
  // Several ranks: an error on one must end them all, never leave the others waiting in a collective.
  auto die = [&](const char* what, int code) {
    std::fflush(stdout);
    std::fprintf(stderr, "scurry: error (rank %d of %d): %s\n", comm->rank(), comm->size(), what);
    std::fflush(stderr);
    comm->abort(code);
  };
  try {
    run_ranks(g, o);
  } catch (const InputError& e) {
    die(e.what(), 2);
  } catch (const std::bad_alloc&) {
    die("out of memory", 1);
  } catch (const std::exception& e) {
    die(e.what(), 1);
  }
}

}  // namespace

void add_run_options(CLI::App& cmd, RunOptions& o) {
  cmd.add_option("INPUT", o.input, "Input: an h5ad file, a 10x .h5 file or a 10x mtx directory")->required();
  cmd.add_option("-o,--output", o.output, "Output .h5ad file (written atomically: no partial file on failure)")
      ->required();
  cmd.add_option("--timings", o.timings, "Also write the per-step timings as JSON to this file");
  cmd.add_option("--report", o.report,
                 "Also write the HTML run report (one self-contained page of plots; see scurry report) to this .html file");
  cmd.add_option("--gex-only", o.read.tenx.gex_only,
                 "10x v3 inputs: keep only 'Gene Expression' features (scanpy's gex_only)")
      ->default_str("true");
  add_preprocess_options(cmd, o.preprocess);
  add_neighbors_options(cmd, o.neighbors);
  add_umap_options(cmd, o.umap, true);
  add_leiden_options(cmd, o.leiden, true);
  cmd.add_flag("!--no-graph", o.graph, "Stop after PCA (no neighbors, UMAP, Leiden)");
  cmd.add_flag("--tsne", o.tsne, "Also t-SNE after Leiden (obsm X_tsne; scurry tsne's defaults, on the GPU with --device gpu)");
  cmd.add_flag("--paga", o.paga, "Also PAGA of the Leiden clusters (uns paga)");
  cmd.add_flag("--draw-graph", o.draw_graph,
               "Also ForceAtlas2 of the graph after Leiden (obsm X_draw_graph_fa; CPU; scurry draw-graph's defaults)");
  add_rank_genes_groups_options(cmd, o.rank_genes_groups, o.markers_tsv, true, &o.markers);
  add_run_integrate_options(cmd, o);
  cmd.add_flag("--stream,!--no-stream", o.stream,
               "With --device gpu: stream the preprocessing over row blocks read lazily from an h5ad/zarr input "
               "(out of core: the matrix is never held whole on the GPU; the output has no X, counts layer or "
               "raw). Default: chosen when the input would not fit the device memory budget (not with --memory managed, the other out-of-core route)");
  cmd.add_option("--stream-block-nnz", o.stream_opt.block_nnz,
                 "With --stream: nonzeros per row block (0: from the device budget)")
      ->capture_default_str();
  cmd.add_option("--stream-host-store", o.stream_opt.host_store_bytes,
                 "With --stream: bytes of pinned host memory for the HVG rows kept between the last two passes "
                 "(-1: a quarter of the RAM; 0: none, the source is read again)")
      ->capture_default_str();
}

// Several ranks and an h5ad input with only X to split by rows (no layers, raw or obsp): each rank
// reads its own cells only (balanced by nonzeros from X's row pointers), not the whole file. Returns
// false when the input needs the whole-file path.
static bool read_own_rows(const Context& ctx, const std::string& path, Dataset& d) {
  Comm& c = ctx.comm();
  if (c.size() == 1 || detect_format(path) != Format::h5ad) return false;
  const H5adSummary sum = summarize_h5ad(path);
  for (const auto& slot : sum.slots)
    if (slot.name.rfind("layers/", 0) == 0 || slot.name == "raw" || slot.name.rfind("obsp/", 0) == 0) return false;
  std::vector<int64_t> ptr;
  if (sum.x_encoding == "csr_matrix") ptr = H5adRowReader(path).row_pointers();
  RowRange rr{sum.n_obs * c.rank() / c.size(), sum.n_obs * (c.rank() + 1) / c.size()};
  if (ptr.size() == static_cast<size_t>(sum.n_obs) + 1) {
    const RowBlocks b = RowBlocks::split_nnz(ptr, c.size());
    rr = {b.begin(c.rank()), b.end(c.rank())};
  }
  d = read_h5ad_rows(path, rr.begin, rr.end);
  if (c.rank() == 0)
    log::info(detail::concat("read: each of ", c.size(), " ranks reads only its cells (rank 0: rows ", rr.begin, " to ",
                             rr.end, " of ", sum.n_obs, ")"));
  return true;
}

namespace {

// A row source whose blocks are checked to be counts as they are read (on the prefetcher's thread,
// overlapped with the GPU work): the streamed run's check_counts.
class CheckedRowSource : public RowSource {
 public:
  CheckedRowSource(std::shared_ptr<RowSource> s, std::string where) : s_(std::move(s)), where_(std::move(where)) {}
  int64_t n_rows() const override { return s_->n_rows(); }
  int64_t n_cols() const override { return s_->n_cols(); }
  int64_t nnz() const override { return s_->nnz(); }
  CsrF read_rows(int64_t b, int64_t e) override {
    CsrF m = s_->read_rows(b, e);
    Matrix x(std::move(m));
    check_counts(x, detail::concat(where_, " (the block of rows ", b, " to ", e, ")"));
    return std::move(x.csr_f());
  }
  std::vector<int64_t> row_pointers() override { return s_->row_pointers(); }
  const CsrF* resident() const override { return s_->resident(); }

 private:
  std::shared_ptr<RowSource> s_;
  std::string where_;
};

// Whether this run streams: --stream / --no-stream, else when the input's matrix (CSR) and the dense
// HVG matrix would not fit the device budget (h5ad and zarr inputs, one rank, one GPU).
bool choose_stream(Context& ctx, const RunOptions& o) {
  if (o.stream && !*o.stream) return false;
  const bool asked = o.stream.value_or(false);
  if (asked && ctx.backend() != Backend::cuda) fail_input("--stream", "needs --device gpu");
  if (asked && ctx.comm().size() > 1) fail_input("--stream", "cannot be combined with MPI ranks yet; run one process");
  if (asked) return true;
  if (ctx.backend() != Backend::cuda || ctx.comm().size() > 1) return false;
  // --memory managed is the other out-of-core route: what does not fit the device goes to host memory.
  const MemoryMode mm = cuda_memory_mode(ctx.cuda());
  if (mm == MemoryMode::managed || mm == MemoryMode::managed_pool) return false;
  const Format f = detect_format(o.input);
  if (f != Format::h5ad && f != Format::zarr) return false;
  const H5adSummary sum = f == Format::h5ad ? summarize_h5ad(o.input) : summarize_zarr(o.input);
  const double hvg = static_cast<double>(std::min<int64_t>(sum.n_vars, o.preprocess.hvg.n_top_genes.value_or(2000)));
  const double need = static_cast<double>(sum.x_nnz) * 8 + static_cast<double>(sum.n_obs) * hvg * 4;
  // (several GPUs: each holds its share of the matrix)
  const double budget = static_cast<double>(stream_device_budget(ctx)) * static_cast<double>(std::max<size_t>(1, o.gpus.size()));
  if (budget <= 0 || need <= budget) return false;
  log::info(detail::concat("--stream chosen: the input's ", sum.x_nnz, " nonzeros and the dense HVG matrix need about ",
                           static_cast<int64_t>(need / (1 << 20)), " MiB on the GPU, over the budget of ",
                           static_cast<int64_t>(budget / (1 << 20)), " MiB (--no-stream to refuse)"));
  return true;
}

struct StreamState {
  bool on = false;
  std::shared_ptr<RowSource> src;  // the input's X, read lazily (or held: 10x inputs)
  std::shared_ptr<CsrF> held;
  // A GPU run writes its scaled X (most of the output's bytes) while the graph steps run: the output
  // is opened after the preprocessing and X goes out as soon as it is back from the device
  // (SCURRY_RUN_LATE_WRITE=1: all at the end, as before). The graph steps make no HDF5 call, so
  // libhdf5 is used by one thread at a time.
  std::shared_ptr<H5adWriter> writer;
  // A CPU run (one rank, no --report) writes raw/X, layers/counts and X as soon as each is final and
  // lets them go (peak memory: issue 19 point 5); the markers step reads raw/X back from the output.
  bool raw_in_output = false;
  bool x_let_go = false;  // X written and let go after the PCA (no later step reads it)
  // A GPU run (one device, one rank, h5ad or zarr): X copied to the device while it is read
  // (exec/device_tap.hpp); the chain takes it, and its values were checked on the way.
  std::shared_ptr<DeviceCsrTap> tap;
};

// The read may copy X to the GPU as it goes (SCURRY_READ_TAP=0: after the read, as before).
bool tap_wanted(const Context& ctx, const RunOptions& o) {
  const char* e = std::getenv("SCURRY_READ_TAP");
  if ((e && std::strcmp(e, "0") == 0) || !ctx.cuda() || ctx.comm().size() != 1 || o.gpus.size() > 1) return false;
  const Format f = detect_format(o.input);
  return f == Format::h5ad || f == Format::zarr;
}

// A step after the preprocessing reads X: the markers test X (not raw, not a layer), or the kNN
// runs on X (--use-rep X, or no PCA).
bool later_reads_x(const RunOptions& o) {
  if (!o.graph) return false;
  const auto& skip = o.preprocess.skip;
  if (o.neighbors.use_rep == "X" || std::find(skip.begin(), skip.end(), "pca") != skip.end()) return true;
  return o.markers && o.rank_genes_groups.layer.empty() && !(o.preprocess.raw && o.rank_genes_groups.use_raw.value_or(true));
}

// The CPU run's early writes (StreamState::raw_in_output): one rank, not streamed, no --report (it
// plots raw/X after the write), SCURRY_RUN_LATE_WRITE unset or 0. Opens the output and returns the
// chain's early_write: raw/X and layers/counts go out at once (the counts stay when the markers test
// them), timed as steps of their own.
std::function<bool(const std::string&, const Matrix&)> start_cpu_early_writes(const RunOptions& o, Context& ctx,
                                                                            StreamState& st, Timings& t) {
  const char* late = std::getenv("SCURRY_RUN_LATE_WRITE");
  if (ctx.backend() != Backend::cpu || ctx.comm().size() != 1 || st.on || !o.report.empty() ||
      (late && std::strcmp(late, "0") != 0))
    return {};
  make_parent_dirs(o.output);
  st.writer = std::make_shared<H5adWriter>(o.output, o.write);
  const bool keep_counts = o.graph && o.markers && o.rank_genes_groups.layer == "counts";
  return [&o, &st, &t, keep_counts](const std::string& slot, const Matrix& m) {
    if (slot == "layers/counts" && !keep_counts) {
      Timings::Scope s = t.scope("write_counts");
      st.writer->write_layer("counts", m);
      return true;
    }
    if (slot == "raw/X") {
      Timings::Scope s = t.scope("write_raw");
      st.writer->write_raw_x(m);
      st.raw_in_output = true;
      return true;
    }
    return false;
  };
}

// A GPU run on one rank opens its output before the preprocessing, and the chain's copy of the
// scaled X back to the host is followed by X's write (PreprocessOptions::follow_x: each mapped
// window is written as soon as the copy has passed it) while the graph steps run
// (SCURRY_RUN_LATE_WRITE=1: all at the end).
void start_early_write(const RunOptions& o, Context& ctx, PreprocessOptions& po, StreamState& st) {
  const char* late = std::getenv("SCURRY_RUN_LATE_WRITE");
  if (ctx.backend() != Backend::cuda || ctx.comm().size() != 1 || (late && std::strcmp(late, "0") != 0)) return;
  make_parent_dirs(o.output);
  auto writer = std::make_shared<H5adWriter>(o.output, o.write);
  po.follow_x = [writer](const DenseF& x, const std::function<void(size_t)>& ready) {
    EnvLaps laps("SCURRY_CMD_TIMES", "x write");  // (from the end of the scale, where the copy starts)
    writer->write_x_following(x, ready);
    laps.lap("copied back and written");
  };
  st.writer = std::move(writer);
}

}  // namespace

std::vector<Step> build_pipeline(const RunOptions& o) {
  std::vector<Step> p;
  auto st = std::make_shared<StreamState>();
  p.push_back({"read", [&o, st](Context& ctx, Dataset& d, Timings& t) {
                 if (choose_stream(ctx, o)) {
                   st->on = true;
                   t.set_meta("stream", "true");
                   ReadOptions ro = o.read;
                   ro.h5ad.read_x = false, ro.h5ad.read_layers = false, ro.h5ad.read_raw = false;
                   const Format f = detect_format(o.input);
                   if (f == Format::h5ad) {
                     d = read_h5ad(o.input, ro.h5ad);
                     st->src = std::make_shared<H5adRowReader>(o.input);
                   } else if (f == Format::zarr) {
                     d = read_zarr(o.input, ro.h5ad);
                     st->src = std::make_shared<ZarrRowReader>(o.input);
                   } else {  // 10x: read whole, streamed from host memory
                     d = read_any(o.input, o.read);
                     st->held = std::make_shared<CsrF>(to_csr_f(d.X));
                     d.X = Matrix();
                     st->src = std::make_shared<MemoryRowSource>(*st->held);
                   }
                   if (st->src->n_rows() != d.n_obs() || st->src->n_cols() != d.n_vars())
                     fail_input(o.input, "X is ", st->src->n_rows(), " x ", st->src->n_cols(), " but obs/var are ",
                                d.n_obs(), " x ", d.n_vars());
                   return;
                 }
                 if (!read_own_rows(ctx, o.input, d)) {
                   ReadOptions ro = o.read;
                   if (tap_wanted(ctx, o)) {
                     st->tap = make_device_csr_tap(ctx);
                     ro.h5ad.x_tap = csr_tap_of(st->tap);
                   }
                   d = read_any(o.input, ro);
                   shard_rows(ctx, d);  // several ranks: keep this rank's cells
                 }
               }});
  p.push_back({"check_counts", [&o, st](Context&, Dataset& d, Timings&) {
                 check_input_slots(o, d);
                 if (st->on) {  // checked block by block as the passes read them
                   st->src = std::make_shared<CheckedRowSource>(st->src, o.input);
                   return;
                 }
                 if (d.X.empty()) fail_input(o.input, "has no X matrix");
                 if (!tapped_counts_clean(st->tap, d.X)) check_counts(d.X, o.input);  // (else checked on the way to the GPU)
               }});
  if (o.scrublet)
    p.push_back({"scrublet", [&o, st](Context& ctx, Dataset& d, Timings&) {
                   if (st->on || ctx.comm().size() > 1)
                     fail_input(o.input, "--scrublet needs the whole matrix on one rank (not with --stream or several ranks)");
                   run_scrublet(ctx, d, o);
                 }});
  p.push_back({"preprocess", [&o, st](Context& ctx, Dataset& d, Timings& t) {
                 if (st->on) {
                   if (o.gpus.size() > 1)
                     preprocess_stream_sharded(o.gpus, *st->src, d, o.preprocess, o.stream_opt, &t);
                   else
                     preprocess_stream(ctx, *st->src, d, o.preprocess, o.stream_opt, &t);
                   st->src.reset(), st->held.reset();
                   return;
                 }
                 if (o.gpus.size() > 1) return preprocess_gpu_sharded(o.gpus, d, o.preprocess, &t);
                 PreprocessOptions po = o.preprocess;
                 po.early_write = start_cpu_early_writes(o, ctx, *st, t);
                 if (po.early_write) {  // CPU: X out once the PCA is done, let go when no later step reads it
                   preprocess(ctx, d, po, &t);
                   Timings::Scope s = t.scope("write_x");
                   st->writer->write_x(d.X);
                   s.set_extra(shape_of(d));
                   if (!later_reads_x(o)) d.X = Matrix(), st->x_let_go = true;
                   return;
                 }
                 po.background_x = true;  // the GPU's scaled X comes back while the graph steps run
                 // ... and stays on the device for the markers when they test X, not raw
                 po.keep_device_x = o.graph && o.markers && o.rank_genes_groups.layer.empty() &&
                                    !(po.raw && o.rank_genes_groups.use_raw.value_or(true));
                 po.tapped_x = std::move(st->tap);  // (released with po at the end of this step)
                 start_early_write(o, ctx, po, *st);
                 preprocess(ctx, d, po, &t);
               },
               true});
  if (!o.integrate.empty())
    p.push_back({"harmony", [&o](Context& ctx, Dataset& d, Timings&) { run_harmony(ctx, d, o); }});
  if (o.graph) {
    p.push_back({"neighbors", [&o](Context& ctx, Dataset& d, Timings&) {
                   if (ctx.comm().size() == 1) return static_cast<void>(neighbors(ctx, d, integrated(o)));
                   // Each rank searches its cells against all; rank 0 gathers the cells and the graph.
                   std::string used;
                   const DenseF rep = choose_representation(d, o.neighbors.use_rep, o.neighbors.n_pcs, &used);
                   NeighborsResult res = neighbors_sharded(ctx, rep, o.neighbors, 0);
                   gather_rows(ctx, d, 0);
                   if (ctx.comm().rank() != 0) return;
                   res.use_rep = used;
                   write_neighbors(d, res, o.neighbors);
                 }});
    // UMAP and Leiden on the gathered graph, on rank 0.
    p.push_back({"umap", [&o](Context& ctx, Dataset& d, Timings&) {
                   if (ctx.comm().rank() == 0) umap(ctx, d, o.umap);
                 }});
    p.push_back({"leiden", [&o](Context& ctx, Dataset& d, Timings&) {
                   if (ctx.comm().rank() == 0) leiden(ctx, d, o.leiden);
                 }});
    if (o.tsne)
      p.push_back({"tsne", [](Context& ctx, Dataset& d, Timings&) {
                     if (ctx.comm().rank() == 0) tsne(ctx, d, TsneOptions{});  // on the GPU with --device gpu
                   }});
    if (o.paga)
      p.push_back({"paga", [&o](Context& ctx, Dataset& d, Timings&) {
                     PagaOptions po;
                     po.groups = o.leiden.key_added;
                     if (ctx.comm().rank() == 0) paga(ctx, d, po);
                   }});
    if (o.draw_graph)
      p.push_back({"draw_graph", [](Context& ctx, Dataset& d, Timings&) {
                     if (ctx.comm().rank() == 0) draw_graph(Context::cpu(ctx.threads()), d, DrawGraphOptions{});
                   }});
    if (o.markers)
      p.push_back({"rank_genes_groups", [&o, st](Context& ctx, Dataset& d, Timings&) {
                     if (ctx.comm().rank() != 0) return;
                     if (d.X.empty() && !d.pending_x && !d.raw && !st->x_let_go) {  // a streamed run keeps no matrix to test
                       log::info("rank_genes_groups skipped: a streamed run keeps no X or raw");
                       return;
                     }
                     // The test reads raw, or X, which a GPU run may still be copying back: it tests the
                     // device's copy meanwhile (rank_genes_groups_inplace settles X where it cannot).
                     const bool on_raw = d.raw && (!d.raw->X.empty() || st->raw_in_output) &&
                                         o.rank_genes_groups.use_raw.value_or(true) && o.rank_genes_groups.layer.empty();
                     if (!on_raw && !d.device_x) d.settle();
                     // A CPU run wrote raw/X early and let it go: read back for the test, let go after it.
                     const bool reread = st->raw_in_output && d.raw && d.raw->X.empty() &&
                                         o.rank_genes_groups.use_raw.value_or(true) && o.rank_genes_groups.layer.empty();
                     // The t-tests need only sums over the cells: raw/X read back in pieces, never whole.
                     const std::string& m = o.rank_genes_groups.method;
                     if (reread && (m == "t-test" || m == "t-test_overestim_var") && o.rank_genes_groups.mask_var.empty()) {
                       rank_genes_groups_inplace(d, o.rank_genes_groups, ctx, *st->writer->read_back_rows("raw/X"));
                       trace_point("markers: test on raw/X read back in pieces ends");
                       return;
                     }
                     trace_point("markers: read back begins");
                     if (reread) d.raw->X = st->writer->read_back("raw/X");
                     trace_point("markers: read back ends");
                     rank_genes_groups_inplace(d, o.rank_genes_groups, ctx);  // on the GPU in a GPU run
                     trace_point("markers: test ends");
                     d.device_x.reset();
                     if (reread) d.raw->X = Matrix();
                   }});
  }
  // The rest of the scaled X's copy back from the GPU (what the graph steps did not hide).
  p.push_back({"wait_x", [](Context&, Dataset& d, Timings&) {
                 d.settle();
                 d.device_x.reset();
               }});
  p.push_back({"write", [&o, st](Context& ctx, Dataset& d, Timings&) {
                 if (!o.graph) gather_rows(ctx, d, 0);  // with the graph: gathered by neighbors
                 if (ctx.comm().rank() != 0) return;
                 // The device's cached memory goes back to the driver beside the write (else the exit
                 // releases it after the output is complete: ~0.3 s at 1.3M cells). The future waits
                 // for it when the step ends; a failure there only leaves the exit more to release.
                 std::future<void> release;
                 if (ctx.backend() == Backend::cuda && ctx.comm().size() == 1)
                   release = std::async(std::launch::async, [&ctx] { release_cached_device_memory(ctx); });
                 make_parent_dirs(o.output);
                 if (st->writer) {  // X already written (start_early_write)
                   st->writer->finish(d);
                   st->writer.reset();
                 } else {
                   H5adWriteOptions w = o.write;
                   w.allow_no_x = w.allow_no_x || st->on;  // streamed: no X (preprocess_stream.hpp)
                   write_h5ad(d, o.output, w);
                 }
                 if (!o.markers_tsv.empty() && d.uns.count(o.rank_genes_groups.key_added))
                   write_text_atomic(o.markers_tsv,
                                     rank_genes_groups_tsv(rank_genes_groups_df(d, o.rank_genes_groups.key_added)));
               }});
  return p;
}

void add_run_command(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Run the pipeline on INPUT and write the result to OUT.h5ad");
  add_run_options(*cmd, *o);
  cmd->add_option("--gpus", g.gpus,
                  "With --device gpu: spread the preprocessing, the kNN (exact, or IVF-Flat with --knn-algorithm hnsw) and "
                  "--integrate harmony over these GPUs of this host: all, a count N, or ordinals 0,2 (default: one GPU)");
  add_knn_shard_option(*cmd, o->neighbors.gpu_sharding, "With --gpus");
  cmd->callback([&g, o] { run_pipeline(g, *o); });
}

}  // namespace scurry::cli
