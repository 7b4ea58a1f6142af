// starCAT's CPU fit pieces (nmf/starcat.hpp): the per-gene sums against a plain serial sum, the same
// bits for any thread count; the fit through the gene map (no compacted copy) against
// nnls_fixed_spectra on the compacted, scaled query the old path built; the first bad value by
// position for any thread count. (starcat_fit against a brute-force NNLS: test_cnmf_dropin.)
#include <cmath>
#include <random>
#include <string>

#include "core/error.hpp"
#include "nmf/starcat.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

// Columns 0..g-1 mapped to a shuffled subset (every third dropped), columns shuffled within rows.
struct Mapped {
  CsrF Q;
  std::vector<int32_t> map;
  int64_t h = 0;
};

Mapped mapped_query(int64_t cells, int64_t g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Mapped m;
  const CsrF R = test::random_counts(cells, g, 0.3, seed + 1, 25);
  m.Q = CsrF::zeros(cells, g);
  for (int64_t i = 0; i < cells; ++i) {
    std::vector<std::pair<int32_t, float>> row;
    for (int64_t p = R.indptr[i]; p < R.indptr[i + 1]; ++p) row.emplace_back(R.indices[p], R.data[p]);
    std::shuffle(row.begin(), row.end(), rng);
    for (const auto& [j, v] : row) m.Q.indices.push_back(j), m.Q.data.push_back(v);
    m.Q.indptr[i + 1] = static_cast<int64_t>(m.Q.data.size());
  }
  m.map.assign(static_cast<size_t>(g), -1);
  for (int64_t j = 0; j < g; ++j)
    if (j % 3 != 1) m.map[j] = static_cast<int32_t>(m.h++);
  return m;
}

}  // namespace

TEST(Starcat, GeneSumsMatchSerialAnyThreads) {
  const uint64_t seed = test::fresh_seed();
  const Mapped m = mapped_query(40000, 30, seed);  // three blocks of 16,384 cells
  const std::vector<double> one = starcat_gene_sums(Context::cpu(1), m.Q, m.map, m.h);
  const std::vector<double> three = starcat_gene_sums(Context::cpu(3), m.Q, m.map, m.h);
  EXPECT_EQ(one, three);
  std::vector<double> want(static_cast<size_t>(2 * m.h), 0.0);
  for (int64_t p = 0; p < m.Q.nnz(); ++p) {
    const int32_t j = m.map[m.Q.indices[p]];
    if (j >= 0) want[j] += m.Q.data[p], want[m.h + j] += static_cast<double>(m.Q.data[p]) * m.Q.data[p];
  }
  ASSERT_EQ(one.size(), want.size());
  for (size_t q = 0; q < want.size(); ++q) EXPECT_NEAR(one[q], want[q], 1e-12 * want[q]) << q;
}

TEST(Starcat, MappedFitEqualsCompactedFit) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  const Mapped m = mapped_query(3000, 40, seed);
  const Context ctx = Context::cpu(2);
  const std::vector<double> sd = starcat_sd(starcat_gene_sums(ctx, m.Q, m.map, m.h), m.h, m.Q.n_rows);
  DenseD H(7, m.h);
  for (auto& v : H.data) v = u(rng) < 0.3 ? 0.0 : static_cast<float>(u(rng));
  // The old path: query[:, shared], entries in the row's order, each value float(v / sd).
  CsrF X = CsrF::zeros(m.Q.n_rows, m.h);
  for (int64_t i = 0; i < m.Q.n_rows; ++i) {
    for (int64_t p = m.Q.indptr[i]; p < m.Q.indptr[i + 1]; ++p) {
      const int32_t j = m.map[m.Q.indices[p]];
      if (j >= 0) X.indices.push_back(j), X.data.push_back(static_cast<float>(m.Q.data[p] / sd[j]));
    }
    X.indptr[i + 1] = static_cast<int64_t>(X.data.size());
  }
  const DenseF want = nnls_fixed_spectra(ctx, X, H, 100);
  const DenseF got = nnls_fixed_spectra_mapped(Context::cpu(3), m.Q, m.map, sd, H, 77);
  EXPECT_EQ(got.data, want.data);
  int64_t positive = 0;
  for (const float v : want.data) positive += v > 0;
  EXPECT_GT(positive, static_cast<int64_t>(want.data.size()) / 10);
  // sd 0 -> 1: a column without counts.
  std::vector<double> sums(4, 0.0);
  sums[1] = 2.0, sums[3] = 2.0;  // column 1: the values 1 and 1 over 2 cells (sd 0); column 0: none
  const std::vector<double> s2 = starcat_sd(sums, 2, 2);
  EXPECT_EQ(s2, (std::vector<double>{1.0, 1.0}));
}

TEST(Starcat, FirstBadValueByPosition) {
  const uint64_t seed = test::fresh_seed();
  CsrF Q = test::random_counts(2000, 200, 0.5, seed);
  ASSERT_GT(Q.nnz(), 150000);
  EXPECT_EQ(starcat_first_bad_value(Context::cpu(3), Q), Q.nnz());
  Q.data[140000] = -1.0f;  // in the third block of 65,536
  Q.data[100000] = std::nanf("");
  Q.data[150000] = -3.0f;
  EXPECT_EQ(starcat_first_bad_value(Context::cpu(1), Q), 100000);
  EXPECT_EQ(starcat_first_bad_value(Context::cpu(3), Q), 100000);
  std::vector<std::string> genes;
  for (int j = 0; j < 200; ++j) genes.push_back("g" + std::to_string(j));
  DenseD ref(2, 200);
  for (auto& v : ref.data) v = 1;
  Q.data[100000] = 1;
  try {
    starcat_fit(Context::cpu(2), Q, genes, ref, genes, StarcatOptions(), "q.h5ad");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "q.h5ad: the query has the value -1; starCAT needs non-negative counts");
  }
}
