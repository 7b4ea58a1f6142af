// The readers' taps (core/array_tap.hpp; H5adReadOptions::x_tap, the GPU run's upload during the
// read): a recording tap sees every element of X's CSR arrays exactly once, with the values the read
// returns, on every read path: h5ad's parallel pread (forced for every size), H5Dread (pread off,
// gzip chunks, int32 values converted to float), the parallel read of unfiltered chunks, zarr's
// chunk decoders (every codec, many small chunks, partial edge chunks); and nothing for what the GPU
// chain does not take as read (a CSC X, float64 values, a dense X).
#include <hdf5.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/array_tap.hpp"
#include "core/error.hpp"
#include "io/h5ad.hpp"
#include "io/hdf5.hpp"
#include "io/zarr.hpp"
#include "sample_datasets.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

// Copies what it is given and counts how often each element was given.
class Recording final : public ArrayTap {
 public:
  void begin(size_t n, size_t elem) override {
    std::lock_guard<std::mutex> lock(m_);
    ++begun;
    n_ = n, elem_ = elem;
    bytes.assign(n * elem, 0);
    seen.assign(n, 0);
  }
  void piece(const void* src, size_t e0, size_t e1) override {
    ASSERT_LE(e0, e1);
    ASSERT_LE(e1, n_);
    std::memcpy(bytes.data() + e0 * elem_, src, (e1 - e0) * elem_);
    std::lock_guard<std::mutex> lock(m_);
    ++pieces;
    for (size_t i = e0; i < e1; ++i) ++seen[i];
  }
  template <class T>
  std::vector<T> values() const {
    std::vector<T> v(n_);
    if (n_) std::memcpy(v.data(), bytes.data(), n_ * sizeof(T));
    return v;
  }
  bool each_once() const {
    for (int s : seen)
      if (s != 1) return false;
    return true;
  }
  int begun = 0, pieces = 0;
  size_t n_ = 0, elem_ = 0;
  std::vector<char> bytes;
  std::vector<int> seen;

 private:
  std::mutex m_;
};

struct Taps {
  Recording indptr, indices, data;
  CsrTap tap() { return CsrTap{&indptr, &indices, &data}; }
};

// The tap saw X (a CSR matrix read as float32) whole, each element once.
void expect_tapped(Taps& t, const Dataset& d) {
  const CsrF* x = std::get_if<CsrF>(&d.X.m);
  ASSERT_NE(x, nullptr);
  for (Recording* r : {&t.indptr, &t.indices, &t.data}) {
    EXPECT_GE(r->begun, 1);
    EXPECT_TRUE(r->each_once());
  }
  EXPECT_EQ(t.indptr.values<int64_t>(), x->indptr);
  EXPECT_EQ(t.indices.values<int32_t>(), x->indices);
  EXPECT_EQ(t.data.values<float>(), x->data);
}

