// scurry._scurry: the compiled half of the Python package. It binds
// - Dataset: a handle on a scurry::Dataset (AnnData's slots in C++) that the pure-Python wrappers
//   fill from an AnnData, pass to the steps and read the written slots back from. The same handle
//   is the one a device-resident dataset will take later (docs/python.md);
// - every step's XxxOptions (defaults read from the C++ structs: never repeated in Python) and its
//   Dataset-level entry point, the same one the CLI calls;
// - the readers (read_h5ad, read_zarr, read_10x_h5, read_10x_mtx) into a Dataset.
// Steps run on a worker thread with the GIL released; the calling thread polls Python's signals,
// so Ctrl-C requests cancellation (core/cancel.hpp) and raises KeyboardInterrupt once the step has
// unwound. Errors: scurry::InputError -> ValueError, scurry::Error -> RuntimeError, with the CLI's
// one-line message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "convert.hpp"
#include "runtime.hpp"
#include "core/cancel.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "exec/blas_core.hpp"
#include "exec/context.hpp"
#include "get/aggregate.hpp"
#include "graph/leiden.hpp"
#include "graph/neighbors.hpp"
#include "graph/umap.hpp"
#include "tl/options_layout.hpp"
#include "io/h5ad.hpp"
#include "io/tenx.hpp"
#include "io/zarr.hpp"
#include "pp/filter.hpp"
#include "pp/hvg.hpp"
#include "pp/log1p.hpp"
#include "pp/normalize.hpp"
#include "pp/pca.hpp"
#include "pp/qc.hpp"
#include "pp/scale.hpp"
#include "tl/rank_genes_groups.hpp"
#include "tl/score_genes.hpp"

namespace py = pybind11;
using namespace scurry;
using namespace scurry::py_binding;

namespace scurry::py_binding {
State& state() {
  static State s;
  return s;
}
void bind_views(py::module_& m);  // views.cpp
void bind_tools(py::module_& m);  // tools.cpp
void bind_cnmf(py::module_& m);   // cnmf.cpp
void bind_resident(py::module_& m);  // resident.cpp
}  // namespace scurry::py_binding

