// Malformed h5ad inputs: each case is one file made here (a valid file edited with the HDF5 C API,
// or truncated/corrupted bytes). Each must throw InputError naming the file and the problem, never
// crash or print HDF5's error stack.
#include <hdf5.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <functional>
#include <random>

#include "core/error.hpp"
#include "io/h5ad.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

namespace fs = std::filesystem;

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Runs fn, which must throw InputError whose message holds `path` and every word of `words`
// (case-insensitive).
void expect_input_error(const std::function<void()>& fn, const std::string& path,
                        const std::vector<std::string>& words) {
  try {
    fn();
    ADD_FAILURE() << "expected InputError for " << path;
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << "message does not name the file: " << msg;
    for (const auto& w : words) EXPECT_NE(lower(msg).find(lower(w)), std::string::npos) << "no '" << w << "' in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message should be one line: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError, got another exception: " << e.what();
  }
}

Dataset small_dataset(uint64_t seed) {
  const int64_t n = 20, g = 15;
  Dataset d;
  d.X = Matrix(test::random_counts(n, g, 0.3, seed), DType::f32);
  for (int64_t i = 0; i < n; ++i) d.obs.index.push_back("cell" + std::to_string(i));
  for (int64_t j = 0; j < g; ++j) d.var.index.push_back("gene" + std::to_string(j));
  CategoricalColumn cat;
  cat.categories = {"a", "b", "c"};
  for (int64_t i = 0; i < n; ++i) cat.codes.push_back(static_cast<int32_t>(i % 3));
  d.obs.set("cat", Column(cat));
  d.obs.set("score", Column::numeric(std::vector<double>(n, 1.5)));
  return d;
}

// A valid file, then edited through the C API by `edit(file_id)`.
std::string make_file(const test::TempDir& tmp, const std::string& name, const std::function<void(hid_t)>& edit,
                      int gzip = 0) {
  const std::string p = tmp.path(name);
  write_h5ad(small_dataset(test::fresh_seed()), p, {gzip});
  if (edit) {
    hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    EXPECT_GE(f, 0);
    edit(f);
    H5Fclose(f);
  }
  return p;
}

