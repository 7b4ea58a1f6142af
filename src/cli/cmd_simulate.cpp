// scurry simulate OUT.h5ad: seeded synthetic counts with cluster structure (see sim/simulate.hpp).
#include <memory>

#include "cli/commands.hpp"
#include "core/log.hpp"
#include "io/h5ad.hpp"
#include "sim/simulate.hpp"

namespace scurry::cli {

void add_simulate_command(CLI::App& app, GlobalOptions& g) {
  struct Opt {
    std::string output;
    SimulateOptions sim;
  };
  auto o = std::make_shared<Opt>();
  CLI::App* cmd = app.add_subcommand("simulate", "Write a seeded synthetic count matrix with cluster structure");
  cmd->add_option("OUT", o->output, "Output .h5ad file")->required();
  cmd->add_option("--n-cells", o->sim.n_cells, "Cells")->capture_default_str();
  cmd->add_option("--n-genes", o->sim.n_genes, "Genes")->capture_default_str();
  cmd->add_option("--nnz-per-cell", o->sim.nnz_per_cell, "Mean detected genes per cell")->capture_default_str();
  cmd->add_option("--clusters", o->sim.n_clusters, "Clusters")->capture_default_str();
  cmd->add_option("--seed", o->sim.seed, "Seed")->capture_default_str();
  cmd->callback([&g, o] {
    Context ctx = make_context(g);
    check_output_path(o->output, ".h5ad", "OUT");
    Dataset d = simulate(ctx, o->sim);
    log::info("simulated " + d.X.describe());
    make_parent_dirs(o->output);
    write_h5ad(d, o->output);
  });
}

}  // namespace scurry::cli
