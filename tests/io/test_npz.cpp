// numpy .npy/.npz: cNMF 1.7.1's own files (tests/data/golden/cnmf_pbmc3k) read with their dtypes,
// labels and values; scurry's files read back (random values, every dtype, labels of both kinds);
// numpy itself reading scurry's files is tests/nmf/test_cnmf_golden.sh. Malformed files fail with the
// path in the message.
#include <cmath>
#include <fstream>
#include <random>

#include "core/error.hpp"
#include "io/npz.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

std::string golden(const std::string& f) { return test::test_data("golden/cnmf_pbmc3k/pbmc3k/" + f); }

TEST(Npz, ReadsCnmfReplicateParams) {
  const DfNpz d = read_df_npz(golden("cnmf_tmp/pbmc3k.nmf_params.df.npz"));
  EXPECT_EQ(d.data_descr, "|O");  // a mixed int/bool frame: a pickled object array, Fortran-ordered
  ASSERT_EQ(d.columns, (std::vector<std::string>{"n_components", "iter", "nmf_seed", "completed"}));
  EXPECT_FALSE(d.columns_int);
  EXPECT_TRUE(d.index_int);
  ASSERT_EQ(d.data.n_rows, 12);
  // numpy.random.seed(14); randint(1, 2**31 - 1, 12): cNMF's replicate seeds.
  const int64_t seeds[] = {59886188, 1812018521, 1173234957, 683264407, 1590974792, 1573170938,
                           34561383, 639972075,  1330305693, 864515723, 1965393105, 953457214};
  for (int r = 0; r < 12; ++r) {
    EXPECT_EQ(d.index[r], std::to_string(r));
    EXPECT_EQ(d.data(r, 0), r < 6 ? 4 : 5);
    EXPECT_EQ(d.data(r, 1), r % 6);
    EXPECT_EQ(static_cast<int64_t>(d.data(r, 2)), seeds[r]);
    EXPECT_EQ(d.objects[r * 4 + 3].kind, PyValue::boolean);
    EXPECT_EQ(d.data(r, 3), 0);
  }
}

