// No silent coercion in the readers (issue 16, point 6): fractional indices, indptr or shape stored
// as floats (h5ad, zarr, 10x h5) are InputErrors naming the file and the element; a lost chunk of a
// zarr sparse matrix is an error naming the array and the chunk key (other arrays keep zarr's
// fill_value semantics, unless the fill_value is null); special files (FIFOs, devices) given as
// input are refused at once, never opened (a FIFO would block forever). Every malformed input is
// made here: HDF5 files with the C API, zarr stores with scurry's writer and then edited.
#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/h5ad.hpp"
#include "io/read.hpp"
#include "io/tenx.hpp"
#include "io/zarr.hpp"
#include "io/store_edit.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// fn must throw InputError whose one-line message holds every one of `parts`.
void expect_input_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected InputError (" << (parts.empty() ? "" : parts[0]) << ")";
  } catch (const InputError& e) {
    const std::string m = e.what();
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError, got: " << e.what();
  }
}

Dataset small_dataset(uint64_t seed, int64_t n = 20, int64_t g = 15) {
  Dataset d;
  d.X = Matrix(test::random_counts(n, g, 0.4, seed), DType::f32);
  for (int64_t i = 0; i < n; ++i) d.obs.index.push_back("cell" + std::to_string(i));
  for (int64_t j = 0; j < g; ++j) d.var.index.push_back("gene" + std::to_string(j));
  DenseF pca(n, 3);
  for (size_t i = 0; i < pca.data.size(); ++i) pca.data[i] = 1.0f + static_cast<float>(i % 7);
  d.obsm["X_pca"] = Matrix(std::move(pca), DType::f32);
  return d;
}

// ---- HDF5 helpers ------------------------------------------------------------------------------

std::vector<double> read_f64(hid_t f, const char* path) {
  hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
  hid_t s = H5Dget_space(d);
  std::vector<double> v(static_cast<size_t>(H5Sget_simple_extent_npoints(s)));
  H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Sclose(s);
  H5Dclose(d);
  return v;
}