void replace_i64(hid_t f, const char* path, const std::vector<int64_t>& v) {
  ASSERT_GE(H5Ldelete(f, path, H5P_DEFAULT), 0) << path;
  hsize_t n = v.size();
  hid_t s = H5Screate_simple(1, &n, nullptr);
  hid_t d = H5Dcreate2(f, path, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  if (n) H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Dclose(d);
  H5Sclose(s);
}

std::vector<int64_t> read_i64(hid_t f, const char* path) {
  hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
  hid_t s = H5Dget_space(d);
  std::vector<int64_t> v(static_cast<size_t>(H5Sget_simple_extent_npoints(s)));
  H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Sclose(s);
  H5Dclose(d);
  return v;
}

void set_str_attr(hid_t f, const char* obj, const char* name, const std::string& value) {
  hid_t o = H5Oopen(f, obj, H5P_DEFAULT);
  ASSERT_GE(o, 0) << obj;
  if (H5Aexists(o, name) > 0) H5Adelete(o, name);
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(o, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  const char* p = value.c_str();
  H5Awrite(a, t, &p);
  H5Aclose(a);
  H5Sclose(s);
  H5Tclose(t);
  H5Oclose(o);
}

void set_i64_attr(hid_t f, const char* obj, const char* name, const std::vector<int64_t>& v) {
  hid_t o = H5Oopen(f, obj, H5P_DEFAULT);
  ASSERT_GE(o, 0) << obj;
  if (H5Aexists(o, name) > 0) H5Adelete(o, name);
  hsize_t n = v.size();
  hid_t s = H5Screate_simple(1, &n, nullptr);
  hid_t a = H5Acreate2(o, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, v.data());
  H5Aclose(a);
  H5Sclose(s);
  H5Oclose(o);
}

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void spit(const std::string& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

}  // namespace

TEST(H5adErrors, MissingFile) {
  test::TempDir tmp;
  const std::string p = tmp.path("nope.h5ad");
  expect_input_error([&] { read_h5ad(p); }, p, {"no such file"});
  expect_input_error([&] { summarize_h5ad(p); }, p, {"no such file"});
  expect_input_error([&] { H5adRowReader r(p); }, p, {"no such file"});
}

TEST(H5adErrors, NotHdf5) {
  test::TempDir tmp;
  const std::string p = tmp.path("text.h5ad");
  spit(p, "cell,gene,count\nAAAC,CD3E,4\n");
  expect_input_error([&] { read_h5ad(p); }, p, {"not an HDF5"});
}

TEST(H5adErrors, TruncatedFile) {
  test::TempDir tmp;
  const std::string p = make_file(tmp, "trunc.h5ad", nullptr);
  const std::string all = slurp(p);
  std::mt19937_64 rng(test::fresh_seed());
  // Anywhere past the signature: HDF5 sees the end of file before the end of its address space.
  const size_t cut = 512 + rng() % (all.size() - 1024);
  spit(p, all.substr(0, cut));
  expect_input_error([&] { read_h5ad(p); }, p, {"truncated"});
}

TEST(H5adErrors, CorruptBytesInTheMiddle) {
  test::TempDir tmp;
  // gzip-compressed X: corrupting the middle of its data chunk breaks the deflate stream.
  const std::string p = make_file(tmp, "corrupt.h5ad", nullptr, 6);
  haddr_t off = 0;
  hsize_t size = 0;
  {
    hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/X/data", H5P_DEFAULT);
    hsize_t coord[1];
    unsigned mask;
    hid_t sp = H5Dget_space(d);
    ASSERT_GE(H5Dget_chunk_info(d, sp, 0, coord, &mask, &off, &size), 0);
    H5Sclose(sp);
    H5Dclose(d);
    H5Fclose(f);
  }
  ASSERT_GT(size, 16u);
  std::string all = slurp(p);
  std::mt19937_64 rng(test::fresh_seed());
  for (hsize_t i = size / 4; i < 3 * size / 4; ++i) all[off + i] = static_cast<char>(rng() & 0xff);
  spit(p, all);
  expect_input_error([&] { read_h5ad(p); }, p, {"corrupt", "X/data"});
  expect_input_error([&] { H5adRowReader(p).read_rows(0, 20); }, p, {"corrupt"});
}

TEST(H5adErrors, MissingX) {
  test::TempDir tmp;
  const std::string p = make_file(tmp, "nox.h5ad", [](hid_t f) { H5Ldelete(f, "/X", H5P_DEFAULT); });
  expect_input_error([&] { read_h5ad(p); }, p, {"missing X"});
}

TEST(H5adErrors, MissingObs) {
  test::TempDir tmp;
  const std::string p = make_file(tmp, "noobs.h5ad", [](hid_t f) { H5Ldelete(f, "/obs", H5P_DEFAULT); });
  expect_input_error([&] { read_h5ad(p); }, p, {"missing", "obs"});
}

TEST(H5adErrors, WrongEncodingType) {
  test::TempDir tmp;
  const std::string p = make_file(tmp, "enc.h5ad", [](hid_t f) { set_str_attr(f, "/X", "encoding-type", "crs_matrix"); });
  expect_input_error([&] { read_h5ad(p); }, p, {"encoding-type", "crs_matrix"});
  const std::string q =
      make_file(tmp, "enc2.h5ad", [](hid_t f) { set_str_attr(f, "/var", "encoding-type", "data_frame"); });
  expect_input_error([&] { read_h5ad(q); }, q, {"encoding-type", "data_frame"});
}

TEST(H5adErrors, XShapeMismatchesObs) {
  test::TempDir tmp;
  // A consistent CSR of 21 rows (one extra empty row) against 20 obs.
  const std::string p = make_file(tmp, "shape.h5ad", [](hid_t f) {
    auto ptr = read_i64(f, "/X/indptr");
    ptr.push_back(ptr.back());
    replace_i64(f, "/X/indptr", ptr);
    set_i64_attr(f, "/X", "shape", {21, 15});
  });
  expect_input_error([&] { read_h5ad(p); }, p, {"shape", "obs"});
}

TEST(H5adErrors, IndexOutOfRange) {
  test::TempDir tmp;
  const std::string p = make_file(tmp, "idx.h5ad", [](hid_t f) {
    auto idx = read_i64(f, "/X/indices");
    idx[idx.size() / 2] = 15;  // == n_vars
    replace_i64(f, "/X/indices", idx);
  });
  expect_input_error([&] { read_h5ad(p); }, p, {"out of range"});
  expect_input_error(
      [&] {
        H5adRowReader r(p);
        r.read_rows(0, r.n_rows());
      },
      p, {"out of range"});
}

TEST(H5adErrors, DecreasingIndptr) {
  test::TempDir tmp;
  const std::string p = make_file(tmp, "dec.h5ad", [](hid_t f) {
    auto ptr = read_i64(f, "/X/indptr");
    std::swap(ptr[5], ptr[12]);  // random_counts at density 0.3 gives every row entries
    replace_i64(f, "/X/indptr", ptr);
  });
  expect_input_error([&] { read_h5ad(p); }, p, {"decrease"});
  expect_input_error([&] { H5adRowReader r(p); }, p, {"decrease"});
}

TEST(H5adErrors, IndptrLengthWrong) {
  test::TempDir tmp;
  const std::string p = make_file(tmp, "len.h5ad", [](hid_t f) {
    auto ptr = read_i64(f, "/X/indptr");
    ptr.pop_back();
    replace_i64(f, "/X/indptr", ptr);
  });
  expect_input_error([&] { read_h5ad(p); }, p, {"indptr", "length"});
  expect_input_error([&] { H5adRowReader r(p); }, p, {"indptr", "length"});
}

TEST(H5adErrors, CategoricalCodeOutOfRange) {
  test::TempDir tmp;
  const std::string p = make_file(tmp, "cat.h5ad", [](hid_t f) {
    auto codes = read_i64(f, "/obs/cat/codes");
    codes[7] = 3;  // 3 categories
    replace_i64(f, "/obs/cat/codes", codes);
  });
  expect_input_error([&] { read_h5ad(p); }, p, {"categorical code", "out of range", "obs/cat"});
}

TEST(H5adErrors, ColumnLengthMismatch) {
  test::TempDir tmp;
  const std::string p = make_file(tmp, "col.h5ad", [](hid_t f) {
    hid_t o = H5Gopen2(f, "/obs", H5P_DEFAULT);
    H5Ldelete(o, "score", H5P_DEFAULT);
    std::vector<double> v(19, 2.0);
    hsize_t n = v.size();
    hid_t s = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(o, "score", H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(d);
    H5Sclose(s);
    H5Gclose(o);
  });
  expect_input_error([&] { read_h5ad(p); }, p, {"obs/score", "length"});
}

TEST(H5adErrors, CheckCountsNaNInfNegative) {
  const uint64_t seed = test::fresh_seed();
  const std::string where = "/data/some file.h5ad";
  CsrF base = test::random_counts(30, 12, 0.4, seed);
  ASSERT_GT(base.nnz(), 10);
  EXPECT_NO_THROW(check_counts(Matrix(base), where));
  const int64_t p = base.nnz() / 2;
  const int64_t row = std::upper_bound(base.indptr.begin(), base.indptr.end(), p) - base.indptr.begin() - 1;
  const std::string at = "row " + std::to_string(row) + ", column " + std::to_string(base.indices[p]);
  for (auto [v, word] : std::vector<std::pair<float, std::string>>{
           {std::nanf(""), "NaN"}, {INFINITY, "Inf"}, {-INFINITY, "Inf"}, {-2.0f, "negative"}}) {
    CsrF m = base;
    m.data[p] = v;
    expect_input_error([&] { check_counts(Matrix(m), where); }, where, {word, at});
    // Dense too.
    expect_input_error([&] { check_counts(Matrix(to_dense_f(Matrix(m))), where); }, where, {word, at});
  }
}

// Many blocks of the vectorised test (4,096 values each): the first bad entry by position is named,
// wherever the blocks fall, in float32 and float64, with a later bad entry in another block.
TEST(H5adErrors, CheckCountsNamesTheFirstBadEntryOfManyBlocks) {
  const uint64_t seed = test::fresh_seed();
  const std::string where = "big.h5ad";
  const CsrF base = test::random_counts(2000, 150, 0.2, seed);
  ASSERT_GT(base.nnz(), 10 * 4096);
  EXPECT_NO_THROW(check_counts(Matrix(base), where));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t p = std::uniform_int_distribution<int64_t>(0, base.nnz() - 2)(rng);
    const int64_t q = std::uniform_int_distribution<int64_t>(p + 1, base.nnz() - 1)(rng);
    const int64_t row = std::upper_bound(base.indptr.begin(), base.indptr.end(), p) - base.indptr.begin() - 1;
    const std::string at = "row " + std::to_string(row) + ", column " + std::to_string(base.indices[p]);
    CsrF m = base;
    m.data[p] = trial % 2 ? -1.5f : std::nanf("");
    m.data[q] = INFINITY;
    SCOPED_TRACE("bad entries at " + std::to_string(p) + " and " + std::to_string(q));
    expect_input_error([&] { check_counts(Matrix(m), where); }, where, {trial % 2 ? "negative" : "NaN", at});
    CsrD md;
    md.n_rows = m.n_rows, md.n_cols = m.n_cols, md.indptr = m.indptr, md.indices = m.indices;
    md.data.assign(m.data.begin(), m.data.end());
    expect_input_error([&] { check_counts(Matrix(md), where); }, where, {trial % 2 ? "negative" : "NaN", at});
  }
}

}  // namespace scurry
