// scurry convert IN OUT.h5ad: any readable format to h5ad (written atomically).
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "core/log.hpp"
#include "io/h5ad.hpp"
#include "io/read.hpp"

namespace scurry::cli {

namespace {

struct ConvertOptions {
  std::string input, output;
  ReadOptions read;
  H5adWriteOptions write;
};

void run_convert(const GlobalOptions& g, const ConvertOptions& o) {
  log::set_quiet(g.quiet);
  check_output_path(o.output, ".h5ad", "the output");
  check_free_space(o.output, input_bytes(o.input), true);
  make_context(g);
  Format f = Format::unknown;
  const Dataset d = read_any(o.input, f, o.read);
  log::info("read " + o.input + " (" + format_name(f) + "): " + d.X.describe());
  make_parent_dirs(o.output);
  write_h5ad(d, o.output, o.write);
  log::info("wrote " + o.output);
}

}  // namespace

void add_convert_command(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand("convert", "Convert any readable format (h5ad, 10x .h5, 10x mtx directory) to h5ad");
  cmd->add_option("IN", o->input, "Input: an h5ad file, a 10x .h5 file or a 10x mtx directory")->required();
  cmd->add_option("OUT", o->output, "Output .h5ad file (written atomically: no partial file on failure)")->required();
  cmd->add_option("--gex-only", o->read.tenx.gex_only,
                  "10x v3 inputs: keep only 'Gene Expression' features (scanpy's gex_only)")
      ->default_str("true");
  cmd->callback([&g, o] { run_convert(g, *o); });
}

}  // namespace scurry::cli
