// scurry info FILE: format, shape, nnz, X encoding and dtype, and every slot. h5ad files and zarr
// stores are summarised from their metadata without reading matrix values; other formats are read.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "core/dataset.hpp"
#include "io/format.hpp"
#include "io/h5ad.hpp"
#include "io/read.hpp"
#include "io/zarr.hpp"

namespace scurry::cli {

namespace {

struct InfoOptions {
  std::string path;
};

std::string shape_string(const std::vector<int64_t>& shape) {
  if (shape.empty()) return "scalar";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? " x " : "") + std::to_string(shape[i]);
  return s;
}

void print_header(const std::string& path, const std::string& format, int64_t n_obs, int64_t n_vars,
                  const std::string& x_encoding, const std::string& x_dtype, int64_t nnz) {
  const double cells = static_cast<double>(n_obs) * static_cast<double>(n_vars);
  std::printf("file      %s\n", path.c_str());
  std::printf("format    %s\n", format.c_str());
  std::printf("shape     %lld x %lld (cells x genes)\n", static_cast<long long>(n_obs), static_cast<long long>(n_vars));
  std::printf("X         %s %s\n", x_encoding.c_str(), x_dtype.c_str());
  std::printf("nnz       %lld (%.2f%% of entries stored)\n", static_cast<long long>(nnz),
              cells > 0 ? 100.0 * static_cast<double>(nnz) / cells : 0.0);
}

void print_slots(const std::vector<SlotInfo>& slots) {
  size_t w = 4, we = 8;
  for (const auto& s : slots) {
    w = std::max(w, s.name.size());
    we = std::max(we, s.encoding.size());
  }
  std::printf("\n%-*s  %-*s  %-8s  %s\n", static_cast<int>(w), "slot", static_cast<int>(we), "encoding", "dtype", "shape");
  for (const auto& s : slots)
    std::printf("%-*s  %-*s  %-8s  %s\n", static_cast<int>(w), s.name.c_str(), static_cast<int>(we), s.encoding.c_str(),
                s.dtype.empty() ? "-" : s.dtype.c_str(), s.shape.empty() ? "-" : shape_string(s.shape).c_str());
}

SlotInfo matrix_slot(const std::string& name, const Matrix& m) {
  return {name, m.is_sparse() ? "csr_matrix" : "array", dtype_name(m.dtype), {m.n_rows(), m.n_cols()}};
}

void table_slots(const std::string& prefix, const Table& t, std::vector<SlotInfo>& out) {
  out.push_back({prefix + "/" + t.index_name, "string-array", "str", {t.n_rows()}});
  for (const auto& name : t.names()) {
    const Column& c = t.at(name);
    SlotInfo s{prefix + "/" + name, "", "", {c.size()}};
    if (auto* n = std::get_if<NumericColumn>(&c.c)) {
      s.encoding = "array";
      s.dtype = dtype_name(n->dtype);
    } else if (std::holds_alternative<BoolColumn>(c.c)) {
      s.encoding = "array";
      s.dtype = "bool";
    } else if (std::holds_alternative<StringColumn>(c.c)) {
      s.encoding = "string-array";
      s.dtype = "str";
    } else {
      s.encoding = "categorical";
      s.dtype = std::to_string(std::get<CategoricalColumn>(c.c).categories.size()) + " cats";
    }
    out.push_back(std::move(s));
  }
}

// The slots of an in-memory dataset, named as in an h5ad file.
std::vector<SlotInfo> dataset_slots(const Dataset& d) {
  std::vector<SlotInfo> s;
  s.push_back(matrix_slot("X", d.X));
  table_slots("obs", d.obs, s);
  table_slots("var", d.var, s);
  for (const auto& [group, slots] : {std::pair{"layers", &d.layers}, std::pair{"obsm", &d.obsm},
                                     std::pair{"varm", &d.varm}, std::pair{"obsp", &d.obsp}, std::pair{"varp", &d.varp}})
    for (const auto& [k, m] : *slots) s.push_back(matrix_slot(std::string(group) + "/" + k, m));
  for (const auto& [k, v] : d.uns) s.push_back({"uns/" + k, v.is_dict() ? "dict" : "value", "", {}});
  return s;
}

void run_info(const GlobalOptions& g, const InfoOptions& o) {
  make_context(g);  // applies --quiet; info itself computes nothing
  const Format f = detect_format(o.path);
  if (f == Format::h5ad) {
    const H5adSummary s = summarize_h5ad(o.path);
    std::string fmt = "h5ad";
    if (!s.anndata_encoding_version.empty()) fmt += " (anndata encoding-version " + s.anndata_encoding_version + ")";
    print_header(o.path, fmt, s.n_obs, s.n_vars, s.x_encoding, s.x_dtype, s.x_nnz);
    print_slots(s.slots);
    return;
  }
  if (f == Format::zarr) {
    const H5adSummary s = summarize_zarr(o.path);
    std::string fmt = "zarr";
    if (!s.anndata_encoding_version.empty()) fmt += " (anndata encoding-version " + s.anndata_encoding_version + ")";
    print_header(o.path, fmt, s.n_obs, s.n_vars, s.x_encoding, s.x_dtype, s.x_nnz);
    print_slots(s.slots);
    return;
  }
  const Dataset d = read_any(o.path);
  print_header(o.path, format_name(f), d.n_obs(), d.n_vars(), d.X.is_sparse() ? "csr_matrix" : "array",
               dtype_name(d.X.dtype), d.X.nnz());
  print_slots(dataset_slots(d));
}

}  // namespace

void add_info_command(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info", "Describe a dataset: format, shape, nnz, X encoding and dtype, every slot");
  cmd->add_option("FILE", o->path, "An h5ad file, a zarr store, a 10x .h5 file or a 10x mtx directory")->required();
  cmd->callback([&g, o] { run_info(g, *o); });
}

}  // namespace scurry::cli