TEST(Npz, ReadsCnmfFramesOfEveryKind) {
  const DfNpz m = read_df_npz(golden("cnmf_tmp/pbmc3k.spectra.k_5.merged.df.npz"));
  EXPECT_EQ(m.data_descr, "<f8");
  EXPECT_EQ(m.data.n_rows, 30);
  EXPECT_EQ(m.data.n_cols, 500);
  EXPECT_EQ(m.index[0], "iter0_topic1");
  EXPECT_EQ(m.index[29], "iter5_topic5");
  EXPECT_EQ(m.columns[0], "CPSF3L");
  // Every replicate's rows are its iter file's rows.
  const DfNpz it1 = read_df_npz(golden("cnmf_tmp/pbmc3k.spectra.k_5.iter_1.df.npz"));
  EXPECT_TRUE(it1.index_int);
  EXPECT_EQ(it1.index, (std::vector<std::string>{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(it1.columns, m.columns);
  for (int c = 0; c < 5; ++c)
    for (int j = 0; j < 500; ++j) ASSERT_EQ(it1.data(c, j), m.data(5 + c, j));
  const DfNpz u = read_df_npz(golden("cnmf_tmp/pbmc3k.usages.k_5.dt_0_5.consensus.df.npz"));
  EXPECT_EQ(u.data_descr, "<f4");
  EXPECT_TRUE(u.columns_int);
  EXPECT_FALSE(u.index_int);
  EXPECT_EQ(u.index[0], "AAACATACAACCAC-1");
  EXPECT_NEAR(u.data(0, 0), 0.61714673, 1e-7);
  const DfNpz ts = read_df_npz(golden("cnmf_tmp/pbmc3k.tpm_stats.df.npz"));  // Fortran-ordered float64
  EXPECT_EQ(ts.columns, (std::vector<std::string>{"__mean", "__std"}));
  EXPECT_EQ(ts.data.n_rows, 13714);
  EXPECT_EQ(ts.index[0], "AL627309.1");
  EXPECT_NEAR(ts.data(0, 0), 0.36563072, 1e-7);
  EXPECT_NEAR(ts.data(0, 1), 11.55647542, 1e-7);
  EXPECT_EQ(ts.data(1, 0), 0.0);
  const DfNpz ks = read_df_npz(golden("pbmc3k.k_selection_stats.df.npz"));
  EXPECT_EQ(ks.columns, (std::vector<std::string>{"k", "local_density_threshold", "silhouette", "prediction_error"}));
  EXPECT_EQ(ks.data(1, 0), 5);
  EXPECT_NEAR(ks.data(1, 3), 4.60331460e+05, 1);
}

TEST(Npz, RoundTripsEveryDtype) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1e6, 1e6);
  test::TempDir t;
  const int64_t r = 1 + rng() % 40, c = 1 + rng() % 300;
  DenseD d(r, c);
  for (auto& x : d.data) x = u(rng);
  d.data[0] = std::nan("");
  std::vector<std::string> idx, cols;
  for (int64_t i = 0; i < r; ++i) idx.push_back("cell-" + std::to_string(rng() % 100000) + "\xc3\xa9");  // UTF-8
  for (int64_t j = 0; j < c; ++j) cols.push_back(std::to_string(static_cast<int64_t>(rng() % 5000000000ull) - 2500000000ll));
  write_df_npz(t.path("a.npz"), idx, false, cols, true, d, NpzDtype::f64);
  const DfNpz a = read_df_npz(t.path("a.npz"));
  EXPECT_EQ(a.index, idx);
  EXPECT_EQ(a.columns, cols);
  EXPECT_TRUE(a.columns_int);
  EXPECT_EQ(a.data_descr, "<f8");
  EXPECT_TRUE(std::isnan(a.data.data[0]));
  for (size_t q = 1; q < d.data.size(); ++q) ASSERT_EQ(a.data.data[q], d.data[q]);
  write_df_npz(t.path("b.npz"), idx, false, cols, false, d, NpzDtype::f32);
  const DfNpz b = read_df_npz(t.path("b.npz"));
  EXPECT_EQ(b.data_descr, "<f4");
  for (size_t q = 1; q < d.data.size(); ++q) ASSERT_EQ(b.data.data[q], static_cast<double>(static_cast<float>(d.data[q])));
  // Objects: ints of every pickle width (and > 2^31), bools, floats, strings in the labels.
  std::vector<PyValue> o;
  for (int64_t i = 0; i < r; ++i) {
    o.push_back(PyValue::of(static_cast<int64_t>(rng() % 300)));
    o.push_back(PyValue::of(static_cast<int64_t>(rng() % 70000)));
    o.push_back(PyValue::of(static_cast<int64_t>(rng() % 4294967295ull - 2147483648ull * (rng() % 3))));
    o.push_back(PyValue::of_bool(rng() % 2));
    o.push_back(PyValue::of(u(rng)));
  }
  write_df_npz_objects(t.path("c.npz"), idx, false, {"a", "b", "c", "completed", "x"}, false, r, o);
  const DfNpz cc = read_df_npz(t.path("c.npz"));
  EXPECT_EQ(cc.data_descr, "|O");
  ASSERT_EQ(cc.objects.size(), o.size());
  for (size_t q = 0; q < o.size(); ++q) {
    ASSERT_EQ(cc.objects[q].kind, o[q].kind) << q;
    ASSERT_EQ(cc.data.data[q], o[q].as_double()) << q;
  }
}

TEST(Npz, BadFilesNameThePath) {
  test::TempDir t;
  {
    std::ofstream(t.path("x.npz")) << "not a zip at all, just text that is long enough";
  }
  try {
    read_df_npz(t.path("x.npz"));
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("x.npz"), std::string::npos) << e.what();
  }
  write_zip(t.path("y.npz"), {{"data.npy", "garbage"}});
  try {
    read_df_npz(t.path("y.npz"));
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("y.npz"), std::string::npos) << e.what();
  }
  // A flipped byte in a member fails the CRC (or the inflate).
  write_df_npz(t.path("z.npz"), {"a"}, false, {"b"}, false, DenseD(1, 1, 2.0), NpzDtype::f64);
  std::string bytes;
  {
    std::ifstream in(t.path("z.npz"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[40] ^= 0x5a;
  {
    std::ofstream(t.path("z.npz"), std::ios::binary) << bytes;
  }
  EXPECT_THROW(read_df_npz(t.path("z.npz")), InputError);
}

}  // namespace
}  // namespace scurry
