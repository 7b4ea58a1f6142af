// scurry convert IN OUT: any readable format to h5ad (OUT.h5ad, optionally gzip-compressed) or to a
// zarr store (OUT.zarr: blosc-lz4, zstd, gzip or no compression; zarr format 2 or 3). Written
// atomically.
#include <filesystem>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/h5ad.hpp"
#include "io/zarr.hpp"
#include "io/read.hpp"

namespace scurry::cli {

namespace {

struct ConvertOptions {
  std::string input, output;
  ReadOptions read;
  H5adWriteOptions write;
  ZarrWriteOptions zarr;
  std::string codec = "blosc-lz4";
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void run_convert(const GlobalOptions& g, ConvertOptions o) {
  log::set_quiet(g.quiet);
  std::string out = o.output;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  const bool zarr = ends_with(out, ".zarr");
  if (zarr) o.zarr.codec = parse_zarr_codec(o.codec);
  if (o.write.gzip_level < 0 || o.write.gzip_level > 9) fail_input("--gzip", "the level must be 0 to 9, got ", o.write.gzip_level);
  if (zarr && o.write.gzip_level) fail_input("--gzip", "is for h5ad outputs; a zarr store takes --compressor gzip");
  if (o.zarr.format != 2 && o.zarr.format != 3) fail_input("--zarr-format", "must be 2 or 3, got ", o.zarr.format);
  std::error_code ec;
  // (an existing zarr store is replaced by write_zarr, which refuses any other directory)
  if (!(zarr && std::filesystem::is_directory(out, ec))) check_output_path(out, zarr ? ".zarr" : ".h5ad", "the output");
  check_free_space(o.output, input_bytes(o.input), true);
  make_context(g);
  Format f = Format::unknown;
  const Dataset d = read_any(o.input, f, o.read);
  log::info("read " + o.input + " (" + format_name(f) + "): " + d.X.describe());
  make_parent_dirs(out);
  if (zarr)
    write_zarr(d, out, o.zarr);
  else
    write_h5ad(d, out, o.write);
  log::info("wrote " + out);
}

}  // namespace

void add_convert_command(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand("convert", "Convert any readable format (h5ad, zarr, 10x .h5, 10x mtx directory) to h5ad or zarr");
  cmd->add_option("IN", o->input, "Input: an h5ad file, a zarr store, a 10x .h5 file or a 10x mtx directory")->required();
  cmd->add_option("OUT", o->output,
                  "Output: a .h5ad file, or a .zarr store (written atomically: no partial output on failure)")
      ->required();
  cmd->add_option("--gzip", o->write.gzip_level, "h5ad output: gzip level of the matrices and arrays (0 = none)")
      ->default_val(0);
  cmd->add_option("--compressor", o->codec, "zarr output: compressor of every chunk: blosc-lz4 (anndata's default), blosc-zstd (blosc's byte shuffle, then zstd: "
                  "the smallest and fastest to read of these for counts), zstd, gzip or none")
      ->default_val("blosc-lz4");
  cmd->add_option("--level", o->zarr.level, "zarr output: compression level (-1: the compressor's default)")->default_val(-1);
  cmd->add_option("--chunk-elems", o->zarr.chunk_elems,
                  "zarr output: values per chunk of the 1-D arrays (CSR data, indices, indptr; columns); 0: 2^18")
      ->default_val(0)
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--zarr-format", o->zarr.format, "zarr output: zarr format 2 (every anndata) or 3 (anndata >= 0.11)")
      ->default_val(2);
  cmd->add_option("--gex-only", o->read.tenx.gex_only,
                  "10x v3 inputs: keep only 'Gene Expression' features (scanpy's gex_only)")
      ->default_str("true");
  cmd->callback([&g, o] { run_convert(g, *o); });
}

}  // namespace scurry::cli
