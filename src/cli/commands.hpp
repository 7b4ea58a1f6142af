// scurry CLI: every subcommand registers itself into the CLI11 app through one function, defined in
// its own file cmd_<name>.cpp. The subcommand's callback does the work; errors propagate as
// scurry::Error / InputError to main(), which prints them and sets the exit code.
#pragma once
#include <CLI/CLI.hpp>

#include "cli/common.hpp"

namespace scurry::cli {

void add_info_command(CLI::App& app, GlobalOptions& g);     // cmd_info.cpp
void add_convert_command(CLI::App& app, GlobalOptions& g);  // cmd_convert.cpp
void add_run_command(CLI::App& app, GlobalOptions& g);      // cmd_run.cpp
void add_step_commands(CLI::App& app, GlobalOptions& g);    // cmd_steps.cpp: one subcommand per step
void add_simulate_command(CLI::App& app, GlobalOptions& g); // cmd_simulate.cpp
void add_bench_command(CLI::App& app, GlobalOptions& g);    // cmd_bench.cpp
void add_cnmf_command(CLI::App& app, GlobalOptions& g);     // cmd_cnmf.cpp
void add_report_command(CLI::App& app, GlobalOptions& g);   // cmd_report.cpp
void add_integrate_commands(CLI::App& app, GlobalOptions& g);  // cmd_integrate.cpp: harmony, combat, ...
void add_tl_commands(CLI::App& app, GlobalOptions& g);      // cmd_tl.cpp: tsne, diffmap, dpt, paga, ...

}  // namespace scurry::cli
