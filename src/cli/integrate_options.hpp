// scurry CLI: options of the batch tools (harmony-integrate, combat, regress-out, scrublet; issue 21),
// bound once for their own subcommands (cmd_integrate.cpp) and for `scurry run` (--integrate harmony,
// --scrublet). Names are scanpy's parameter names with dashes; defaults come from the Options structs.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "core/dataset.hpp"
#include "exec/context.hpp"
#include "graph/neighbors.hpp"
#include "pp/harmony.hpp"
#include "pp/scrublet.hpp"

namespace scurry::cli {

// The Harmony parameters as --<prefix><name> (e.g. --theta, or --harmony-theta in `run`); with no
// prefix also --key (repeatable; `run` takes the batch from --batch-key unless --harmony-key is given).
void add_harmony_options(CLI::App& cmd, HarmonyOptions& o, const std::string& prefix);
// The Scrublet parameters as --<prefix><name>; with no prefix also --batch-key (`run` shares its own).
void add_scrublet_options(CLI::App& cmd, ScrubletOptions& o, const std::string& prefix);

struct RunOptions;
// `scurry run`'s --integrate, --harmony-key, --harmony-*, --scrublet, --scrublet-* options.
void add_run_integrate_options(CLI::App& cmd, RunOptions& o);
// The run's steps: Scrublet on the counts (batch_key = --batch-key), Harmony on X_pca (keys =
// --harmony-key, else --batch-key; an InputError naming the input when neither is given), on one
// rank; with several o.gpus (--gpus) Harmony runs over them (harmony_gpus).
void run_scrublet(const Context& ctx, Dataset& d, const RunOptions& o);
void run_harmony(const Context& ctx, Dataset& d, const RunOptions& o);
// The run's neighbors options, on the integrated embedding after --integrate harmony (unless
// --use-rep names another).
NeighborsOptions integrated(const RunOptions& o);

}  // namespace scurry::cli
