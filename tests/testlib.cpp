#include "testlib.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>

#include "exec/context.hpp"
#include "sim/simulate.hpp"

namespace scurry::test {

// SCURRY_SOURCE_DIR in the environment overrides the checkout compiled in.
std::string source_dir() {
  const char* env = std::getenv("SCURRY_SOURCE_DIR");
  return env && *env ? env : SCURRY_SOURCE_DIR;
}
std::string test_data(const std::string& rel) { return source_dir() + "/tests/data/" + rel; }
std::string repo_data(const std::string& rel) { return source_dir() + "/data/" + rel; }
// SCURRY_BINARY in the environment overrides the build's executable (test binaries run elsewhere).
std::string scurry_binary() {
  const char* env = std::getenv("SCURRY_BINARY");
  return env && *env ? env : SCURRY_BINARY;
}

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  auto base = std::filesystem::temp_directory_path();
  std::random_device rd;
  for (;;) {
    dir_ = base / ("scurry_test_" + std::to_string(rd()) + "_" + std::to_string(counter++));
    if (std::filesystem::create_directory(dir_)) break;
  }
}
TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

uint64_t fresh_seed() {
  uint64_t seed;
  if (const char* s = std::getenv("SCURRY_TEST_SEED")) seed = std::strtoull(s, nullptr, 10);
  else seed = std::random_device{}() ^ static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::fprintf(stderr, "[seed] %s.%s SCURRY_TEST_SEED=%llu\n", info ? info->test_suite_name() : "?",
               info ? info->name() : "?", static_cast<unsigned long long>(seed));
  return seed;
}

CsrF random_counts(int64_t rows, int64_t cols, double density, uint64_t seed, int max_count) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int> v(1, max_count);
  CsrF m = CsrF::zeros(rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      if (u(rng) < density) {
        m.indices.push_back(static_cast<int32_t>(c));
        m.data.push_back(static_cast<float>(v(rng)));
      }
    m.indptr[r + 1] = static_cast<int64_t>(m.data.size());
  }
  return m;
}

bool have_gpu() { return cuda_built() && cuda_device_count() > 0; }

Dataset simulated_counts(int64_t cells, int64_t genes, double nnz_per_cell) {
  SimulateOptions s;
  s.n_cells = cells;
  s.n_genes = genes;
  s.nnz_per_cell = nnz_per_cell;
  s.seed = fresh_seed();
  return simulate(Context::cpu(2), s);
}

DenseF clustered_points(int64_t n, int64_t d, int clusters, uint64_t seed, float offset) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  DenseD centres(clusters, d);
  for (double& v : centres.data) v = 5.0 * nd(rng) + offset;
  DenseF x(n, d);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = static_cast<int64_t>(rng() % clusters);
    for (int64_t j = 0; j < d; ++j) x(i, j) = static_cast<float>(centres(c, j) + nd(rng));
  }
  return x;
}

std::vector<std::pair<double, int32_t>> knn_oracle_row(const DenseF& x, int64_t i, KnnMetric metric, size_t keep) {
  std::vector<std::pair<double, int32_t>> r;
  r.reserve(static_cast<size_t>(x.n_rows));
  double ni = 0;
  for (int64_t c = 0; c < x.n_cols; ++c) ni += static_cast<double>(x(i, c)) * x(i, c);
  for (int64_t j = 0; j < x.n_rows; ++j) {
    if (j == i) continue;
    double dd = 0, dot = 0, nj = 0;
    for (int64_t c = 0; c < x.n_cols; ++c) {
      const double a = x(i, c), b = x(j, c);
      dd += (a - b) * (a - b);
      dot += a * b;
      nj += b * b;
    }
    double dist = std::sqrt(dd);
    if (metric == KnnMetric::cosine) dist = (ni == 0 || nj == 0) ? 1.0 : 1.0 - dot / std::sqrt(ni * nj);
    r.emplace_back(dist, static_cast<int32_t>(j));
  }
  keep = std::min(keep, r.size());
  std::partial_sort(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(keep), r.end());
  r.resize(keep);
  return r;
}

