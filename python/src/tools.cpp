// scurry._scurry, part 2: the batch tools (harmony_integrate, combat, regress_out, scrublet; issue 21)
// and the embedding/graph tools of scanpy's `tl` (tsne, diffmap, dpt, paga, dendrogram,
// embedding_density, draw_graph; issue 22). As module.cpp: each step's Options bound field by field (the Python
// signatures read their defaults from a default-constructed struct) and the Dataset-level entry
// point the CLI calls (src/cli/cmd_integrate.cpp, src/cli/cmd_tl.cpp), run on a worker thread by
// run_step. The CLI runs these steps on the CPU; so does the package.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "runtime.hpp"
#include "core/dataset.hpp"
#include "pp/combat.hpp"
#include "pp/harmony.hpp"
#include "pp/regress_out.hpp"
#include "pp/scrublet.hpp"
#include "tl/dendrogram.hpp"
#include "tl/diffmap.hpp"
#include "tl/draw_graph.hpp"
#include "tl/embedding_density.hpp"
#include "tl/paga.hpp"
#include "tl/tsne.hpp"

namespace py = pybind11;

namespace scurry::py_binding {

#define RW(cls, field) def_readwrite(#field, &cls::field)

void bind_tools(py::module_& m) {
  // ---- options ----
  py::class_<HarmonyOptions>(m, "HarmonyOptions")
      .def(py::init<>())
      .RW(HarmonyOptions, keys).RW(HarmonyOptions, basis).RW(HarmonyOptions, adjusted_basis)
      .RW(HarmonyOptions, theta).RW(HarmonyOptions, lamb).RW(HarmonyOptions, sigma).RW(HarmonyOptions, nclust)
      .RW(HarmonyOptions, tau).RW(HarmonyOptions, block_size).RW(HarmonyOptions, max_iter_harmony)
      .RW(HarmonyOptions, max_iter_kmeans).RW(HarmonyOptions, epsilon_cluster).RW(HarmonyOptions, epsilon_harmony)
      .RW(HarmonyOptions, random_state);
  py::class_<CombatOptions>(m, "CombatOptions")
      .def(py::init<>())
      .RW(CombatOptions, key).RW(CombatOptions, covariates);
  py::class_<RegressOutOptions>(m, "RegressOutOptions")
      .def(py::init<>())
      .RW(RegressOutOptions, keys).RW(RegressOutOptions, layer);
  py::class_<ScrubletOptions>(m, "ScrubletOptions")
      .def(py::init<>())
      .RW(ScrubletOptions, batch_key).RW(ScrubletOptions, sim_doublet_ratio).RW(ScrubletOptions, expected_doublet_rate)
      .RW(ScrubletOptions, stdev_doublet_rate).RW(ScrubletOptions, synthetic_doublet_umi_subsampling)
      .RW(ScrubletOptions, knn_dist_metric).RW(ScrubletOptions, normalize_variance).RW(ScrubletOptions, log_transform)
      .RW(ScrubletOptions, mean_center).RW(ScrubletOptions, n_prin_comps).RW(ScrubletOptions, use_approx_neighbors)
      .RW(ScrubletOptions, get_doublet_neighbor_parents).RW(ScrubletOptions, n_neighbors)
      .RW(ScrubletOptions, threshold).RW(ScrubletOptions, random_state);
  py::class_<TsneOptions>(m, "TsneOptions")
      .def(py::init<>())
      .RW(TsneOptions, n_pcs).RW(TsneOptions, use_rep).RW(TsneOptions, perplexity)
      .RW(TsneOptions, early_exaggeration).RW(TsneOptions, learning_rate).RW(TsneOptions, random_state)
      .RW(TsneOptions, n_jobs).RW(TsneOptions, metric).RW(TsneOptions, n_iter).RW(TsneOptions, exaggeration_iter)
      .RW(TsneOptions, init).RW(TsneOptions, method).RW(TsneOptions, exact_below).RW(TsneOptions, key_added)
      .RW(TsneOptions, knn).RW(TsneOptions, knn_ivf_from);
  py::class_<DiffmapOptions>(m, "DiffmapOptions")
      .def(py::init<>())
      .RW(DiffmapOptions, n_comps).RW(DiffmapOptions, neighbors_key).RW(DiffmapOptions, random_state);
  py::class_<DptOptions>(m, "DptOptions")
      .def(py::init<>())
      .RW(DptOptions, n_dcs).RW(DptOptions, root_cell).RW(DptOptions, neighbors_key);
  py::class_<PagaOptions>(m, "PagaOptions")
      .def(py::init<>())
      .RW(PagaOptions, groups).RW(PagaOptions, model).RW(PagaOptions, neighbors_key);
  py::class_<DendrogramOptions>(m, "DendrogramOptions")
      .def(py::init<>())
      .RW(DendrogramOptions, groupby).RW(DendrogramOptions, n_pcs).RW(DendrogramOptions, use_rep)
      .RW(DendrogramOptions, cor_method).RW(DendrogramOptions, linkage_method).RW(DendrogramOptions, key_added);
  py::class_<DrawGraphOptions>(m, "DrawGraphOptions")
      .def(py::init<>())
      .RW(DrawGraphOptions, layout).RW(DrawGraphOptions, init_pos).RW(DrawGraphOptions, root)
      .RW(DrawGraphOptions, random_state).RW(DrawGraphOptions, n_jobs).RW(DrawGraphOptions, neighbors_key)
      .RW(DrawGraphOptions, obsp).RW(DrawGraphOptions, key_added_ext).RW(DrawGraphOptions, iterations);
  py::class_<EmbeddingDensityOptions>(m, "EmbeddingDensityOptions")
      .def(py::init<>())
      .RW(EmbeddingDensityOptions, basis).RW(EmbeddingDensityOptions, groupby).RW(EmbeddingDensityOptions, key_added)
      .RW(EmbeddingDensityOptions, components);

  // ---- steps (the Dataset-level entry points of the CLI's commands) ----
  m.def("harmony_integrate", [](Dataset& d, const HarmonyOptions& o) {
    auto r = run_step("harmony integrate", [&] { return harmony_integrate(state().context(), d, o); });
    return py::make_tuple(r.iterations, r.converged);
  });
  m.def("combat", [](Dataset& d, const CombatOptions& o) {
    run_step("combat", [&] { combat(state().context(), d, o); });
  });
  m.def("regress_out", [](Dataset& d, const RegressOutOptions& o) {
    run_step("regress out", [&] { regress_out(state().context(), d, o); });
  });
  m.def("scrublet", [](Dataset& d, const ScrubletOptions& o) {
    run_step("scrublet", [&] { scrublet(state().context(), d, o); });
  });
  m.def("tsne", [](Dataset& d, const TsneOptions& o) { run_step("tsne", [&] { tsne(state().context(), d, o); }); });
  m.def("diffmap", [](Dataset& d, const DiffmapOptions& o) {
    run_step("diffmap", [&] { diffmap(state().context(), d, o); });
  });
  m.def("dpt", [](Dataset& d, const DptOptions& o) { run_step("dpt", [&] { dpt(state().context(), d, o); }); });
  m.def("paga", [](Dataset& d, const PagaOptions& o) { run_step("paga", [&] { paga(state().context(), d, o); }); });
  m.def("dendrogram", [](Dataset& d, const DendrogramOptions& o) {
    run_step("dendrogram", [&] { dendrogram(state().context(), d, o); });
  });
  m.def("draw_graph", [](Dataset& d, const DrawGraphOptions& o) {
    return run_step("draw graph", [&] { return draw_graph(state().context(), d, o).key; });
  });
  m.def("embedding_density", [](Dataset& d, const EmbeddingDensityOptions& o) {
    run_step("embedding density", [&] { embedding_density(state().context(), d, o); });
  });
}

}  // namespace scurry::py_binding