namespace {

using DatasetPtr = std::shared_ptr<Dataset>;

py::array_t<double> double_array(const std::vector<double>& v) {
  return py::array_t<double>(static_cast<py::ssize_t>(v.size()), v.data());
}

py::array_t<int64_t> int_array(const std::vector<int64_t>& v) {
  return py::array_t<int64_t>(static_cast<py::ssize_t>(v.size()), v.data());
}

std::vector<std::string> index_from_py(py::handle obj) {
  // A pandas Index as one Python list first (pandas 3's string Index yields its items far slower
  // one at a time), then each name.
  py::object seq = py::hasattr(obj, "tolist") ? obj.attr("tolist")() : py::reinterpret_borrow<py::object>(obj);
  std::vector<std::string> out;
  if (py::isinstance<py::list>(seq)) out.reserve(py::len(seq));
  for (auto x : seq) out.push_back(py::isinstance<py::str>(x) ? x.cast<std::string>() : std::string(py::str(x)));
  return out;
}

py::object take_slot(std::map<std::string, Matrix>& m, const std::string& k, const char* slot) {
  auto it = m.find(k);
  if (it == m.end()) throw py::key_error(std::string(slot) + "['" + k + "'] is not in the dataset");
  Matrix x = std::move(it->second);
  m.erase(it);
  return matrix_to_py(std::move(x));
}

std::vector<std::string> keys_of(const std::map<std::string, Matrix>& m) {
  std::vector<std::string> k;
  for (const auto& [n, _] : m) k.push_back(n);
  return k;
}

void bind_dataset(py::module_& m) {
  py::class_<Dataset, DatasetPtr>(m, "Dataset",
                                  "scurry's Dataset: AnnData's slots held by the C++ core (cells x genes).")
      .def(py::init<>())
      .def_property_readonly("n_obs", &Dataset::n_obs)
      .def_property_readonly("n_vars", &Dataset::n_vars)
      // X and layers: set copies the matrix in (CSC becomes CSR); take moves it out (no copy).
      .def("set_X", [](Dataset& d, py::handle x) { d.X = matrix_from_py(x, "X"); })
      .def("has_X", [](Dataset& d) { d.settle(); return !d.X.empty(); })
      .def("take_X", [](Dataset& d) {
        d.settle();
        Matrix x = std::move(d.X);
        d.X = Matrix();
        return matrix_to_py(std::move(x));
      })
      .def("X_is_sparse", [](Dataset& d) { return d.X.is_sparse(); })
      .def("set_layer", [](Dataset& d, const std::string& k, py::handle x) {
        d.layers[k] = matrix_from_py(x, "layers['" + k + "']");
      })
      .def("take_layer", [](Dataset& d, const std::string& k) { return take_slot(d.layers, k, "layers"); })
      .def("layer_keys", [](Dataset& d) { return keys_of(d.layers); })
      // obs / var: the index, and columns one by one
      .def("set_obs_names", [](Dataset& d, py::handle idx) { d.obs = Table(); d.obs.index = index_from_py(idx); })
      .def("set_var_names", [](Dataset& d, py::handle idx) { d.var = Table(); d.var.index = index_from_py(idx); })
      // n unnamed cells: the GPU steps, which never read obs names (1.3M names cost ~0.3-0.8 s to convert)
      .def("set_obs_count", [](Dataset& d, int64_t n) {
        if (n < 0) throw py::value_error("set_obs_count: a negative count");
        d.obs = Table();
        d.obs.set_unnamed_rows(n);
      })
      .def("obs_names", [](Dataset& d) { return d.obs.index; })
      .def("var_names", [](Dataset& d) { return d.var.index; })
      .def("set_obs", [](Dataset& d, const std::string& k, py::handle c) { d.obs.set(k, column_from_py(c, "obs['" + k + "']")); })
      .def("set_var", [](Dataset& d, const std::string& k, py::handle c) { d.var.set(k, column_from_py(c, "var['" + k + "']")); })
      .def("obs_keys", [](Dataset& d) { return d.obs.names(); })
      .def("var_keys", [](Dataset& d) { return d.var.names(); })
      .def("get_obs", [](Dataset& d, const std::string& k) { return column_to_py(d.obs.at(k)); })
      .def("get_var", [](Dataset& d, const std::string& k) { return column_to_py(d.var.at(k)); })
      // The column moved out of the Dataset (removed from it): no copy of its values.
      .def("take_obs", [](Dataset& d, const std::string& k) {
        py::object o = column_to_py(std::move(d.obs.at(k)));
        d.obs.remove(k);
        return o;
      })
      .def("take_var", [](Dataset& d, const std::string& k) {
        py::object o = column_to_py(std::move(d.var.at(k)));
        d.var.remove(k);
        return o;
      })
      .def("obs_df", [](Dataset& d) { return table_to_py(d.obs); })
      .def("var_df", [](Dataset& d) { return table_to_py(d.var); })
      .def("set_obs_df", [](Dataset& d, py::handle df) { d.obs = table_from_py(df, "obs"); })
      .def("set_var_df", [](Dataset& d, py::handle df) { d.var = table_from_py(df, "var"); })
      // obsm / varm / obsp / varp
      .def("set_obsm", [](Dataset& d, const std::string& k, py::handle x) { d.obsm[k] = matrix_from_py(x, "obsm['" + k + "']"); })
      .def("set_varm", [](Dataset& d, const std::string& k, py::handle x) { d.varm[k] = matrix_from_py(x, "varm['" + k + "']"); })
      .def("set_obsp", [](Dataset& d, const std::string& k, py::handle x) { d.obsp[k] = matrix_from_py(x, "obsp['" + k + "']"); })
      .def("take_obsm", [](Dataset& d, const std::string& k) { return take_slot(d.obsm, k, "obsm"); })
      .def("take_varm", [](Dataset& d, const std::string& k) { return take_slot(d.varm, k, "varm"); })
      .def("take_obsp", [](Dataset& d, const std::string& k) { return take_slot(d.obsp, k, "obsp"); })
      .def("take_varp", [](Dataset& d, const std::string& k) { return take_slot(d.varp, k, "varp"); })
      .def("obsm_keys", [](Dataset& d) { return keys_of(d.obsm); })
      .def("varm_keys", [](Dataset& d) { return keys_of(d.varm); })
      .def("obsp_keys", [](Dataset& d) { return keys_of(d.obsp); })
      .def("varp_keys", [](Dataset& d) { return keys_of(d.varp); })
      // uns
      .def("set_uns", [](Dataset& d, const std::string& k, py::handle v) { d.uns[k] = value_from_py(v, "uns['" + k + "']"); })
      .def("get_uns", [](Dataset& d, const std::string& k) {
        auto it = d.uns.find(k);
        if (it == d.uns.end()) throw py::key_error("uns['" + k + "'] is not in the dataset");
        return value_to_py(it->second);
      })
      .def("uns_keys", [](Dataset& d) {
        std::vector<std::string> k;
        for (const auto& [n, _] : d.uns) k.push_back(n);
        return k;
      })
      // raw (X and var)
      .def("has_raw", [](Dataset& d) { return d.raw != nullptr; })
      .def("set_raw", [](Dataset& d, py::handle x, py::handle var_df) {
        auto r = std::make_shared<Dataset>();
        r->X = matrix_from_py(x, "raw.X");
        r->var = table_from_py(var_df, "raw.var");
        r->obs.index = d.obs.index;
        d.raw = std::move(r);
      })
      .def("take_raw", [](Dataset& d) -> py::object {
        if (!d.raw) return py::none();
        Matrix x = std::move(d.raw->X);
        py::object var = table_to_py(d.raw->var);
        py::object X = matrix_to_py(std::move(x));
        d.raw.reset();
        return py::make_tuple(X, var);
      })
      .def("check_shapes", [](Dataset& d, const std::string& where) { d.check_shapes(where); });
}

#define RW(cls, field) def_readwrite(#field, &cls::field)

void bind_options(py::module_& m) {
  py::class_<QcOptions>(m, "QcOptions")
      .def(py::init<>())
      .RW(QcOptions, qc_vars).RW(QcOptions, percent_top).RW(QcOptions, log1p).RW(QcOptions, layer)
      .RW(QcOptions, expr_type).RW(QcOptions, var_type);
  py::class_<FilterCellsOptions>(m, "FilterCellsOptions")
      .def(py::init<>())
      .RW(FilterCellsOptions, min_counts).RW(FilterCellsOptions, min_genes).RW(FilterCellsOptions, max_counts)
      .RW(FilterCellsOptions, max_genes);
  py::class_<FilterGenesOptions>(m, "FilterGenesOptions")
      .def(py::init<>())
      .RW(FilterGenesOptions, min_counts).RW(FilterGenesOptions, min_cells).RW(FilterGenesOptions, max_counts)
      .RW(FilterGenesOptions, max_cells);
  py::class_<NormalizeTotalOptions>(m, "NormalizeTotalOptions")
      .def(py::init<>())
      .RW(NormalizeTotalOptions, target_sum).RW(NormalizeTotalOptions, exclude_highly_expressed)
      .RW(NormalizeTotalOptions, max_fraction).RW(NormalizeTotalOptions, key_added).RW(NormalizeTotalOptions, layer);
  py::class_<Log1pOptions>(m, "Log1pOptions").def(py::init<>()).RW(Log1pOptions, base).RW(Log1pOptions, layer);
  py::class_<HvgOptions>(m, "HvgOptions")
      .def(py::init<>())
      .RW(HvgOptions, flavor).RW(HvgOptions, n_top_genes).RW(HvgOptions, min_mean).RW(HvgOptions, max_mean)
      .RW(HvgOptions, min_disp).RW(HvgOptions, max_disp).RW(HvgOptions, n_bins).RW(HvgOptions, span)
      .RW(HvgOptions, batch_key).RW(HvgOptions, layer).RW(HvgOptions, theta).RW(HvgOptions, clip)
      .RW(HvgOptions, subset).RW(HvgOptions, check_values).RW(HvgOptions, key_prefix);
  py::class_<ScaleOptions>(m, "ScaleOptions")
      .def(py::init<>())
      .RW(ScaleOptions, zero_center).RW(ScaleOptions, max_value).RW(ScaleOptions, clip_below).RW(ScaleOptions, layer);
  py::class_<PcaOptions>(m, "PcaOptions")
      .def(py::init<>())
      .RW(PcaOptions, n_comps).RW(PcaOptions, zero_center).RW(PcaOptions, svd_solver)
      .RW(PcaOptions, auto_gram_max_genes).RW(PcaOptions, random_state).RW(PcaOptions, n_oversamples)
      .RW(PcaOptions, n_iter).RW(PcaOptions, use_highly_variable)
      .def_property(
          "dtype", [](const PcaOptions& o) { return std::string(dtype_name(o.dtype)); },
          [](PcaOptions& o, const std::string& s) {
            if (s == "float32") o.dtype = DType::f32;
            else if (s == "float64") o.dtype = DType::f64;
            else throw py::value_error("pca: dtype '" + s + "' is not supported (float32 or float64)");
          });
  py::class_<NeighborsOptions>(m, "NeighborsOptions")
      .def(py::init<>())
      .RW(NeighborsOptions, n_neighbors).RW(NeighborsOptions, n_pcs).RW(NeighborsOptions, use_rep)
      .RW(NeighborsOptions, metric).RW(NeighborsOptions, method).RW(NeighborsOptions, random_state)
      .RW(NeighborsOptions, algorithm).RW(NeighborsOptions, auto_exact_max_cells).RW(NeighborsOptions, key_added);
  py::class_<UmapOptions>(m, "UmapOptions")
      .def(py::init<>())
      .RW(UmapOptions, min_dist).RW(UmapOptions, spread).RW(UmapOptions, n_components).RW(UmapOptions, maxiter)
      .RW(UmapOptions, alpha).RW(UmapOptions, gamma).RW(UmapOptions, negative_sample_rate)
      .RW(UmapOptions, init_pos).RW(UmapOptions, random_state).RW(UmapOptions, a).RW(UmapOptions, b)
      .RW(UmapOptions, sgd).RW(UmapOptions, neighbors_key);
  py::class_<LeidenOptions>(m, "LeidenOptions")
      .def(py::init<>())
      .RW(LeidenOptions, resolution).RW(LeidenOptions, random_state).RW(LeidenOptions, n_iterations)
      .RW(LeidenOptions, use_weights).RW(LeidenOptions, beta).RW(LeidenOptions, key_added)
      .RW(LeidenOptions, neighbors_key).RW(LeidenOptions, flavor).RW(LeidenOptions, directed)
      .RW(LeidenOptions, resolutions).RW(LeidenOptions, restrict_key).RW(LeidenOptions, restrict_categories)
      .RW(LeidenOptions, obsp);
  py::class_<RankGenesGroupsOptions>(m, "RankGenesGroupsOptions")
      .def(py::init<>())
      .RW(RankGenesGroupsOptions, groupby).RW(RankGenesGroupsOptions, groups).RW(RankGenesGroupsOptions, reference)
      .RW(RankGenesGroupsOptions, method).RW(RankGenesGroupsOptions, n_genes).RW(RankGenesGroupsOptions, rankby_abs)
      .RW(RankGenesGroupsOptions, pts).RW(RankGenesGroupsOptions, tie_correct)
      .RW(RankGenesGroupsOptions, corr_method).RW(RankGenesGroupsOptions, use_raw).RW(RankGenesGroupsOptions, layer)
      .RW(RankGenesGroupsOptions, mask_var).RW(RankGenesGroupsOptions, key_added)
      .RW(RankGenesGroupsOptions, logreg_C).RW(RankGenesGroupsOptions, logreg_max_iter)
      .RW(RankGenesGroupsOptions, logreg_tol);
  py::class_<FilterRankGenesGroupsOptions>(m, "FilterRankGenesGroupsOptions")
      .def(py::init<>())
      .RW(FilterRankGenesGroupsOptions, key).RW(FilterRankGenesGroupsOptions, groupby)
      .RW(FilterRankGenesGroupsOptions, use_raw).RW(FilterRankGenesGroupsOptions, log)
      .RW(FilterRankGenesGroupsOptions, key_added).RW(FilterRankGenesGroupsOptions, min_in_group_fraction)
      .RW(FilterRankGenesGroupsOptions, min_fold_change).RW(FilterRankGenesGroupsOptions, max_out_group_fraction)
      .RW(FilterRankGenesGroupsOptions, compare_abs);
  py::class_<ScoreGenesOptions>(m, "ScoreGenesOptions")
      .def(py::init<>())
      .RW(ScoreGenesOptions, gene_list).RW(ScoreGenesOptions, ctrl_size).RW(ScoreGenesOptions, gene_pool)
      .RW(ScoreGenesOptions, n_bins).RW(ScoreGenesOptions, score_name).RW(ScoreGenesOptions, random_state)
      .RW(ScoreGenesOptions, use_raw);
  py::class_<AggregateOptions>(m, "AggregateOptions")
      .def(py::init<>())
      .RW(AggregateOptions, by).RW(AggregateOptions, func).RW(AggregateOptions, mask).RW(AggregateOptions, dof)
      .RW(AggregateOptions, layer);
}

void bind_steps(py::module_& m) {
  m.def("calculate_qc_metrics", [](Dataset& d, const QcOptions& o) {
    run_step("calculate qc metrics", [&] { calculate_qc_metrics(state().context(), d, o); });
  });
  // The filters compute and apply on the scratch Dataset; the keep mask lets the wrapper subset
  // the AnnData itself (every slot, as scanpy's _inplace_subset_obs/var does).
  m.def("filter_cells", [](Dataset& d, const FilterCellsOptions& o) {
    auto r = run_step("filter cells", [&] { return filter_cells(state().context(), d, o); });
    return py::make_tuple(bool_array(r.keep), int_array(r.n_genes), double_array(r.n_counts));
  });
  m.def("filter_genes", [](Dataset& d, const FilterGenesOptions& o) {
    auto r = run_step("filter genes", [&] { return filter_genes(state().context(), d, o); });
    return py::make_tuple(bool_array(r.keep), int_array(r.n_cells), double_array(r.n_counts));
  });
  m.def("normalize_total", [](Dataset& d, const NormalizeTotalOptions& o) {
    auto r = run_step("normalize total", [&] { return normalize_total(state().context(), d, o); });
    return py::make_tuple(double_array(r.counts_per_cell), r.target_sum);
  });
  m.def("log1p", [](Dataset& d, const Log1pOptions& o) { run_step("log1p", [&] { log1p(state().context(), d, o); }); });
  m.def("highly_variable_genes", [](Dataset& d, const HvgOptions& o) {
    run_step("highly variable genes", [&] { highly_variable_genes(state().context(), d, o); });
  });
  m.def("scale", [](Dataset& d, const ScaleOptions& o) { run_step("scale", [&] { scale(state().context(), d, o); }); });
  m.def("pca", [](Dataset& d, const PcaOptions& o) { run_step("pca", [&] { pca(state().context(), d, o); }); });
  m.def("neighbors", [](Dataset& d, const NeighborsOptions& o) {
    run_step("neighbors", [&] { neighbors(state().graph_context(), d, o); });
  });
  m.def("umap", [](Dataset& d, const UmapOptions& o) { run_step("umap", [&] { umap(state().graph_context(), d, o); }); });
  m.def("leiden", [](Dataset& d, const LeidenOptions& o) { run_step("leiden", [&] { leiden(state().graph_context(), d, o); }); });
  m.def("rank_genes_groups", [](Dataset& d, const RankGenesGroupsOptions& o) {
    run_step("rank genes groups", [&] { rank_genes_groups_inplace(d, o, state().context()); });
  });
  m.def("filter_rank_genes_groups", [](Dataset& d, const FilterRankGenesGroupsOptions& o) {
    run_step("filter rank genes groups", [&] { filter_rank_genes_groups(d, o, state().context()); });
  });
  m.def("rank_genes_groups_df", [](Dataset& d, const std::string& key) {
    return table_to_py(rank_genes_groups_df(d, key));
  });
  m.def("score_genes", [](Dataset& d, const ScoreGenesOptions& o) {
    auto r = run_step("score genes", [&] { return score_genes(d, o, state().context()); });
    return py::make_tuple(double_array(r.score), r.control_genes, r.genes_used);
  });
  m.def("score_genes_cell_cycle", [](Dataset& d, const std::vector<std::string>& s,
                                     const std::vector<std::string>& g2m, const ScoreGenesOptions& o) {
    run_step("score genes cell cycle", [&] { score_genes_cell_cycle(d, s, g2m, o, state().context()); });
  });
  m.def("aggregate", [](Dataset& d, const AggregateOptions& o) {
    return std::make_shared<Dataset>(run_step("aggregate", [&] { return aggregate(d, o, state().context()); }));
  });
  // The CLI's check of raw counts (run, cnmf): NaN, Inf or negative values raise ValueError naming
  // the first one; `layer` "" checks X.
  m.def("check_counts", [](Dataset& d, const std::string& layer, const std::string& where) {
    const Matrix* x = &d.X;
    if (!layer.empty()) {
      auto it = d.layers.find(layer);
      if (it == d.layers.end()) throw py::key_error("layers['" + layer + "'] is not in the dataset");
      x = &it->second;
    }
    run_step("check counts", [&] { check_counts(*x, where); });
  });
  m.def("mark_gene_prefix", [](Dataset& d, const std::string& column, const std::vector<std::string>& prefixes) {
    return mark_gene_prefix(d, column, prefixes);
  });
}

void bind_io(py::module_& m) {
  m.def("read_h5ad", [](const std::string& path) {
    return std::make_shared<Dataset>(run_step("read h5ad", [&] { return read_h5ad(path); }));
  });
  m.def("read_zarr", [](const std::string& path) {
    return std::make_shared<Dataset>(run_step("read zarr", [&] { return read_zarr(path); }));
  });
  m.def("read_10x_h5", [](const std::string& path, const std::string& genome, bool gex_only) {
    TenxOptions o;
    o.genome = genome;
    o.gex_only = gex_only;
    return std::make_shared<Dataset>(run_step("read 10x h5", [&] { return read_10x_h5(path, o); }));
  });
  m.def("read_10x_mtx", [](const std::string& path, bool gex_only) {
    TenxOptions o;
    o.gex_only = gex_only;
    return std::make_shared<Dataset>(run_step("read 10x mtx", [&] { return read_10x_mtx(path, o); }));
  });
  m.def("write_h5ad", [](Dataset& d, const std::string& path) { run_step("write h5ad", [&] { write_h5ad(d, path); }); });
}

}  // namespace