// Replaces dataset `path` by a float64 dataset holding `v`.
void replace_f64(hid_t f, const char* path, const std::vector<double>& v) {
  ASSERT_GE(H5Ldelete(f, path, H5P_DEFAULT), 0) << path;
  hsize_t n = v.size();
  hid_t s = H5Screate_simple(1, &n, nullptr);
  hid_t d = H5Dcreate2(f, path, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  if (n) H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Dclose(d);
  H5Sclose(s);
}

void set_f64_attr(hid_t f, const char* obj, const char* name, const std::vector<double>& v) {
  hid_t o = H5Oopen(f, obj, H5P_DEFAULT);
  ASSERT_GE(o, 0) << obj;
  if (H5Aexists(o, name) > 0) H5Adelete(o, name);
  hsize_t n = v.size();
  hid_t s = H5Screate_simple(1, &n, nullptr);
  hid_t a = H5Acreate2(o, name, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_DOUBLE, v.data());
  H5Aclose(a);
  H5Sclose(s);
  H5Oclose(o);
}

// A valid h5ad, edited through the C API.
std::string make_h5ad(const test::TempDir& tmp, const std::string& name, const Dataset& d,
                      const std::function<void(hid_t)>& edit) {
  const std::string p = tmp.path(name);
  write_h5ad(d, p);
  hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  EXPECT_GE(f, 0);
  edit(f);
  H5Fclose(f);
  return p;
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

void strings(hid_t loc, const char* name, const std::vector<std::string>& v) {
  const size_t w = 16;
  std::vector<char> buf(v.size() * w, '\0');
  for (size_t i = 0; i < v.size(); ++i) std::memcpy(buf.data() + i * w, v[i].data(), std::min(w, v[i].size()));
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, w);
  hsize_t n = v.size();
  hid_t s = H5Screate_simple(1, &n, nullptr);
  hid_t d = H5Dcreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (n) H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
  H5Dclose(d);
  H5Sclose(s);
  H5Tclose(t);
}

// A Cell Ranger v3 .h5 of the cells x genes CSR x; indices, indptr and shape stored as float64
// where `float_part` names them ("" = all integer storage), with `frac` added to element 1.
std::string make_tenx(const test::TempDir& tmp, const std::string& name, const CsrF& x, const std::string& float_part,
                      double frac) {
  const std::string p = tmp.path(name);
  hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t g = H5Gcreate2(f, "matrix", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  numbers(g, "data", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, x.data);
  auto part = [&](const char* nm, std::vector<double> v) {
    if (float_part == nm) {
      v[1] += frac;
      numbers(g, nm, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, v);
    } else {
      std::vector<int64_t> iv(v.begin(), v.end());
      numbers(g, nm, H5T_NATIVE_INT64, H5T_STD_I64LE, iv);
    }
  };
  part("indices", std::vector<double>(x.indices.begin(), x.indices.end()));
  part("indptr", std::vector<double>(x.indptr.begin(), x.indptr.end()));
  part("shape", std::vector<double>{static_cast<double>(x.n_cols), static_cast<double>(x.n_rows)});
  std::vector<std::string> bc, ids, names;
  for (int64_t i = 0; i < x.n_rows; ++i) bc.push_back("BC" + std::to_string(i));
  for (int64_t j = 0; j < x.n_cols; ++j) {
    ids.push_back("ENSG" + std::to_string(j));
    names.push_back("G" + std::to_string(j));
  }
  strings(g, "barcodes", bc);
  hid_t fg = H5Gcreate2(g, "features", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  strings(fg, "id", ids);
  strings(fg, "name", names);
  strings(fg, "feature_type", std::vector<std::string>(static_cast<size_t>(x.n_cols), "Gene Expression"));
  H5Gclose(fg);
  H5Gclose(g);
  H5Fclose(f);
  return p;
}

// ---- zarr helpers ------------------------------------------------------------------------------

using test::load_json;
using test::save_json;
using test::slurp;
using test::spit;

// Rewrites the uncompressed one-chunk v2 integer array `arr` as float64 with `frac` added to
// element `at`.
void v2_ints_to_floats(const fs::path& arr, size_t at, double frac) {
  json a = load_json(arr / ".zarray");
  const std::string dt = a["dtype"].get<std::string>();
  ASSERT_TRUE(dt == "<i8" || dt == "<i4") << dt;
  const std::string raw = slurp(arr / "0");
  const size_t w = dt == "<i8" ? 8 : 4;
  std::vector<double> v(raw.size() / w);
  for (size_t i = 0; i < v.size(); ++i) {
    if (w == 8) {
      int64_t x;
      std::memcpy(&x, raw.data() + i * 8, 8);
      v[i] = static_cast<double>(x);
    } else {
      int32_t x;
      std::memcpy(&x, raw.data() + i * 4, 4);
      v[i] = x;
    }
  }
  ASSERT_LT(at, v.size());
  v[at] += frac;
  a["dtype"] = "<f8";
  a["fill_value"] = 0.0;
  save_json(arr / ".zarray", a);
  spit(arr / "0", std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8));
}

// fn must finish within 10 s (a blocked open of a FIFO would not): returns whether it did. If it
// hangs, the FIFO is opened for writing, which releases the reader.
bool finishes(const std::string& fifo, const std::function<void()>& fn) {
  auto fut = std::async(std::launch::async, fn);
  if (fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready) {
    fut.get();
    return true;
  }
  const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
  if (fd >= 0) ::close(fd);
  fut.wait();
  return false;
}

}  // namespace

// ---- h5ad ---------------------------------------------------------------------------------------

TEST(Coercion, H5adFractionalIndptrIndicesAndShapeAreErrors) {
  test::TempDir tmp;
  const Dataset d = small_dataset(test::fresh_seed());
  {  // indptr as float64 with 2.5 somewhere: was truncated to 2
    const std::string p = make_h5ad(tmp, "indptr.h5ad", d, [](hid_t f) {
      auto v = read_f64(f, "/X/indptr");
      v[3] += 0.5;
      replace_f64(f, "/X/indptr", v);
    });
    expect_input_error([&] { read_h5ad(p); }, {p, "X/indptr holds ", ".5, not an integer"});
    expect_input_error([&] { H5adRowReader r(p); }, {p, "X/indptr", "not an integer"});
    expect_input_error([&] { read_any(p); }, {p, "X/indptr", "not an integer"});
  }
  {  // indices as float64 with a fraction
    const std::string p = make_h5ad(tmp, "indices.h5ad", d, [](hid_t f) {
      auto v = read_f64(f, "/X/indices");
      v[1] += 0.25;
      replace_f64(f, "/X/indices", v);
    });
    expect_input_error([&] { read_h5ad(p); }, {p, "X/indices holds ", ".25, not an integer"});
    expect_input_error([&] { H5adRowReader(p).read_rows(0, 20); }, {p, "X/indices", "not an integer"});
  }
  {  // a NaN index
    const std::string p = make_h5ad(tmp, "nan.h5ad", d, [](hid_t f) {
      auto v = read_f64(f, "/X/indices");
      v[0] = std::nan("");
      replace_f64(f, "/X/indices", v);
    });
    expect_input_error([&] { read_h5ad(p); }, {p, "X/indices holds nan, not an integer"});
  }
  {  // the shape attribute as float64 [20, 15.5]
    const std::string p = make_h5ad(tmp, "shape.h5ad", d, [](hid_t f) { set_f64_attr(f, "/X", "shape", {20, 15.5}); });
    expect_input_error([&] { read_h5ad(p); }, {p, "X attribute 'shape' holds 15.5, not an integer"});
    expect_input_error([&] { H5adRowReader r(p); }, {p, "'shape'", "15.5", "not an integer"});
  }
}

TEST(Coercion, H5adWholeFloatIndicesStillRead) {
  // Float storage of whole numbers is no coercion: read as before.
  test::TempDir tmp;
  const Dataset d = small_dataset(test::fresh_seed());
  const std::string p = make_h5ad(tmp, "whole.h5ad", d, [](hid_t f) {
    replace_f64(f, "/X/indptr", read_f64(f, "/X/indptr"));
    replace_f64(f, "/X/indices", read_f64(f, "/X/indices"));
    set_f64_attr(f, "/X", "shape", {20, 15});
  });
  const Dataset r = read_h5ad(p);
  EXPECT_EQ(r.X.csr_f().indptr, d.X.csr_f().indptr);
  EXPECT_EQ(r.X.csr_f().indices, d.X.csr_f().indices);
  EXPECT_EQ(r.X.n_cols(), 15);
}

// ---- 10x h5 -------------------------------------------------------------------------------------

TEST(Coercion, TenxH5FractionalIndptrIndicesAndShapeAreErrors) {
  test::TempDir tmp;
  const CsrF x = test::random_counts(12, 9, 0.5, test::fresh_seed());
  {
    const std::string p = make_tenx(tmp, "ok.h5", x, "indices", 0.0);  // whole floats: fine
    const Dataset r = read_10x_h5(p);
    EXPECT_EQ(r.X.csr_f().indices, x.indices);
  }
  const std::string a = make_tenx(tmp, "indices.h5", x, "indices", 0.5);
  expect_input_error([&] { read_10x_h5(a); }, {a, "matrix/indices holds ", ".5, not an integer"});
  const std::string b = make_tenx(tmp, "indptr.h5", x, "indptr", 0.5);
  expect_input_error([&] { read_any(b); }, {b, "matrix/indptr holds ", ".5, not an integer"});
  const std::string c = make_tenx(tmp, "shape.h5", x, "shape", 0.5);
  expect_input_error([&] { read_10x_h5(c); }, {c, "matrix/shape holds 12.5, not an integer"});
}

// ---- zarr ---------------------------------------------------------------------------------------

TEST(Coercion, ZarrFractionalIndptrIndicesAndShapeAreErrors) {
  test::TempDir tmp;
  const Dataset d = small_dataset(test::fresh_seed());
  auto fresh = [&](const std::string& name) {
    const fs::path p = tmp.dir() / name;
    write_zarr(d, p.string(), {2, ZarrCodec::none});
    return p;
  };
  {
    const fs::path p = fresh("indptr.zarr");
    v2_ints_to_floats(p / "X" / "indptr", 3, 0.5);
    expect_input_error([&] { read_zarr(p.string()); }, {p.string(), "X/indptr", "holds ", ".5, not an integer"});
    expect_input_error([&] { ZarrRowReader r(p.string()); }, {p.string(), "X/indptr", "not an integer"});
  }
  {
    const fs::path p = fresh("indices.zarr");
    v2_ints_to_floats(p / "X" / "indices", 1, 0.5);
    expect_input_error([&] { read_zarr(p.string()); }, {p.string(), "X/indices", "holds ", ".5, not an integer"});
    expect_input_error([&] { ZarrRowReader(p.string()).read_rows(0, 20); }, {p.string(), "X/indices", "not an integer"});
  }
  {  // whole floats are no coercion
    const fs::path p = fresh("whole.zarr");
    v2_ints_to_floats(p / "X" / "indices", 1, 0.0);
    EXPECT_EQ(read_zarr(p.string()).X.csr_f().indices, d.X.csr_f().indices);
  }
  {  // the shape attribute: nlohmann's get<int64_t> truncated 15.5 to 15
    const fs::path p = fresh("shape.zarr");
    json a = load_json(p / "X" / ".zattrs");
    a["shape"] = {20, 15.5};
    save_json(p / "X" / ".zattrs", a);
    expect_input_error([&] { read_zarr(p.string()); }, {p.string(), "X", "'shape' attribute holds 15.5, not an integer"});
    expect_input_error([&] { ZarrRowReader r(p.string()); }, {p.string(), "15.5", "not an integer"});
    a["shape"] = {20.0, 15.0};  // whole floats: fine
    save_json(p / "X" / ".zattrs", a);
    EXPECT_EQ(read_zarr(p.string()).X.n_cols(), 15);
  }
}

TEST(Coercion, ZarrMissingChunkOfASparseMatrixIsAnError) {
  test::TempDir tmp;
  const Dataset d = small_dataset(test::fresh_seed(), 40, 15);
  for (int format : {2, 3}) {
    SCOPED_TRACE(format);
    ZarrWriteOptions o;
    o.format = format;
    o.codec = ZarrCodec::zstd;
    o.chunk_elems = 16;  // several chunks per array
    o.chunk_rows = 8;
    const std::string key1 = format == 3 ? "c/1" : "1";
    for (const char* arr : {"data", "indices", "indptr"}) {
      SCOPED_TRACE(arr);
      const fs::path p = tmp.dir() / (std::string(arr) + std::to_string(format) + ".zarr");
      write_zarr(d, p.string(), o);
      ASSERT_TRUE(fs::remove(p / "X" / arr / key1)) << (p / "X" / arr / key1);
      const std::string elem = std::string("X/") + arr;
      expect_input_error([&] { read_zarr(p.string()); }, {p.string(), elem, "chunk " + key1 + " is missing"});
      expect_input_error([&] { read_any(p.string()); }, {p.string(), elem, "missing"});
      expect_input_error(
          [&] {
            ZarrRowReader r(p.string());
            r.read_rows(0, r.n_rows());
          },
          {p.string(), elem, "chunk " + key1 + " is missing"});
    }
  }
}

TEST(Coercion, ZarrMissingChunkOfADenseArrayIsTheFillValueUnlessItIsNull) {
  test::TempDir tmp;
  const Dataset d = small_dataset(test::fresh_seed(), 40, 15);
  for (int format : {2, 3}) {
    SCOPED_TRACE(format);
    ZarrWriteOptions o;
    o.format = format;
    o.codec = ZarrCodec::gzip;
    o.chunk_rows = 8;
    const fs::path p = tmp.dir() / ("dense" + std::to_string(format) + ".zarr");
    write_zarr(d, p.string(), o);
    // zarr semantics: an absent chunk holds the fill_value (0): rows 8..15 of obsm/X_pca.
    ASSERT_TRUE(fs::remove(p / "obsm" / "X_pca" / (format == 3 ? "c/1/0" : "1.0")));
    const Dataset r = read_zarr(p.string());
    const DenseF& pca = r.obsm.at("X_pca").dense_f();
    const DenseF& want = d.obsm.at("X_pca").dense_f();
    for (int64_t i = 0; i < 40; ++i)
      for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(pca(i, j), i >= 8 && i < 16 ? 0.0f : want(i, j)) << i << "," << j;
    if (format == 2) {  // no fill_value: the contents are undefined, an error
      json a = load_json(p / "obsm" / "X_pca" / ".zarray");
      a["fill_value"] = nullptr;
      save_json(p / "obsm" / "X_pca" / ".zarray", a);
      expect_input_error([&] { read_zarr(p.string()); }, {p.string(), "obsm/X_pca", "chunk 1.0 is missing", "null"});
    }
  }
}

// ---- special files --------------------------------------------------------------------------------

TEST(Coercion, FifoInputIsRefusedAtOnce) {
  test::TempDir tmp;
  const std::string fifo = tmp.path("pipe.h5ad");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  EXPECT_TRUE(finishes(fifo, [&] { expect_input_error([&] { read_any(fifo); }, {fifo, "FIFO"}); }));
  EXPECT_TRUE(finishes(fifo, [&] { expect_input_error([&] { detect_format(fifo); }, {fifo, "FIFO"}); }));
  EXPECT_TRUE(finishes(fifo, [&] { expect_input_error([&] { read_h5ad(fifo); }, {fifo, "FIFO"}); }));
  EXPECT_TRUE(finishes(fifo, [&] { expect_input_error([&] { read_10x_h5(fifo); }, {fifo, "FIFO"}); }));
  EXPECT_TRUE(finishes(fifo, [&] { expect_input_error([&] { H5adRowReader r(fifo); }, {fifo, "FIFO"}); }));
  // A 10x mtx directory (directories are fine) whose matrix.mtx is a FIFO.
  const fs::path dir = tmp.dir() / "mtx";
  fs::create_directories(dir);
  spit(dir / "genes.tsv", "ENSG1\tG1\n");
  spit(dir / "barcodes.tsv", "BC1\n");
  const std::string mfifo = (dir / "matrix.mtx").string();
  ASSERT_EQ(::mkfifo(mfifo.c_str(), 0600), 0);
  EXPECT_TRUE(finishes(mfifo, [&] { expect_input_error([&] { read_any(dir.string()); }, {mfifo, "FIFO"}); }));
}

TEST(Coercion, DeviceInputIsRefused) {
  expect_input_error([&] { read_any("/dev/null"); }, {"/dev/null", "character device"});
  expect_input_error([&] { read_h5ad("/dev/zero"); }, {"/dev/zero", "character device"});
}

}  // namespace scurry