struct Env {
  std::string name;
  Env(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~Env() { unsetenv(name.c_str()); }
};

TEST(ArrayTap, H5adEveryReadPath) {
  const uint64_t seed = test::fresh_seed();
  test::TempDir tmp;
  for (int kind = 0; kind < 5; ++kind)
    for (int gzip : {0, 4})
      for (const char* pread : {"force", "0"}) {
        SCOPED_TRACE("X kind " + std::to_string(kind) + ", gzip " + std::to_string(gzip) + ", pread " + pread);
        const Dataset d = random_dataset(seed + kind, kind);
        const std::string p = tmp.path("t" + std::to_string(kind) + "_" + std::to_string(gzip) + ".h5ad");
        write_h5ad(d, p, {gzip});
        const Env e("SCURRY_H5_PREAD", pread);
        Taps t;
        H5adReadOptions o;
        o.x_tap = t.tap();
        const Dataset r = read_h5ad(p, o);
        expect_dataset_eq(d, r);
        if (kind == 0 || kind == 2) {  // float32 and int32 CSR values (int32 converted by H5Dread)
          expect_tapped(t, r);
        } else {  // float64 or dense: the GPU chain converts; nothing tapped
          EXPECT_EQ(t.data.begun, 0);
          EXPECT_EQ(t.indices.begun, 0);
        }
      }
}

TEST(ArrayTap, H5adCscIsNotTapped) {
  test::TempDir tmp;
  const std::string p = tmp.path("csc.h5ad");
  {
    Dataset d = random_dataset(test::fresh_seed(), 0);
    write_h5ad(d, p);
  }
  // Recode X as csc_matrix over the transposed arrays (the same bytes read as columns).
  {
    hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = H5Gopen2(f, "X", H5P_DEFAULT);
    H5Adelete(g, "encoding-type");
    hid_t st = H5Tcopy(H5T_C_S1);
    H5Tset_size(st, 10);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(g, "encoding-type", st, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, st, "csc_matrix");
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(st);
    H5Gclose(g);
    H5Fclose(f);
  }
  Taps t;
  H5adReadOptions o;
  o.x_tap = t.tap();
  try {
    (void)read_h5ad(p, o);  // (may be refused: the shape does not fit the arrays read as CSC)
  } catch (const InputError&) {
  }
  EXPECT_EQ(t.data.begun + t.indices.begun + t.indptr.begun, 0);
}

// The parallel read of unfiltered chunks (h5py's chunks=True): a tap sees every chunk once.
TEST(ArrayTap, Hdf5ChunkedPieces) {
  Rng rng(test::fresh_seed());
  test::TempDir tmp;
  const std::string p = tmp.path("chunked.h5");
  const hsize_t n = static_cast<hsize_t>(rng.integer(20000, 40000)), chunk = static_cast<hsize_t>(rng.integer(500, 1500));
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.normal());
  {
    hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t pl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(pl, 1, &chunk);
    hid_t d = H5Dcreate2(f, "v", H5T_NATIVE_FLOAT, space, H5P_DEFAULT, pl, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(d);
    H5Pclose(pl);
    H5Sclose(space);
    H5Fclose(f);
  }
  const Env e("SCURRY_H5_PREAD", "force");
  Recording r;
  const std::vector<float> got = h5::File::open(p).dataset("v").read<float>(&r);
  EXPECT_EQ(got, v);
  EXPECT_TRUE(r.each_once());
  EXPECT_EQ(r.values<float>(), v);
  EXPECT_EQ(r.pieces, static_cast<int>((n + chunk - 1) / chunk));
}

TEST(ArrayTap, ZarrEveryCodecManyChunks) {
  const uint64_t seed = test::fresh_seed();
  test::TempDir tmp;
  int i = 0;
  for (int format : {2, 3})
    for (ZarrCodec codec : {ZarrCodec::blosc_lz4, ZarrCodec::zstd, ZarrCodec::gzip, ZarrCodec::none}) {
      for (int kind : {0, 1, 2}) {
        SCOPED_TRACE("zarr v" + std::to_string(format) + " codec " + std::to_string(static_cast<int>(codec)) +
                     " X kind " + std::to_string(kind));
        const Dataset d = random_dataset(seed + i, kind);
        ZarrWriteOptions o;
        o.format = format;
        o.codec = codec;
        o.chunk_rows = 3 + i % 5;
        o.chunk_elems = 97 + 11 * (i % 7);  // many chunks, a partial last one
        const std::string p = tmp.path("z" + std::to_string(i) + ".zarr");
        write_zarr(d, p, o);
        Taps t;
        H5adReadOptions ro;
        ro.x_tap = t.tap();
        const Dataset r = read_zarr(p, ro);
        expect_dataset_eq(d, r);
        if (kind == 1) {
          EXPECT_EQ(t.data.begun, 0);
        } else {
          expect_tapped(t, r);
          // X's data in pieces, one a chunk (a small random X can fit one chunk)
          const int64_t nnz = to_csr_f(d.X).nnz();
          EXPECT_EQ(t.data.pieces, static_cast<int>((nnz + o.chunk_elems - 1) / o.chunk_elems));
        }
        ++i;
      }
    }
}

}  // namespace
}  // namespace scurry