PYBIND11_MODULE(_scurry, m) {
  m.doc() = "scurry's C++ core: Dataset, the steps' Options and entry points, the readers";
  m.attr("__version__") = SCURRY_VERSION;
  // The extension and the core libraries must agree on the structs they pass (tl/options_layout.hpp):
  // an extension built against a core library of other headers is refused here, not left to crash.
  if (options_layout_here() != options_layout_of_library())
    throw py::import_error(
        "scurry: this extension was compiled against other headers than its core library (the layout of "
        "the steps' Options differs); rebuild the two from the same source tree");
  // The CLI's rule, before any BLAS call of the package: OpenBLAS's generic SSE3 kernels switched to
  // the CPU's own (exec/blas_core.hpp), so the package and the CLI run the same kernels.
  use_fast_blas_core();
  m.def("blas_core", [] { return std::string(blas_core_name()); });
  m.def("blas_core_status", [] { return blas_core_status(); });
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Cancelled&) {
      PyErr_SetNone(PyExc_KeyboardInterrupt);
    } catch (const InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  m.def("set_threads", [](int n) {
    if (n < 0) throw py::value_error("settings.n_jobs: " + std::to_string(n) + " (0 or more; 0 = all cores)");
    state().threads = n;
    state().ctx.reset();  // (the GPU context keeps its threads: Residents share it)
  });
  m.def("threads", [] { return state().context().threads(); });
  m.def("set_quiet", [](bool q) { log::set_quiet(q); });
  m.def("set_device_gpu", [](bool g) { state().device_gpu = g; });
  m.def("quiet", [] { return log::quiet(); });
  bind_dataset(m);
  bind_options(m);
  bind_steps(m);
  bind_io(m);
  bind_views(m);
  bind_tools(m);
  bind_cnmf(m);
  bind_resident(m);
}
