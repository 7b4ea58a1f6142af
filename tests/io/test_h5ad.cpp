// h5ad reading/writing: round trips of every slot type, the shared real files (checked against the
// 10x mtx text and against each other), the lazy row reader, anndata 0.7-style files made with the
// HDF5 C API, atomic writes, and (when SCURRY_WRITE_SAMPLE is set) the sample for the Python client.
#include <hdf5.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <cstring>
#include <mutex>
#include <condition_variable>
#include <thread>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.hpp"
#include "io/h5ad.hpp"
#include "io/hdf5.hpp"
#include "io/sample_datasets.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

namespace fs = std::filesystem;

// ---- HDF5 C API helpers (test files made without scurry's writer) -------------------------------

struct H {
  hid_t id;
  explicit H(hid_t i) : id(i) { EXPECT_GE(i, 0); }
  ~H() { if (id >= 0) H5Idec_ref(id); }
  operator hid_t() const { return id; }
};

void c_attr_str(hid_t obj, const char* name, const std::string& value) {
  H t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  H s(H5Screate(H5S_SCALAR));
  H a(H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT));
  const char* p = value.c_str();
  H5Awrite(a, t, &p);
}

void c_attr_i64(hid_t obj, const char* name, std::vector<int64_t> v) {
  hsize_t n = v.size();
  H s(H5Screate_simple(1, &n, nullptr));
  H a(H5Acreate2(obj, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT));
  H5Awrite(a, H5T_NATIVE_INT64, v.data());
}