CsrF csr_from_rows(std::vector<std::vector<std::pair<int32_t, float>>>& rows, int64_t n_cols) {
  const int64_t n = static_cast<int64_t>(rows.size());
  CsrF m = CsrF::zeros(n, n_cols);
  for (int64_t i = 0; i < n; ++i) {
    std::sort(rows[i].begin(), rows[i].end());
    for (size_t p = 0; p < rows[i].size(); ++p) {
      if (p > 0 && rows[i][p].first == rows[i][p - 1].first) {
        m.data.back() += rows[i][p].second;
        continue;
      }
      m.indices.push_back(rows[i][p].first);
      m.data.push_back(rows[i][p].second);
    }
    m.indptr[i + 1] = m.nnz();
  }
  return m;
}

CsrF planted_partition(int64_t n, int64_t blocks, int intra, int inter, uint64_t seed, int hubs,
                       std::vector<int32_t>* truth_out) {
  std::vector<int32_t> truth;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.1f, 1.0f);
  const int64_t size = n / blocks;
  truth.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) truth[i] = static_cast<int32_t>(std::min(i / size, blocks - 1));
  std::vector<std::vector<std::pair<int32_t, float>>> rows(static_cast<size_t>(n));
  auto add = [&](int64_t i, int64_t j) {
    if (i == j) return;
    const float w = u(rng);
    rows[i].emplace_back(static_cast<int32_t>(j), w);
    rows[j].emplace_back(static_cast<int32_t>(i), w);
  };
  for (int64_t i = 0; i < n; ++i) {
    const int64_t b0 = truth[i] * size, b1 = truth[i] == blocks - 1 ? n : b0 + size;
    for (int t = 0; t < intra; ++t) add(i, b0 + static_cast<int64_t>(rng() % static_cast<uint64_t>(b1 - b0)));
    for (int t = 0; t < inter; ++t) add(i, static_cast<int64_t>(rng() % static_cast<uint64_t>(n)));
    if (i - b0 < hubs) {
      const int extra = 300 + static_cast<int>(rng() % 2701);
      for (int t = 0; t < extra; ++t) add(i, b0 + static_cast<int64_t>(rng() % static_cast<uint64_t>(b1 - b0)));
    }
  }
  if (truth_out) *truth_out = std::move(truth);
  return csr_from_rows(rows, n);
}

std::vector<Context> three_gpu_contexts() {
  const int devices = cuda_device_count();
  std::vector<Context> ctxs;
  for (int s = 0; s < 3; ++s) {
    ContextOptions co;
    co.device = "gpu";
    co.cuda.device = devices >= 2 ? s % devices : 0;
    ctxs.push_back(Context::create(co));
  }
  return ctxs;
}

Context gpu_context() {
  ContextOptions o;
  o.device = "gpu";
  return Context::create(o);
}

double knn_preservation(const Context& ctx, const DenseF& ref, const DenseF& emb, int64_t k) {
  const Knn a = knn_exact(ctx, ref, k + 1, KnnMetric::euclidean);
  const Knn b = knn_exact(ctx, emb, k + 1, KnnMetric::euclidean);
  int64_t hit = 0;
  for (int64_t i = 0; i < a.n; ++i) {
    std::set<int32_t> s;
    for (int64_t j = 1; j <= k; ++j) s.insert(a.index(i, j));
    for (int64_t j = 1; j <= k; ++j) hit += static_cast<int64_t>(s.count(b.index(i, j)));
  }
  return static_cast<double>(hit) / static_cast<double>(a.n * k);
}

double knn_accuracy(const Context& ctx, const DenseF& emb, const std::vector<int32_t>& labels, int64_t k) {
  const Knn nn = knn_exact(ctx, emb, k + 1, KnnMetric::euclidean);
  const int32_t n_labels = *std::max_element(labels.begin(), labels.end()) + 1;
  int64_t right = 0;
  std::vector<int> votes(static_cast<size_t>(n_labels));
  for (int64_t i = 0; i < nn.n; ++i) {
    std::fill(votes.begin(), votes.end(), 0);
    for (int64_t j = 1; j <= k; ++j) ++votes[labels[nn.index(i, j)]];
    right += std::max_element(votes.begin(), votes.end()) - votes.begin() == labels[i];
  }
  return static_cast<double>(right) / static_cast<double>(nn.n);
}

}  // namespace scurry::test
