// Variable-length strings read without libhdf5's vlen conversion (io/hdf5_vlen.cpp, issue 16
// point 4): chunked datasets (deflate, shuffle, unwritten chunks, a partial last chunk) read exactly
// as libhdf5's own H5Dread reads them (the oracle), attributes in version 1 and version 2 object
// headers (continuation blocks included) checked before H5Aread, and damaged global heaps refused
// with an InputError on every path -- where libhdf5 1.10.8 crashes or loops forever. Files are
// written here with the HDF5 C API from fresh seeded random strings; the reproducers libFuzzer and
// hand damage made are in tests/data/fuzz_regressions/ (make_regressions.py there).
#include <hdf5.h>

#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "io/h5ad.hpp"
#include "io/hdf5.hpp"
#include "io/tenx.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

std::string regression(const std::string& name) { return test::test_data("fuzz_regressions/" + name); }

template <class F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an InputError: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}
#define EXPECT_HAS(msg, part) EXPECT_NE(std::string(msg).find(part), std::string::npos) << (msg)

std::vector<std::string> random_strings(std::mt19937_64& rng, size_t n) {
  std::vector<std::string> v(n);
  for (auto& s : v) {
    s.resize(rng() % 6 == 0 ? 0 : rng() % 60);
    for (auto& c : s) c = static_cast<char>(1 + rng() % 255);  // any byte but NUL (UTF-8 or not)
  }
  return v;
}

hid_t vlen_type() {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

// libhdf5's own read of a vlen string dataset: the oracle.
std::vector<std::string> libhdf5_read(const std::string& path, const char* name) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << path;
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  hid_t s = H5Dget_space(d);
  if (f < 0 || d < 0 || s < 0) return {"<libhdf5 cannot open it>"};
  const auto n = static_cast<size_t>(H5Sget_simple_extent_npoints(s));
  hid_t t = vlen_type();
  std::vector<char*> p(n, nullptr);
  EXPECT_GE(H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, p.data()), 0);
  std::vector<std::string> out(n);
  for (size_t i = 0; i < n; ++i)
    if (p[i]) out[i] = p[i];
  H5Dvlen_reclaim(t, s, H5P_DEFAULT, p.data());
  H5Tclose(t), H5Sclose(s), H5Dclose(d), H5Fclose(f);
  return out;
}

// Makes the first object of the file's first global heap collection claim 2^29 more bytes than it
// has: past its collection (libhdf5's H5HG_read then copies past its buffers).
void damage_first_heap_object(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const size_t g = b.find("GCOL");
  ASSERT_NE(g, std::string::npos);
  const size_t obj = g + 16;  // 8-byte sizes: the collection header is 16 bytes
  ASSERT_NE(b[obj], 0) << "the first object is free space";
  b[obj + 8 + 3] = static_cast<char>(b[obj + 8 + 3] | 0x20);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << b;
}

// A 1-D chunked vlen string dataset "s" of `v` (shuffle and/or deflate), leaving the chunks whose
// index is a multiple of `skip` unwritten (0: all written). Returns what a reader must give.
std::vector<std::string> write_chunked(const std::string& path, const std::vector<std::string>& v, hsize_t chunk,
                                       bool shuffle, bool deflate, size_t skip) {
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t n = v.size();
  hid_t space = H5Screate_simple(1, &n, nullptr);
  hid_t pl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(pl, 1, &chunk);
  if (shuffle) H5Pset_shuffle(pl);
  if (deflate) H5Pset_deflate(pl, 6);
  hid_t t = vlen_type();
  hid_t d = H5Dcreate2(f, "s", t, space, H5P_DEFAULT, pl, H5P_DEFAULT);
  std::vector<std::string> want(v.size());
  const size_t nchunks = (v.size() + chunk - 1) / chunk;
  for (size_t c = 0; c < nchunks; ++c) {
    if (skip && c % skip == 0) continue;
    const hsize_t start = c * chunk, count = std::min<hsize_t>(chunk, n - start);
    std::vector<const char*> p(count);
    for (hsize_t i = 0; i < count; ++i) {
      p[i] = v[start + i].c_str();
      want[start + i] = v[start + i];
    }
    hid_t fs = H5Dget_space(d);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
    hid_t ms = H5Screate_simple(1, &count, nullptr);
    EXPECT_GE(H5Dwrite(d, t, ms, fs, H5P_DEFAULT, p.data()), 0);
    H5Sclose(ms), H5Sclose(fs);
  }
  H5Tclose(t), H5Dclose(d), H5Pclose(pl), H5Sclose(space), H5Fclose(f);
  return want;
}