template <class T>
void c_write(hid_t loc, const char* name, hid_t mem, hid_t file, const std::vector<T>& v,
             std::vector<hsize_t> dims = {}) {
  if (dims.empty()) dims = {v.size()};
  H s(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  H d(H5Dcreate2(loc, name, file, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!v.empty()) {
    EXPECT_GE(H5Dwrite(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  }
}

// Fixed-length ASCII strings, as anndata 0.7 / numpy 'S' arrays store them.
void c_write_fixed_strings(hid_t loc, const char* name, const std::vector<std::string>& v) {
  size_t w = 1;
  for (const auto& s : v) w = std::max(w, s.size());
  std::vector<char> buf(v.size() * w, '\0');
  for (size_t i = 0; i < v.size(); ++i) std::copy(v[i].begin(), v[i].end(), buf.begin() + i * w);
  H t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t, w);
  H5Tset_strpad(t, H5T_STR_NULLPAD);
  hsize_t n = v.size();
  H s(H5Screate_simple(1, &n, nullptr));
  H d(H5Dcreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
}

// ---- oracles for the real data (tests/data, data/) ----------------------------------------------

std::vector<std::string> read_gz_lines(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  std::string all;
  char buf[65536];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) all.append(buf, static_cast<size_t>(n));
  gzclose(f);
  std::vector<std::string> lines;
  std::istringstream is(all);
  std::string l;
  while (std::getline(is, l)) lines.push_back(l);
  return lines;
}

}  // namespace

// ---- tests ---------------------------------------------------------------------------------------

TEST(H5ad, RoundTripEverySlot) {
  const uint64_t seed = test::fresh_seed();
  test::TempDir tmp;
  for (int kind = 0; kind < 5; ++kind) {
    SCOPED_TRACE("X kind " + std::to_string(kind));
    Dataset d = random_dataset(seed + kind, kind);
    const std::string p = tmp.path("rt" + std::to_string(kind) + ".h5ad");
    write_h5ad(d, p, {kind % 2 ? 4 : 0});  // with and without gzip
    Dataset r = read_h5ad(p);
    expect_dataset_eq(d, r);
    // Written again from what was read: identical again.
    write_h5ad(r, p);
    expect_dataset_eq(d, read_h5ad(p));
  }
}

// The parallel pread path for contiguous datasets (hdf5.cpp; forced for every size here) reads what
// H5Dread reads: random datasets of every X kind, with and without gzip (chunked: H5Dread), and a
// file truncated inside X/data (an error naming the file, as H5Dread's).
TEST(H5ad, ParallelContiguousReadEqualsHdf5Read) {
  const uint64_t seed = test::fresh_seed();
  test::TempDir tmp;
  struct Env {
    explicit Env(const char* v) { setenv("SCURRY_H5_PREAD", v, 1); }
    ~Env() { unsetenv("SCURRY_H5_PREAD"); }
  };
  for (int kind = 0; kind < 5; ++kind) {
    SCOPED_TRACE("X kind " + std::to_string(kind));
    Dataset d = random_dataset(seed + kind, kind);
    const std::string p = tmp.path("pr" + std::to_string(kind) + ".h5ad");
    write_h5ad(d, p, {kind % 2 ? 4 : 0});
    Dataset a, b;
    {
      Env e("force");
      a = read_h5ad(p);
    }
    {
      Env e("0");
      b = read_h5ad(p);
    }
    expect_dataset_eq(d, a);
    expect_dataset_eq(b, a);
  }
  const Dataset pb = read_h5ad(test::test_data("pbmc3k_first1000.h5ad"));
  const std::string p = tmp.path("pbmc.h5ad");
  write_h5ad(pb, p);
  {
    Env e("force");
    expect_dataset_eq(pb, read_h5ad(p));
  }
  fs::resize_file(p, fs::file_size(p) / 2);  // X/data is the file's largest piece
  Env e("force");
  try {
    read_h5ad(p);
    ADD_FAILURE() << "a truncated file was read";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find(p), std::string::npos) << err.what();
  }
}

// The parallel pread path for chunked datasets without filters (hdf5.cpp; h5py's chunks=True files)
// reads what H5Dread reads: 1-D with a partial last chunk, 2-D chunked by rows, and the layouts it
// must leave to H5Dread (chunks across columns, an unwritten chunk, gzip); a file truncated inside
// a chunk is an error naming the file.
TEST(H5ad, ParallelChunkedReadEqualsHdf5Read) {
  Rng rng(test::fresh_seed());
  test::TempDir tmp;
  const std::string p = tmp.path("chunked.h5");
  struct Spec {
    const char* name;
    std::vector<hsize_t> dims, chunk;
    bool gzip = false, skip_one = false;
  };
  const hsize_t n1 = static_cast<hsize_t>(rng.integer(20000, 40000)), rows = static_cast<hsize_t>(rng.integer(900, 1500));
  const std::vector<Spec> specs = {{"one", {n1}, {1000}},
                                   {"rows", {rows, 13}, {64, 13}},
                                   {"cols", {rows, 13}, {64, 5}},
                                   {"hole", {n1}, {1000}, false, true},
                                   {"gz", {n1}, {1000}, true}};
  std::map<std::string, std::vector<float>> want;
  {
    hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    for (const Spec& sp : specs) {
      hsize_t n = 1;
      for (hsize_t x : sp.dims) n *= x;
      std::vector<float> v(n);
      for (float& x : v) x = static_cast<float>(rng.normal());
      hid_t space = H5Screate_simple(static_cast<int>(sp.dims.size()), sp.dims.data(), nullptr);
      hid_t pl = H5Pcreate(H5P_DATASET_CREATE);
      H5Pset_chunk(pl, static_cast<int>(sp.chunk.size()), sp.chunk.data());
      if (sp.gzip) H5Pset_deflate(pl, 4);
      hid_t d = H5Dcreate2(f, sp.name, H5T_NATIVE_FLOAT, space, H5P_DEFAULT, pl, H5P_DEFAULT);
      if (sp.skip_one) {  // every chunk but the third written: it reads as the fill value, 0
        std::fill(v.begin() + 2000, v.begin() + 3000, 0.0f);
        for (hsize_t c = 0; c * 1000 < n; ++c) {
          if (c == 2) continue;
          hsize_t start = c * 1000, count = std::min<hsize_t>(1000, n - start);
          hid_t fs_ = H5Dget_space(d);
          H5Sselect_hyperslab(fs_, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
          hid_t ms = H5Screate_simple(1, &count, nullptr);
          H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs_, H5P_DEFAULT, v.data() + start);
          H5Sclose(ms);
          H5Sclose(fs_);
        }
      } else {
        H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
      }
      H5Dclose(d);
      H5Pclose(pl);
      H5Sclose(space);
      want[sp.name] = std::move(v);
    }
    H5Fclose(f);
  }
  auto read = [&](const char* name, const char* mode) {
    setenv("SCURRY_H5_PREAD", mode, 1);
    std::vector<float> v = h5::File::open(p).dataset(name).read<float>();
    unsetenv("SCURRY_H5_PREAD");
    return v;
  };
  for (const Spec& sp : specs) {
    SCOPED_TRACE(sp.name);
    const std::vector<float> fast = read(sp.name, "force"), slow = read(sp.name, "0");
    EXPECT_EQ(fast, want[sp.name]);
    EXPECT_EQ(slow, want[sp.name]);
  }
  // A truncated file: an error naming it (from HDF5's open, or the read's own size check).
  fs::resize_file(p, fs::file_size(p) / 3);
  int failed = 0;
  for (const char* name : {"one", "rows"}) {
    try {
      read(name, "force");
    } catch (const InputError& err) {
      ++failed;
      EXPECT_NE(std::string(err.what()).find(p), std::string::npos) << err.what();
    }
  }
  EXPECT_EQ(failed, 2);
}

// The mapped write of large contiguous datasets (hdf5.cpp; forced for every size here) writes what
// H5Dwrite writes: every X kind, with and without gzip (chunked: H5Dwrite), read back through H5Dread.
TEST(H5ad, MappedContiguousWriteEqualsHdf5Write) {
  const uint64_t seed = test::fresh_seed();
  test::TempDir tmp;
  struct Env {
    Env(const char* k, const char* v) : k_(k) { setenv(k, v, 1); }
    ~Env() { unsetenv(k_); }
    const char* k_;
  };
  Env plain_read("SCURRY_H5_PREAD", "0");
  for (int kind = 0; kind < 5; ++kind) {
    SCOPED_TRACE("X kind " + std::to_string(kind));
    Dataset d = random_dataset(seed + kind, kind);
    const std::string fast = tmp.path("mw" + std::to_string(kind) + ".h5ad"),
                      slow = tmp.path("hw" + std::to_string(kind) + ".h5ad");
    {
      Env e("SCURRY_H5_MMAP_WRITE", "force");
      write_h5ad(d, fast, {kind % 2 ? 4 : 0});
    }
    {
      Env e("SCURRY_H5_MMAP_WRITE", "0");
      write_h5ad(d, slow, {kind % 2 ? 4 : 0});
    }
    const Dataset a = read_h5ad(fast);
    expect_dataset_eq(d, a);
    expect_dataset_eq(read_h5ad(slow), a);
  }
}

TEST(H5ad, ReadOptionsSkipRawAndLayers) {
  test::TempDir tmp;
  Dataset d = random_dataset(test::fresh_seed(), 0);
  write_h5ad(d, tmp.path("a.h5ad"));
  H5adReadOptions o;
  o.read_raw = false, o.read_layers = false;
  Dataset r = read_h5ad(tmp.path("a.h5ad"), o);
  EXPECT_FALSE(r.raw);
  EXPECT_TRUE(r.layers.empty());
  expect_matrix_eq(d.X, r.X, "X");
}

TEST(H5ad, ReadsPbmcAgainstMtx) {
  Dataset d = read_h5ad(test::test_data("pbmc3k_first1000.h5ad"));
  ASSERT_EQ(d.n_obs(), 1000);
  ASSERT_EQ(d.n_vars(), 13714);
  ASSERT_TRUE(d.X.is_sparse());
  EXPECT_EQ(d.X.nnz(), 845352);
  EXPECT_EQ(d.X.dtype, DType::f32);
  EXPECT_TRUE(d.var.has("gene_ids"));
  // Oracle: the same matrix as 10x mtx text (genes x cells, 1-based), parsed here.
  const std::string dir = test::repo_data("pbmc3k_first1000_10x_mtx/");
  auto lines = read_gz_lines(dir + "matrix.mtx.gz");
  size_t li = 0;
  while (li < lines.size() && lines[li][0] == '%') ++li;
  ++li;  // size line
  const CsrF& x = d.X.csr_f();
  std::map<std::pair<int64_t, int64_t>, float> want;
  for (; li < lines.size(); ++li) {
    std::istringstream is(lines[li]);
    int64_t g, c;
    double v;
    is >> g >> c >> v;
    want[{c - 1, g - 1}] = static_cast<float>(v);
  }
  ASSERT_EQ(static_cast<int64_t>(want.size()), x.nnz());
  for (int64_t r = 0; r < x.n_rows; ++r)
    for (int64_t p = x.indptr[r]; p < x.indptr[r + 1]; ++p) {
      auto it = want.find({r, x.indices[p]});
      ASSERT_NE(it, want.end()) << r << "," << x.indices[p];
      ASSERT_EQ(it->second, x.data[p]);
    }
  auto barcodes = read_gz_lines(dir + "barcodes.tsv.gz");
  EXPECT_EQ(barcodes, d.obs.index);
  auto feats = read_gz_lines(dir + "features.tsv.gz");
  ASSERT_EQ(feats.size(), 13714u);
  const auto& ids = std::get<StringColumn>(d.var.at("gene_ids").c).values;
  for (size_t i = 0; i < feats.size(); ++i) {
    std::istringstream is(feats[i]);
    std::string id, name;
    std::getline(is, id, '\t');
    std::getline(is, name, '\t');
    ASSERT_EQ(id, ids[i]);
    ASSERT_EQ(name, d.var.index[i]);
  }
}

TEST(H5ad, ReadsScanpyGolden) {
  Dataset d = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"));
  ASSERT_EQ(d.n_obs(), 1000);
  ASSERT_EQ(d.n_vars(), 2000);
  ASSERT_TRUE(d.X.is_dense());
  EXPECT_EQ(d.X.n_rows(), 1000);
  EXPECT_EQ(d.X.n_cols(), 2000);
  ASSERT_TRUE(d.layers.count("counts"));
  EXPECT_TRUE(d.layers.at("counts").is_sparse());
  ASSERT_TRUE(d.obsm.count("X_pca"));
  EXPECT_EQ(d.obsm.at("X_pca").n_rows(), 1000);
  EXPECT_EQ(d.obsm.at("X_pca").n_cols(), 50);
  EXPECT_EQ(d.varm.at("PCs").n_rows(), 2000);
  ASSERT_TRUE(d.obsp.count("distances") && d.obsp.count("connectivities"));
  EXPECT_EQ(d.obsp.at("distances").dtype, DType::f64);
  EXPECT_EQ(d.obsp.at("distances").nnz(), 14000);
  ASSERT_TRUE(d.raw);
  EXPECT_EQ(d.raw->X.n_cols(), 11780);
  EXPECT_EQ(d.raw->var.n_rows(), 11780);
  const auto& leiden = std::get<CategoricalColumn>(d.obs.at("leiden").c);
  EXPECT_EQ(leiden.categories.size(), 7u);
  EXPECT_FALSE(leiden.ordered);
  for (auto c : leiden.codes) ASSERT_TRUE(c >= 0 && c < 7);
  EXPECT_EQ(std::get<NumericColumn>(d.obs.at("n_genes").c).dtype, DType::i64);
  EXPECT_EQ(std::get<NumericColumn>(d.obs.at("n_genes_by_counts").c).dtype, DType::i32);
  EXPECT_TRUE(std::holds_alternative<BoolColumn>(d.var.at("mt").c));
  // uns nesting and scalar types.
  const Dict& nb = d.uns.at("neighbors").dict().at("params").dict();
  EXPECT_EQ(std::get<int64_t>(nb.at("n_neighbors").v), 15);
  EXPECT_EQ(std::get<std::string>(nb.at("method").v), "umap");
  EXPECT_EQ(std::get<std::string>(d.uns.at("neighbors").dict().at("distances_key").v), "distances");
  EXPECT_EQ(std::get<bool>(d.uns.at("pca").dict().at("params").dict().at("zero_center").v), true);
  EXPECT_DOUBLE_EQ(std::get<double>(d.uns.at("leiden").dict().at("params").dict().at("resolution").v), 1.0);
  const auto& var = std::get<NumArray>(d.uns.at("pca").dict().at("variance").v);
  EXPECT_EQ(var.shape, std::vector<int64_t>{50});
  EXPECT_EQ(var.dtype, DType::f32);
  EXPECT_TRUE(d.uns.at("log1p").is_dict());

  // Oracle across files: layers/counts are the pbmc counts of the 2000 kept genes.
  Dataset pbmc = read_h5ad(test::test_data("pbmc3k_first1000.h5ad"));
  std::map<std::string, int64_t> col;
  for (int64_t j = 0; j < pbmc.n_vars(); ++j) col[pbmc.var.index[j]] = j;
  std::vector<int64_t> keep;
  for (const auto& gname : d.var.index) keep.push_back(col.at(gname));
  const DenseD want = to_dense_d(take_cols(pbmc.X, keep));
  const DenseD got = to_dense_d(d.layers.at("counts"));
  EXPECT_EQ(want.data, got.data);

  // The golden file round-trips exactly.
  test::TempDir tmp;
  write_h5ad(d, tmp.path("g.h5ad"));
  expect_dataset_eq(d, read_h5ad(tmp.path("g.h5ad")));
}

TEST(H5ad, SummaryWithoutReadingValues) {
  H5adSummary s = summarize_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"));
  EXPECT_EQ(s.n_obs, 1000);
  EXPECT_EQ(s.n_vars, 2000);
  EXPECT_EQ(s.x_encoding, "array");
  EXPECT_EQ(s.x_dtype, "float32");
  EXPECT_EQ(s.x_nnz, 2000000);
  EXPECT_EQ(s.anndata_encoding_version, "0.1.0");
  std::map<std::string, SlotInfo> by;
  for (const auto& x : s.slots) by[x.name] = x;
  ASSERT_TRUE(by.count("obsm/X_pca"));
  EXPECT_EQ(by["obsm/X_pca"].shape, (std::vector<int64_t>{1000, 50}));
  EXPECT_EQ(by["obs/leiden"].encoding, "categorical");
  EXPECT_EQ(by["layers/counts"].encoding, "csr_matrix");
  EXPECT_EQ(by["layers/counts"].shape, (std::vector<int64_t>{1000, 2000}));
  EXPECT_EQ(by["obsp/distances"].dtype, "float64");
  EXPECT_EQ(by["uns/neighbors/params/n_neighbors"].encoding, "numeric-scalar");
  EXPECT_EQ(by["raw/X"].shape, (std::vector<int64_t>{1000, 11780}));
  H5adSummary p = summarize_h5ad(test::test_data("pbmc3k_first1000.h5ad"));
  EXPECT_EQ(p.x_encoding, "csr_matrix");
  EXPECT_EQ(p.x_nnz, 845352);
}

namespace {
void expect_blocks_equal(const std::string& path, const std::string& slot, const CsrF& whole, int64_t block) {
  SCOPED_TRACE(path + ":" + slot);
  H5adRowReader rr(path, slot);
  ASSERT_EQ(rr.n_rows(), whole.n_rows);
  ASSERT_EQ(rr.n_cols(), whole.n_cols);
  EXPECT_EQ(rr.nnz(), whole.nnz());
  EXPECT_EQ(rr.row_pointers(), whole.indptr);
  // Blocks concatenated (each block's pointers are relative to the block).
  CsrF cat = CsrF::zeros(0, whole.n_cols);
  for (int64_t b = 0; b < rr.n_rows(); b += block) {
    CsrF part = rr.read_rows(b, std::min(rr.n_rows(), b + block));
    ASSERT_EQ(part.n_rows, std::min(rr.n_rows(), b + block) - b);
    ASSERT_EQ(part.indptr.front(), 0);
    const int64_t base = cat.nnz();
    for (int64_t r = 0; r < part.n_rows; ++r) cat.indptr.push_back(base + part.indptr[r + 1]);
    cat.indices.insert(cat.indices.end(), part.indices.begin(), part.indices.end());
    cat.data.insert(cat.data.end(), part.data.begin(), part.data.end());
    cat.n_rows += part.n_rows;
  }
  EXPECT_EQ(cat.indptr, whole.indptr);
  EXPECT_EQ(cat.indices, whole.indices);
  EXPECT_EQ(cat.data, whole.data);
}
}  // namespace

TEST(H5ad, RowReaderMatchesWholeRead) {
  const std::string pbmc = test::test_data("pbmc3k_first1000.h5ad");
  expect_blocks_equal(pbmc, "X", read_h5ad(pbmc).X.csr_f(), 97);
  const std::string golden = test::test_data("golden/pbmc3k_first1000.scanpy.h5ad");
  Dataset g = read_h5ad(golden);
  expect_blocks_equal(golden, "X", to_csr_f(g.X), 128);  // dense
  expect_blocks_equal(golden, "layers/counts", to_csr_f(g.layers.at("counts")), 333);
  // float64 CSR of a written file
  test::TempDir tmp;
  Dataset d = random_dataset(test::fresh_seed(), 1);
  write_h5ad(d, tmp.path("d.h5ad"));
  expect_blocks_equal(tmp.path("d.h5ad"), "X", to_csr_f(d.X), 7);
  EXPECT_THROW(H5adRowReader(tmp.path("d.h5ad"), "layers/nope"), InputError);
}

// An anndata 0.7-style file made with the C API: X stored as csc_matrix with int64 indices and
// indptr and int32 values, obs without encoding attributes whose categorical column is codes with a
// `categories` object reference into __categories, fixed-length ASCII strings.
TEST(H5ad, ReadsOldStyleCscFileMadeWithCApi) {
  Rng rng(test::fresh_seed());
  const int64_t n = 23, g = 17;
  CsrF want = random_csr<float>(n, g, 0.3, rng, true);
  CsrF csc = transpose(want);  // genes x cells == CSC of cells x genes
  test::TempDir tmp;
  const std::string p = tmp.path("old.h5ad");
  std::vector<std::string> cells = unique_names(n, "c", rng), genes = unique_names(g, "g", rng);
  for (auto& s : cells) s = "cell" + std::to_string(&s - cells.data());  // ASCII only
  for (auto& s : genes) s = "gene" + std::to_string(&s - genes.data());
  std::vector<int8_t> codes(n);
  for (auto& c : codes) c = static_cast<int8_t>(rng.integer(0, 2));
  {
    H f(H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    {
      H x(H5Gcreate2(f, "X", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      c_attr_str(x, "encoding-type", "csc_matrix");
      c_attr_str(x, "encoding-version", "0.1.0");
      c_attr_i64(x, "shape", {n, g});
      std::vector<int32_t> data(csc.data.begin(), csc.data.end());
      std::vector<int64_t> idx(csc.indices.begin(), csc.indices.end());
      c_write(x, "data", H5T_NATIVE_INT32, H5T_STD_I32LE, data);
      c_write(x, "indices", H5T_NATIVE_INT64, H5T_STD_I64LE, idx);
      c_write(x, "indptr", H5T_NATIVE_INT64, H5T_STD_I64LE, csc.indptr);
    }
    {
      H o(H5Gcreate2(f, "obs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      c_attr_str(o, "_index", "index");
      c_write_fixed_strings(o, "index", cells);
      H cg(H5Gcreate2(o, "__categories", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      c_write_fixed_strings(cg, "kind", {"alpha", "beta", "gamma"});
      c_write(o, "kind", H5T_NATIVE_INT8, H5T_STD_I8LE, codes);
      H d(H5Dopen2(o, "kind", H5P_DEFAULT));
      hobj_ref_t ref;
      H5Rcreate(&ref, f, "/obs/__categories/kind", H5R_OBJECT, -1);
      H s(H5Screate(H5S_SCALAR));
      H a(H5Acreate2(d, "categories", H5T_STD_REF_OBJ, s, H5P_DEFAULT, H5P_DEFAULT));
      H5Awrite(a, H5T_STD_REF_OBJ, &ref);
      std::vector<double> score(n, 0.25);
      c_write(o, "score", H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, score);
    }
    {
      H v(H5Gcreate2(f, "var", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      c_attr_str(v, "_index", "index");
      c_write_fixed_strings(v, "index", genes);
    }
  }
  Dataset d = read_h5ad(p);
  EXPECT_EQ(d.X.dtype, DType::i32);
  expect_matrix_eq(d.X, Matrix(want, DType::i32), "X");
  EXPECT_EQ(d.obs.index, cells);
  EXPECT_EQ(d.var.index, genes);
  const auto& kind = std::get<CategoricalColumn>(d.obs.at("kind").c);
  EXPECT_EQ(kind.categories, (std::vector<std::string>{"alpha", "beta", "gamma"}));
  EXPECT_EQ(kind.codes, std::vector<int32_t>(codes.begin(), codes.end()));
  EXPECT_EQ(d.obs.numeric("score"), std::vector<double>(n, 0.25));
  EXPECT_FALSE(d.obs.has("__categories"));
  // The CSC slot through the row reader.
  expect_blocks_equal(p, "X", want, 5);
}

TEST(H5ad, WriteIntoMissingDirectoryThrowsAndLeavesNothing) {
  test::TempDir tmp;
  Dataset d = random_dataset(test::fresh_seed(), 0);
  const fs::path target = tmp.dir() / "no_such_dir" / "out.h5ad";
  try {
    write_h5ad(d, target.string());
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("out.h5ad"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(target.parent_path()));
  EXPECT_TRUE(fs::is_empty(tmp.dir()));
}

TEST(H5ad, FailedWriteLeavesExistingFileUntouched) {
  test::TempDir tmp;
  const std::string p = tmp.path("keep.h5ad");
  Dataset d = random_dataset(test::fresh_seed(), 2);
  write_h5ad(d, p);
  auto slurp = [](const std::string& f) {
    std::ifstream in(f, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string before = slurp(p);
  // A key that cannot be written makes the writer fail after X, obs, ... are already written.
  Dataset bad = random_dataset(test::fresh_seed() + 1, 0);
  bad.uns["bad/key"] = Value(1.0);
  try {
    write_h5ad(bad, p);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad/key"), std::string::npos) << e.what();
  }
  EXPECT_EQ(slurp(p), before);
  int files = 0;
  for (const auto& e : fs::directory_iterator(tmp.dir())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);  // no temporary left behind
  expect_dataset_eq(d, read_h5ad(p));
}

// H5adWriter (a run writes X first, during its graph steps, and the rest at the end): the same file
// as write_h5ad, whichever thread wrote X; abandoned before finish() (a later step
// failed), it leaves neither the output nor a temporary, and an existing output untouched.
TEST(H5ad, TwoPartWriterWritesTheSameFile) {
  test::TempDir tmp;
  auto slurp = [](const std::string& f) {
    std::ifstream in(f, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto files = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(tmp.dir())) n += e.is_regular_file();
    return n;
  };
  const uint64_t seed = test::fresh_seed();
  for (int kind = 0; kind < 5; ++kind) {
    SCOPED_TRACE("X kind " + std::to_string(kind));
    const Dataset d = random_dataset(seed + kind, kind);
    const std::string one = tmp.path("one.h5ad"), two = tmp.path("two.h5ad");
    write_h5ad(d, one, {kind % 2 ? 4 : 0});
    {
      H5adWriter w(two, {kind % 2 ? 4 : 0});
      std::thread([&] { w.write_x(d.X); }).join();
      w.finish(d);
    }
    expect_dataset_eq(d, read_h5ad(two));
    expect_dataset_eq(read_h5ad(one), read_h5ad(two));  // (not bytes: HDF5 stores objects' times)
    fs::remove(one);
    fs::remove(two);
  }
  const Dataset d = random_dataset(seed, 2);
  const std::string p = tmp.path("keep.h5ad");
  write_h5ad(d, p);
  const std::string before = slurp(p);
  {
    H5adWriter w(p);
    w.write_x(d.X);
    EXPECT_EQ(files(), 2);  // the output and the temporary being written
  }  // abandoned
  EXPECT_EQ(files(), 1);
  EXPECT_EQ(slurp(p), before);
  {
    H5adWriter w(tmp.path("new.h5ad"));
    w.write_x(d.X);
  }
  EXPECT_FALSE(fs::exists(tmp.path("new.h5ad")));
  EXPECT_EQ(files(), 1);
}

// H5adWriter::write_x_following (a GPU run writes X as its copy back arrives): X's bytes are read
// only once the copy has reported them final, and the file equals write_h5ad's: a dense float32 X
// filled by another thread in uneven steps, written through one-page mapped windows (many), through
// H5Dwrite (mapping off) and with gzip; a copy that fails mid-way fails the write, no output left.
TEST(H5ad, WriteXFollowingACopy) {
  test::TempDir tmp;
  Rng rng(test::fresh_seed());
  Dataset d = random_dataset(rng.integer(0, 1 << 30), 3);  // dense float32 X
  const DenseF& want = std::get<DenseF>(d.X.m);
  const size_t bytes = want.data.size() * sizeof(float);
  struct Env {
    Env(const char* k, const char* v) : k_(k) { setenv(k, v, 1); }
    ~Env() { unsetenv(k_); }
    const char* k_;
  };
  const Env window("SCURRY_H5_MMAP_WINDOW", "4096");
  for (const char* mode : {"force", "0", "gzip"}) {
    SCOPED_TRACE(mode);
    const Env e("SCURRY_H5_MMAP_WRITE", std::strcmp(mode, "gzip") == 0 ? "force" : mode);
    const int gz = std::strcmp(mode, "gzip") == 0 ? 4 : 0;
    DenseF x(want.n_rows, want.n_cols);
    std::fill(x.data.begin(), x.data.end(), -1.0f);  // not yet copied
    std::mutex m;
    std::condition_variable cv;
    size_t done = 0;
    bool early = false;  // a byte read before the copy reported it
    const std::string p = tmp.path(std::string("follow_") + mode + ".h5ad");
    {
      H5adWriter w(p, {gz});
      std::thread copier([&] {
        for (size_t b = 0; b < bytes;) {
          const size_t step = std::min(bytes - b, static_cast<size_t>(rng.integer(1, 9000)));
          std::memcpy(reinterpret_cast<char*>(x.data.data()) + b, reinterpret_cast<const char*>(want.data.data()) + b, step);
          std::lock_guard<std::mutex> lock(m);
          done = b += step;
          cv.notify_all();
        }
      });
      w.write_x_following(x, [&](size_t b) {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return done >= b; });
      });
      copier.join();
      for (float v : x.data) early |= v == -1.0f;
      Dataset full = d;
      w.finish(full);
    }
    EXPECT_FALSE(early);
    expect_dataset_eq(d, read_h5ad(p));
  }
  // The copy fails: so does the write, and no file is left.
  const std::string bad = tmp.path("failed.h5ad");
  {
    H5adWriter w(bad);
    DenseF x = want;
    EXPECT_THROW(w.write_x_following(x, [&](size_t b) {
      if (b > bytes / 2) throw Error("copy failed");
    }),
                 Error);
  }
  EXPECT_FALSE(fs::exists(bad));
}

// H5adWriter's early parts (scurry run on the CPU writes raw/X and layers/counts as soon as they are
// made, then X, and lets each go): the file equals write_h5ad's of the whole dataset, whatever was
// let go before finish(); read_back returns what was written; the mapped write (forced, in windows
// of one page: SCURRY_H5_MMAP_WINDOW) and the pread read-back (forced) included.
TEST(H5ad, EarlyPartsWriteTheSameFile) {
  test::TempDir tmp;
  struct Env {
    Env(const char* k, const char* v) : k_(k) { setenv(k, v, 1); }
    ~Env() { unsetenv(k_); }
    const char* k_;
  };
  const uint64_t seed = test::fresh_seed();
  for (int kind = 0; kind < 5; ++kind) {
    SCOPED_TRACE("X kind " + std::to_string(kind));
    const Dataset d = random_dataset(seed + kind, kind);
    const std::string one = tmp.path("one.h5ad"), two = tmp.path("two.h5ad");
    const int gz = kind % 2 ? 4 : 0;
    write_h5ad(d, one, {gz});
    {
      Env mw("SCURRY_H5_MMAP_WRITE", kind < 3 ? "force" : "0"), win("SCURRY_H5_MMAP_WINDOW", "1"),
          pr("SCURRY_H5_PREAD", "force");
      Dataset rest = d;  // what is left once the early parts are let go
      H5adWriter w(two, {gz});
      w.write_layer("counts", d.layers.at("counts"));
      rest.layers.erase("counts");
      w.write_raw_x(d.raw->X);
      rest.raw = std::make_shared<Dataset>(*d.raw);
      rest.raw->X = Matrix();
      w.write_x(d.X);
      if (kind != 4) rest.X = Matrix();  // (kind 4: X kept, as when a later step reads it)
      expect_matrix_eq(d.raw->X, w.read_back("raw/X"), "raw/X read back");
      expect_matrix_eq(d.layers.at("counts"), w.read_back("layers/counts"), "layers/counts read back");
      expect_matrix_eq(d.X, w.read_back("X"), "X read back");
      w.finish(rest);
    }
    expect_dataset_eq(d, read_h5ad(two));
    expect_dataset_eq(read_h5ad(one), read_h5ad(two));
    fs::remove(one);
    fs::remove(two);
  }
  // A layer written early and again at finish is an internal error, and nothing is left behind.
  const Dataset d = random_dataset(seed, 0);
  {
    H5adWriter w(tmp.path("twice.h5ad"));
    w.write_layer("counts", d.layers.at("counts"));
    EXPECT_THROW(w.finish(d), Error);
  }
  EXPECT_FALSE(fs::exists(tmp.path("twice.h5ad")));
}

// Writes a rich file and a JSON sidecar of expected values for tests/io/anndata_client.py; runs
// only when SCURRY_WRITE_SAMPLE names the output (see test_anndata_client.sh).
TEST(H5ad, WriteSampleForPython) {
  const char* out = std::getenv("SCURRY_WRITE_SAMPLE");
  if (!out || !*out) GTEST_SKIP() << "SCURRY_WRITE_SAMPLE not set (used by test_anndata_client.sh)";
  Rng rng(test::fresh_seed());
  Dataset d = read_h5ad(test::test_data("pbmc3k_first1000.h5ad"));
  const int64_t n = d.n_obs(), g = d.n_vars();
  add_columns(d.obs, rng);
  add_columns(d.var, rng);
  d.layers["counts"] = d.X;
  d.layers["scaled"] = Matrix(sparse_few<double>(n, g, 100, rng), DType::f64);
  d.obsm["X_pca"] = Matrix(random_dense<float>(n, 10, rng), DType::f32);
  d.obsm["X_sparse"] = Matrix(random_csr<double>(n, 5, 0.3, rng, false), DType::f64);
  d.varm["PCs"] = Matrix(random_dense<double>(g, 3, rng), DType::f64);
  d.obsp["connectivities"] = Matrix(sparse_few<float>(n, n, 20, rng), DType::f32);
  d.varp["tiny"] = Matrix(sparse_few<float>(g, g, 1, rng), DType::f32);
  d.uns = random_uns(rng);
  auto raw = std::make_shared<Dataset>();
  std::vector<int64_t> first(500);
  for (int64_t j = 0; j < 500; ++j) first[j] = j;
  raw->X = take_cols(d.X, first);
  raw->var = d.var.take(first);
  raw->varm["stats"] = Matrix(random_dense<float>(500, 2, rng), DType::f32);
  d.raw = raw;
  write_h5ad(d, out);

  const nlohmann::json j = sidecar(d);
  std::ofstream js(std::string(out) + ".json");
  js << j.dump();
  ASSERT_TRUE(js.good());
}

}  // namespace scurry
