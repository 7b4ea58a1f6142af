// scurry: Cell Ranger .h5 reading (v2 genome groups, v3 `matrix` group with `features`), as
// scanpy.read_10x_h5 gives it. The stored matrix is genes x cells in CSC form, i.e. its compressed
// axis runs over cells: those pointers and gene indices are directly the CSR of cells x genes.
#include <algorithm>
#include <limits>

#include "core/error.hpp"
#include "io/hdf5.hpp"
#include "io/tenx.hpp"

namespace scurry {

namespace {

// The genes x cells matrix in group g (data, indices, indptr, shape) as cells x genes CSR.
Matrix read_tenx_matrix(const h5::Group& g) {
  const std::string& path = g.file();
  const std::string where = path + ": " + g.path().substr(1);
  auto shape = g.dataset("shape").read<int64_t>();
  if (shape.size() != 2 || shape[0] < 0 || shape[1] < 0)
    fail_input(path, g.path().substr(1), "/shape must hold two non-negative sizes (genes, cells)");
  if (shape[0] > std::numeric_limits<int32_t>::max())
    fail_input(path, g.path().substr(1), ": too many features for 32-bit indices");
  h5::Dataset data = g.dataset("data"), indices = g.dataset("indices"), indptr = g.dataset("indptr");
  const DType dt = data.dtype();
  CsrF m;
  m.n_rows = shape[1];  // cells
  m.n_cols = shape[0];  // genes
  // Sizes are checked against each other from the dataspaces, before anything is read.
  if (indptr.size() != m.n_rows + 1)
    fail_input(path, g.path().substr(1), ": indptr has length ", indptr.size(), " but there are ", m.n_rows,
               " cells (wrong indptr length)");
  if (data.size() != indices.size())
    fail_input(path, g.path().substr(1), ": data and indices differ in length");
  if (m.n_cols > 0 && m.n_rows > 0 && data.size() / m.n_cols > m.n_rows)
    fail_input(path, g.path().substr(1), ": data holds ", data.size(), " entries, more than the ", m.n_cols, " x ",
               m.n_rows, " matrix has");
  m.indptr = indptr.read<int64_t>();
  if (m.indptr.back() != data.size())
    fail_input(path, g.path().substr(1), ": indptr ends at ", m.indptr.back(), " but data holds ", data.size(),
               " entries (wrong nnz)");
  m.indices = indices.read<int32_t>();
  m.data = data.read<float>();
  validate_csr(m, where);
  return Matrix(std::move(m), dt);
}

std::vector<std::string> read_strs(const h5::Group& g, const std::string& name, int64_t n) {
  auto v = g.dataset(name).read_strings();
  if (static_cast<int64_t>(v.size()) != n)
    fail_input(g.file(), g.path().substr(1), "/", name, " has ", v.size(), " entries, expected ", n,
               " (length mismatch)");
  return v;
}

}  // namespace

Dataset read_10x_h5(const std::string& path, const TenxOptions& opt) {
  h5::File f = h5::File::open(path);
  Dataset d;
  if (f.child_kind("matrix") == h5::Kind::group) {
    // Cell Ranger >= 3.
    h5::Group g = f.group("matrix");
    d.X = read_tenx_matrix(g);
    const int64_t n_cells = d.X.n_rows(), n_genes = d.X.n_cols();
    d.obs.index = read_strs(g, "barcodes", n_cells);
    if (g.child_kind("features") != h5::Kind::group) fail_input(path, "matrix: missing the 'features' group");
    h5::Group fg = g.group("features");
    auto ids = read_strs(fg, "id", n_genes);
    auto names = read_strs(fg, "name", n_genes);
    std::vector<std::string> types =
        fg.has("feature_type") ? read_strs(fg, "feature_type", n_genes) : std::vector<std::string>(n_genes, "Gene Expression");
    std::vector<std::string> genome = fg.has("genome") ? read_strs(fg, "genome", n_genes) : std::vector<std::string>{};
    if (opt.gex_only) {
      std::vector<int64_t> keep;
      for (int64_t j = 0; j < n_genes; ++j)
        if (types[j] == "Gene Expression") keep.push_back(j);
      if (static_cast<int64_t>(keep.size()) != n_genes) {
        d.X = take_cols(d.X, keep);
        auto pick = [&](std::vector<std::string>& v) {
          if (v.empty()) return;
          std::vector<std::string> o(keep.size());
          for (size_t i = 0; i < keep.size(); ++i) o[i] = std::move(v[keep[i]]);
          v = std::move(o);
        };
        pick(ids);
        pick(names);
        pick(types);
        pick(genome);
      }
    }
    d.var.index = make_unique(names);
    d.var.set("gene_ids", Column::strings(std::move(ids)));
    d.var.set("feature_types", Column::strings(std::move(types)));
    if (!genome.empty()) d.var.set("genome", Column::strings(std::move(genome)));
    return d;
  }
  // Cell Ranger 2: one group per genome.
  std::vector<std::string> genomes;
  for (const auto& c : f.children())
    if (f.child_kind(c) == h5::Kind::group && f.has(c + "/barcodes") && f.has(c + "/indptr")) genomes.push_back(c);
  if (genomes.empty())
    fail_input(path, "not a Cell Ranger .h5 file: neither a 'matrix' group (v3) nor genome groups (v2) found");
  std::string genome = opt.genome;
  if (genome.empty()) {
    if (genomes.size() > 1) {
      std::string all;
      for (const auto& gname : genomes) all += (all.empty() ? "" : ", ") + gname;
      fail_input(path, "holds several genomes (", all, "); choose one with the genome option");
    }
    genome = genomes[0];
  } else if (std::find(genomes.begin(), genomes.end(), genome) == genomes.end()) {
    fail_input(path, "no genome '", genome, "' in the file");
  }
  h5::Group g = f.group(genome);
  d.X = read_tenx_matrix(g);
  const int64_t n_cells = d.X.n_rows(), n_genes = d.X.n_cols();
  d.obs.index = read_strs(g, "barcodes", n_cells);
  auto ids = read_strs(g, "genes", n_genes);
  auto names = read_strs(g, "gene_names", n_genes);
  d.var.index = make_unique(names);
  d.var.set("gene_ids", Column::strings(std::move(ids)));
  return d;
}

bool hdf5_looks_like_10x(const std::string& path) {
  h5::File f = h5::File::open(path);
  if (f.has("X")) return false;
  if (f.child_kind("matrix") == h5::Kind::group) return true;
  for (const auto& c : f.children())
    if (f.child_kind(c) == h5::Kind::group && f.has(c + "/barcodes") && f.has(c + "/indptr")) return true;
  return false;
}

}  // namespace scurry
