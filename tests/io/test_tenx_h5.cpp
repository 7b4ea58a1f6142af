// Cell Ranger .h5 reading: v3 (`matrix` + `features`) and v2 (genome groups) files built here with
// the HDF5 C API from a random matrix with duplicate gene names.
#include <hdf5.h>

#include <algorithm>
#include <random>

#include "core/error.hpp"
#include "io/h5ad.hpp"
#include "io/tenx.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

void fixed_strings(hid_t loc, const char* name, const std::vector<std::string>& v) {
  size_t w = 1;
  for (const auto& s : v) w = std::max(w, s.size());
  std::vector<char> buf(v.size() * w, '\0');
  for (size_t i = 0; i < v.size(); ++i) std::copy(v[i].begin(), v[i].end(), buf.begin() + i * w);
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, w);
  hsize_t n = v.size();
  hid_t s = H5Screate_simple(1, &n, nullptr);
  hid_t d = H5Dcreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  if (n) H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
  H5Dclose(d);
  H5Sclose(s);
  H5Tclose(t);
}

template <class T>
void numbers(hid_t loc, const char* name, hid_t mem, hid_t file, const std::vector<T>& v) {
  hsize_t n = v.size();
  hid_t s = H5Screate_simple(1, &n, nullptr);
  hid_t d = H5Dcreate2(loc, name, file, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  if (n) H5Dwrite(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Dclose(d);
  H5Sclose(s);
}

// The genes x cells CSC matrix of Cell Ranger == our cells x genes CSR: written as is.
void write_matrix_parts(hid_t g, const CsrF& x) {
  std::vector<int32_t> data(x.data.begin(), x.data.end());
  std::vector<int64_t> indices(x.indices.begin(), x.indices.end());
  numbers(g, "data", H5T_NATIVE_INT32, H5T_STD_I32LE, data);
  numbers(g, "indices", H5T_NATIVE_INT64, H5T_STD_I64LE, indices);
  numbers(g, "indptr", H5T_NATIVE_INT64, H5T_STD_I64LE, x.indptr);
  numbers(g, "shape", H5T_NATIVE_INT64, H5T_STD_I32LE, std::vector<int64_t>{x.n_cols, x.n_rows});
}

struct Fixture {
  CsrF x;  // cells x genes
  std::vector<std::string> barcodes, ids, names, expected_unique, types;
};

Fixture make_fixture(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Fixture f;
  const int64_t cells = 40 + static_cast<int64_t>(rng() % 30), genes = 25 + static_cast<int64_t>(rng() % 20);
  f.x = test::random_counts(cells, genes, 0.25, seed);
  for (int64_t i = 0; i < cells; ++i) f.barcodes.push_back("BC" + std::to_string(1000 + i) + "-1");
  // Duplicate symbols: every 5th gene is "DUP", every 7th "MT-X" (scanpy: DUP, DUP-1, DUP-2, ...).
  std::map<std::string, int> seen;
  for (int64_t j = 0; j < genes; ++j) {
    f.ids.push_back("ENSG" + std::to_string(100000 + j));
    std::string n = j % 5 == 0 ? "DUP" : j % 7 == 0 ? "MT-X" : "GENE" + std::to_string(j);
    f.names.push_back(n);
    const int k = seen[n]++;
    f.expected_unique.push_back(k == 0 ? n : n + "-" + std::to_string(k));
    f.types.push_back(rng() % 4 == 0 ? "Antibody Capture" : "Gene Expression");
  }
  return f;
}

void write_v3(const std::string& path, const Fixture& fx) {
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t m = H5Gcreate2(f, "matrix", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  write_matrix_parts(m, fx.x);
  fixed_strings(m, "barcodes", fx.barcodes);
  hid_t ft = H5Gcreate2(m, "features", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  fixed_strings(ft, "id", fx.ids);
  fixed_strings(ft, "name", fx.names);
  fixed_strings(ft, "feature_type", fx.types);
  fixed_strings(ft, "genome", std::vector<std::string>(fx.ids.size(), "GRCh38"));
  H5Gclose(ft);
  H5Gclose(m);
  H5Fclose(f);
}

void write_v2(const std::string& path, const Fixture& fx, const std::vector<std::string>& genomes) {
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  for (const auto& gname : genomes) {
    hid_t g = H5Gcreate2(f, gname.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    write_matrix_parts(g, fx.x);
    fixed_strings(g, "barcodes", fx.barcodes);
    fixed_strings(g, "genes", fx.ids);
    fixed_strings(g, "gene_names", fx.names);
    H5Gclose(g);
  }
  H5Fclose(f);
}

const std::vector<std::string>& strings(const Table& t, const std::string& c) {
  return std::get<StringColumn>(t.at(c).c).values;
}

}  // namespace

TEST(Tenx, ReadsV3AllFeatures) {
  Fixture fx = make_fixture(test::fresh_seed());
  test::TempDir tmp;
  const std::string p = tmp.path("v3.h5");
  write_v3(p, fx);
  EXPECT_TRUE(hdf5_looks_like_10x(p));
  TenxOptions opt;
  opt.gex_only = false;
  Dataset d = read_10x_h5(p, opt);
  EXPECT_EQ(d.X.dtype, DType::i32);
  const CsrF& x = d.X.csr_f();
  EXPECT_EQ(x.n_rows, fx.x.n_rows);
  EXPECT_EQ(x.n_cols, fx.x.n_cols);
  EXPECT_EQ(x.indptr, fx.x.indptr);
  EXPECT_EQ(x.indices, fx.x.indices);
  EXPECT_EQ(x.data, fx.x.data);
  EXPECT_EQ(d.obs.index, fx.barcodes);
  EXPECT_EQ(d.var.index, fx.expected_unique);
  EXPECT_EQ(strings(d.var, "gene_ids"), fx.ids);
  EXPECT_EQ(strings(d.var, "feature_types"), fx.types);
  EXPECT_EQ(strings(d.var, "genome"), std::vector<std::string>(fx.ids.size(), "GRCh38"));
}

TEST(Tenx, GexOnlyDropsOtherFeatures) {
  Fixture fx = make_fixture(test::fresh_seed());
  test::TempDir tmp;
  const std::string p = tmp.path("v3.h5");
  write_v3(p, fx);
  Dataset d = read_10x_h5(p);  // gex_only by default
  std::vector<int64_t> keep;
  std::vector<std::string> names;
  for (size_t j = 0; j < fx.types.size(); ++j)
    if (fx.types[j] == "Gene Expression") {
      keep.push_back(static_cast<int64_t>(j));
      names.push_back(fx.names[j]);
    }
  ASSERT_LT(keep.size(), fx.types.size()) << "fixture should hold non-GEX features";
  // Oracle: dense matrix restricted to the kept columns.
  const DenseD all = to_dense_d(Matrix(fx.x));
  const DenseD got = to_dense_d(d.X);
  ASSERT_EQ(got.n_rows, all.n_rows);
  ASSERT_EQ(got.n_cols, static_cast<int64_t>(keep.size()));
  for (int64_t r = 0; r < got.n_rows; ++r)
    for (size_t c = 0; c < keep.size(); ++c) ASSERT_EQ(got(r, c), all(r, keep[c]));
  for (const auto& t : strings(d.var, "feature_types")) EXPECT_EQ(t, "Gene Expression");
  // Unique names are made after the selection, as scanpy does.
  std::map<std::string, int> seen;
  std::vector<std::string> want;
  for (const auto& n : names) {
    const int k = seen[n]++;
    want.push_back(k == 0 ? n : n + "-" + std::to_string(k));
  }
  EXPECT_EQ(d.var.index, want);
}

TEST(Tenx, ReadsV2AndChoosesGenome) {
  Fixture fx = make_fixture(test::fresh_seed());
  test::TempDir tmp;
  const std::string p = tmp.path("v2.h5");
  write_v2(p, fx, {"hg19"});
  EXPECT_TRUE(hdf5_looks_like_10x(p));
  Dataset d = read_10x_h5(p);
  EXPECT_EQ(d.X.csr_f().indptr, fx.x.indptr);
  EXPECT_EQ(d.X.csr_f().indices, fx.x.indices);
  EXPECT_EQ(d.X.csr_f().data, fx.x.data);
  EXPECT_EQ(d.obs.index, fx.barcodes);
  EXPECT_EQ(d.var.index, fx.expected_unique);
  EXPECT_EQ(strings(d.var, "gene_ids"), fx.ids);

  const std::string q = tmp.path("v2two.h5");
  write_v2(q, fx, {"hg19", "mm10"});
  try {
    read_10x_h5(q);
    FAIL() << "expected InputError for two genomes";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("mm10"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(q), std::string::npos) << e.what();
  }
  TenxOptions opt;
  opt.genome = "mm10";
  EXPECT_EQ(read_10x_h5(q, opt).n_obs(), fx.x.n_rows);
  opt.genome = "dm6";
  EXPECT_THROW(read_10x_h5(q, opt), InputError);
}

TEST(Tenx, LooksLike10xOnlyForCellRangerFiles) {
  test::TempDir tmp;
  Dataset d;
  d.X = Matrix(test::random_counts(5, 4, 0.5, test::fresh_seed()));
  d.obs.index = {"a", "b", "c", "d", "e"};
  d.var.index = {"g1", "g2", "g3", "g4"};
  write_h5ad(d, tmp.path("x.h5ad"));
  EXPECT_FALSE(hdf5_looks_like_10x(tmp.path("x.h5ad")));
  EXPECT_THROW(read_10x_h5(tmp.path("x.h5ad")), InputError);
}

TEST(Tenx, BadIndptrIsAnInputError) {
  Fixture fx = make_fixture(test::fresh_seed());
  fx.x.indptr.pop_back();
  test::TempDir tmp;
  const std::string p = tmp.path("bad.h5");
  write_v3(p, fx);
  try {
    read_10x_h5(p);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("indptr"), std::string::npos) << e.what();
  }
}

}  // namespace scurry
