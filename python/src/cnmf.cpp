// scurry._scurry, part 3: cNMF's verbs (issue 23 point 4) for scurry.cnmf.cNMF: the same entry
// points the command line's `scurry cnmf prepare | factorize | combine | k_selection_plot |
// consensus` call (nmf/cnmf_steps.hpp, src/cli/cmd_cnmf.cpp), over the same run folder
// (CnmfPaths: DIR/NAME/ and DIR/NAME/cnmf_tmp/), so a folder made through Python equals one made by
// the CLI. `device` "cpu" runs on the package's CPU context (settings.n_jobs threads), "gpu" on a
// CUDA context (scurry::Error, i.e. RuntimeError, saying why where there is none).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>

#include "runtime.hpp"
#include "nmf/cnmf_files.hpp"
#include "nmf/cnmf_steps.hpp"
#include "nmf/nmf.hpp"

namespace py = pybind11;

namespace scurry::py_binding {

#define RW(cls, field) def_readwrite(#field, &cls::field)

namespace {

// The context of one cNMF verb: the package's CPU context, or a fresh CUDA one.
struct VerbContext {
  std::unique_ptr<Context> own;
  const Context* ctx = nullptr;
  explicit VerbContext(const std::string& device) {
    if (device == "cpu") {
      ctx = &state().context();
      return;
    }
    if (device != "gpu") throw py::value_error("cnmf: device '" + device + "' is not 'cpu' or 'gpu'");
    ContextOptions o;
    o.device = "gpu";
    o.threads = state().threads;
    own = std::make_unique<Context>(Context::create(o));
    ctx = own.get();
  }
};

}  // namespace

void bind_cnmf(py::module_& m) {
  py::class_<CnmfPrepareArgs>(m, "CnmfPrepareArgs")
      .def(py::init<>())
      .RW(CnmfPrepareArgs, components).RW(CnmfPrepareArgs, n_iter).RW(CnmfPrepareArgs, seed)
      .RW(CnmfPrepareArgs, numgenes).RW(CnmfPrepareArgs, genes_file).RW(CnmfPrepareArgs, beta_loss)
      .RW(CnmfPrepareArgs, init).RW(CnmfPrepareArgs, max_nmf_iter).RW(CnmfPrepareArgs, tol)
      .RW(CnmfPrepareArgs, tpm_file).RW(CnmfPrepareArgs, densify);
  py::class_<CnmfConsensusArgs>(m, "CnmfConsensusArgs")
      .def(py::init<>())
      .RW(CnmfConsensusArgs, components).RW(CnmfConsensusArgs, local_density_threshold)
      .RW(CnmfConsensusArgs, local_neighborhood_size).RW(CnmfConsensusArgs, show_clustering)
      .RW(CnmfConsensusArgs, build_reference);

  // The run folder's file names (cNMF's), for load_results and the tests.
  py::class_<CnmfPaths>(m, "CnmfPaths")
      .def(py::init<const std::string&, const std::string&>())
      .def_readonly("dir", &CnmfPaths::dir)
      .def_readonly("tmp", &CnmfPaths::tmp)
      .def_readonly("name", &CnmfPaths::name)
      .def("make_dirs", &CnmfPaths::make_dirs)
      .def("replicate_params", &CnmfPaths::replicate_params)
      .def("consensus_usages", &CnmfPaths::consensus_usages)
      .def("consensus_spectra", &CnmfPaths::consensus_spectra)
      .def("gene_spectra_score", &CnmfPaths::gene_spectra_score)
      .def("gene_spectra_tpm", &CnmfPaths::gene_spectra_tpm)
      .def("consensus_usages_txt", &CnmfPaths::consensus_usages_txt)
      .def("consensus_spectra_txt", &CnmfPaths::consensus_spectra_txt)
      .def("gene_spectra_score_txt", &CnmfPaths::gene_spectra_score_txt)
      .def("gene_spectra_tpm_txt", &CnmfPaths::gene_spectra_tpm_txt)
      .def("starcat_spectra_txt", &CnmfPaths::starcat_spectra_txt)
      .def("clustering_plot", &CnmfPaths::clustering_plot)
      .def("k_selection_plot", &CnmfPaths::k_selection_plot)
      .def("k_selection_stats", &CnmfPaths::k_selection_stats);
  m.def("cnmf_dt_tag", &cnmf_dt_tag);

  m.def("cnmf_prepare", [](const CnmfPaths& p, const std::string& counts, const CnmfPrepareArgs& a,
                           const std::string& device) {
    VerbContext c(device);
    run_step("cnmf prepare", [&] { cnmf_prepare_step(*c.ctx, p, counts, a); });
  });
  m.def("cnmf_factorize", [](const CnmfPaths& p, int worker_index, int total_workers, bool skip_completed_runs,
                             const std::string& device, const std::string& gpus, bool tf32) {
    VerbContext c(device);
    CnmfFactorizeArgs a;
    a.worker_index = worker_index;
    a.total_workers = total_workers;
    a.skip_completed_runs = skip_completed_runs;
    a.tf32 = tf32;
    if (c.ctx->backend() == Backend::cuda) a.gpus = parse_gpus(gpus, cuda_device_count());
    run_step("cnmf factorize", [&] { cnmf_factorize_step(*c.ctx, p, a); });
  });
  m.def("cnmf_combine", [](const CnmfPaths& p, const std::vector<int>& ks, bool skip_missing_files) {
    VerbContext c("cpu");
    run_step("cnmf combine", [&] { cnmf_combine_step(p, ks, skip_missing_files, c.ctx->threads()); });
  });
  m.def("cnmf_consensus", [](const CnmfPaths& p, const CnmfConsensusArgs& a, const std::string& device) {
    VerbContext c(device);
    run_step("cnmf consensus", [&] { cnmf_consensus_step(*c.ctx, p, a); });
  });
  m.def("cnmf_k_selection", [](const CnmfPaths& p, double local_neighborhood_size, const std::string& device) {
    VerbContext c(device);
    run_step("cnmf k_selection_plot", [&] { cnmf_k_selection_step(*c.ctx, p, local_neighborhood_size); });
  });
}

}  // namespace scurry::py_binding
