// GPU tests (label gpu): X copied to the device during the read (exec/device_tap.hpp). A seeded
// CSR count matrix written as h5ad (contiguous, read by the parallel pread in many 16 MiB pieces,
// and gzip'd: H5Dread) and as a zstd zarr store of many chunks: the device matrix the tap made
// equals upload() of what the read returned, bit for bit; the count check agrees with check_counts
// (a clean matrix; a negative value, a NaN); a tap that saw another matrix is not taken.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/device_csr.cuh"
#include "exec/device_tap.hpp"
#include "io/h5ad.hpp"
#include "io/zarr.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

// n x g counts, ~nnz_row entries a row (distinct sorted columns), values 1..50.
struct Rng {
  std::mt19937_64 e;
  explicit Rng(uint64_t s) : e(s) {}
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(e); }  // [lo, hi]
};

CsrF counts(int64_t n, int64_t g, int nnz_row, uint64_t seed) {
  Rng rng(seed);
  CsrF m;
  m.n_rows = n, m.n_cols = g;
  m.indptr.assign(1, 0);
  for (int64_t r = 0; r < n; ++r) {
    int64_t c = rng.integer(0, 3);
    while (c < g) {
      m.indices.push_back(static_cast<int32_t>(c));
      m.data.push_back(static_cast<float>(rng.integer(1, 50)));
      c += 1 + rng.integer(0, 2 * g / nnz_row);
    }
    m.indptr.push_back(static_cast<int64_t>(m.indices.size()));
  }
  return m;
}

Dataset frame(CsrF x) {
  Dataset d;
  for (int64_t i = 0; i < x.n_rows; ++i) d.obs.index.push_back("c" + std::to_string(i));
  for (int64_t j = 0; j < x.n_cols; ++j) d.var.index.push_back("g" + std::to_string(j));
  d.X = Matrix(std::move(x), DType::f32);
  return d;
}

template <class T>
std::vector<T> down(CudaResources& r, const DeviceArray<T>& a, size_t n) {
  std::vector<T> h(n);
  copy_to_host(r, h.data(), a.data(), n * sizeof(T));
  return h;
}

void expect_device_equals(CudaResources& r, const DeviceCsr& m, const CsrF& host) {
  EXPECT_EQ(m.n_rows, host.n_rows);
  EXPECT_EQ(m.n_cols, host.n_cols);
  ASSERT_EQ(m.nnz, host.nnz());
  EXPECT_EQ(down(r, m.indptr, host.indptr.size()), host.indptr);
  EXPECT_EQ(down(r, m.indices, host.indices.size()), host.indices);
  EXPECT_EQ(down(r, m.data, host.data.size()), host.data);
}

struct Env {
  std::string name;
  Env(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~Env() { unsetenv(name.c_str()); }
};

TEST(DeviceTapGpu, ReadsEqualUploadOnEveryPath) {
  SCURRY_REQUIRE_GPU();
  Context ctx = test::gpu_context();
  CudaResources& r = *ctx.cuda();
  const uint64_t seed = test::fresh_seed();
  // ~12M entries: 48 MB of values and of indices, several pread pieces and staging slots each
  const Dataset d = frame(counts(60000, 4000, 200, seed));
  test::TempDir tmp;
  const std::string flat = tmp.path("x.h5ad"), gz = tmp.path("gz.h5ad"), zs = tmp.path("x.zarr");
  write_h5ad(d, flat);
  write_h5ad(d, gz, {4});
  ZarrWriteOptions zo;
  zo.codec = ZarrCodec::zstd;
  zo.chunk_elems = 1 << 18;
  write_zarr(d, zs, zo);
  const Env e("SCURRY_H5_PREAD", "force");  // (the parallel pread below its 64 MiB threshold too)
  for (const std::string& p : {flat, gz, zs}) {
    SCOPED_TRACE(p);
    auto tap = make_device_csr_tap(ctx);
    ASSERT_TRUE(tap);
    H5adReadOptions o;
    o.x_tap = csr_tap_of(tap);
    const Dataset got = p == zs ? read_zarr(p, o) : read_h5ad(p, o);
    const CsrF& host = std::get<CsrF>(got.X.m);
    EXPECT_TRUE(tapped_counts_clean(tap, got.X));
    DeviceCsr m;
    ASSERT_TRUE(take_tapped(tap, host, m));
    expect_device_equals(r, m, host);
    EXPECT_EQ(host.data, std::get<CsrF>(d.X.m).data);
    DeviceCsr again;
    EXPECT_FALSE(take_tapped(tap, host, again));  // taken once
  }
}

TEST(DeviceTapGpu, CountCheckAgreesWithCheckCounts) {
  SCURRY_REQUIRE_GPU();
  Context ctx = test::gpu_context();
  const uint64_t seed = test::fresh_seed();
  test::TempDir tmp;
  for (float bad : {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    Dataset d = frame(counts(30000, 3000, 150, seed));
    CsrF& x = std::get<CsrF>(d.X.m);
    Rng rng(seed + 1);
    const int64_t at = rng.integer(0, x.nnz() - 1);
    x.data[static_cast<size_t>(at)] = bad;
    const std::string p = tmp.path("bad.h5ad");
    write_h5ad(d, p);
    auto tap = make_device_csr_tap(ctx);
    H5adReadOptions o;
    o.x_tap = csr_tap_of(tap);
    const Dataset got = read_h5ad(p, o);
    EXPECT_FALSE(tapped_counts_clean(tap, got.X)) << bad;
    EXPECT_THROW(check_counts(got.X, p), InputError);
  }
  // A tap given another matrix than the one it saw is not taken; one that saw nothing is not clean.
  const Dataset a = frame(counts(2000, 500, 50, seed + 2)), b = frame(counts(2001, 500, 50, seed + 3));
  const std::string pa = tmp.path("a.h5ad");
  write_h5ad(a, pa);
  auto tap = make_device_csr_tap(ctx);
  H5adReadOptions o;
  o.x_tap = csr_tap_of(tap);
  (void)read_h5ad(pa, o);
  DeviceCsr m;
  EXPECT_FALSE(take_tapped(tap, std::get<CsrF>(b.X.m), m));
  EXPECT_FALSE(tapped_counts_clean(make_device_csr_tap(ctx), a.X));
}

}  // namespace
}  // namespace scurry