TEST(Hdf5Vlen, ChunkedStringsReadAsLibhdf5ReadsThemAndADamagedHeapIsRefused) {
  std::mt19937_64 rng(test::fresh_seed());
  for (int combo = 0; combo < 4; ++combo) {
    const bool shuffle = combo & 1, deflate = combo & 2;
    test::TempDir t;
    const std::string p = t.path("c.h5");
    const auto v = random_strings(rng, 50 + rng() % 400);
    const hsize_t chunk = 1 + rng() % 64;  // the last chunk partial, mostly
    const size_t skip = combo == 3 ? 3 : 0;
    const auto want = write_chunked(p, v, chunk, shuffle, deflate, skip);
    SCOPED_TRACE("shuffle " + std::to_string(shuffle) + " deflate " + std::to_string(deflate) + " n " +
                 std::to_string(v.size()) + " chunk " + std::to_string(chunk));
    const auto oracle = libhdf5_read(p, "s");
    ASSERT_EQ(oracle, want);
    {
      h5::File f = h5::File::open(p);
      EXPECT_EQ(f.dataset("s").read_strings(), want);
    }
    // Damaged: refused by scurry's own reading (libhdf5's would crash here).
    damage_first_heap_object(p);
    h5::File f = h5::File::open(p);
    const std::string m = input_error([&] { f.dataset("s").read_strings(); });
    EXPECT_HAS(m, p + ": corrupt variable-length string storage (a global heap object runs past its collection");
    EXPECT_HAS(m, "(/s)");
  }
}

TEST(Hdf5Vlen, ScurrysGzipStringColumnsReadBack) {
  // scurry's writer compresses string arrays with gzip > 0 (chunked): the round trip is exact.
  std::mt19937_64 rng(test::fresh_seed());
  test::TempDir t;
  const auto v = random_strings(rng, 700);
  {
    h5::File f = h5::File::create(t.path("w.h5"));
    f.write_strings("s", v, 4);
    f.close();
  }
  EXPECT_EQ(libhdf5_read(t.path("w.h5"), "s"), v);
  h5::File f = h5::File::open(t.path("w.h5"));
  EXPECT_TRUE(f.dataset("s").type().is_vlen_string);
  EXPECT_EQ(f.dataset("s").read_strings(), v);
}

// An attribute "a<k>" (k < n_attrs) of vlen strings on group "g", in a file with version 1 object
// headers (libver earliest, continuation blocks once the first fills) or version 2 ("latest").
std::vector<std::vector<std::string>> write_attrs(const std::string& path, bool v2, int n_attrs, std::mt19937_64& rng) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (v2) H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  hid_t g = H5Gcreate2(f, "g", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t t = vlen_type();
  std::vector<std::vector<std::string>> all;
  for (int k = 0; k < n_attrs; ++k) {
    auto v = random_strings(rng, 1 + rng() % 20);
    for (auto& s : v)
      if (s.empty()) s = "x";  // h5py and libhdf5 store "" without a heap object: keep one per string
    const hsize_t n = v.size();
    hid_t s = H5Screate_simple(1, &n, nullptr);
    hid_t a = H5Acreate2(g, ("a" + std::to_string(k)).c_str(), t, s, H5P_DEFAULT, H5P_DEFAULT);
    std::vector<const char*> p(n);
    for (hsize_t i = 0; i < n; ++i) p[i] = v[i].c_str();
    EXPECT_GE(H5Awrite(a, t, p.data()), 0);
    H5Aclose(a), H5Sclose(s);
    all.push_back(std::move(v));
  }
  H5Tclose(t), H5Gclose(g), H5Fclose(f), H5Pclose(fapl);
  return all;
}

TEST(Hdf5Vlen, AttributesInVersion1And2HeadersAreCheckedBeforeLibhdf5ReadsThem) {
  std::mt19937_64 rng(test::fresh_seed());
  for (bool v2 : {false, true}) {
    SCOPED_TRACE(v2 ? "version 2 headers" : "version 1 headers");
    test::TempDir t;
    const std::string p = t.path("a.h5");
    const int n_attrs = 7;  // compact storage (libhdf5 goes dense past 8); v1: continuation blocks
    const auto want = write_attrs(p, v2, n_attrs, rng);
    {
      h5::File f = h5::File::open(p);
      h5::Group g = f.group("g");
      for (int k = 0; k < n_attrs; ++k) EXPECT_EQ(g.attr_strings("a" + std::to_string(k)), want[k]);
    }
    // The first heap object belongs to a0's first string: damaged, a0 is refused before H5Aread
    // (which would copy 2^29 bytes into the string's buffer).
    damage_first_heap_object(p);
    h5::File f = h5::File::open(p);
    const std::string m = input_error([&] { f.group("g").attr_strings("a0"); });
    EXPECT_HAS(m, p + ": corrupt variable-length string storage (a global heap object runs past its collection");
    EXPECT_HAS(m, "/g attribute 'a0'");
  }
}

TEST(Hdf5Vlen, TheFuzzReproducersAreRefusedByScurrysOwnChecks) {
  // Chunked and gzip-compressed barcodes whose heap object runs past its collection: libhdf5
  // crashed here (SIGSEGV in H5HG_read) before scurry read the chunks itself.
  std::string p = regression("10x_vlen_heap_chunked.h5");
  std::string m = input_error([&] { read_10x_h5(p); });
  EXPECT_HAS(m, p + ": corrupt variable-length string storage (a global heap object runs past its collection");
  EXPECT_HAS(m, "(/matrix/barcodes)");
  // Vlen string attributes whose heap's free space has size 0: libhdf5 looped forever.
  p = regression("h5ad_attr_heap_hang.h5ad");
  m = input_error([&] { read_h5ad(p); });
  EXPECT_HAS(m, p + ": corrupt variable-length string storage (a global heap collection's free space is damaged");
  EXPECT_HAS(m, "attribute '");
}

}  // namespace
}  // namespace scurry
