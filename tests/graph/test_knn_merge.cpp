// The top-k merge of an index split into parts (merge_topk, knn_from_lists: the index-sharded
// multi-GPU kNN), against brute-force oracles: random candidate lists with many tied keys, and a
// whole kNN search on integer data (ties everywhere) whose rows are split into shards.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "graph/knn.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

using Pair = std::pair<double, int32_t>;

// The sorted top-w of `pairs` as a row of TopkLists (width w, padded with -1 / +inf).
void put_row(TopkLists& t, int64_t i, std::vector<Pair> pairs) {
  std::sort(pairs.begin(), pairs.end());
  for (int64_t j = 0; j < t.w; ++j) {
    const bool has = j < static_cast<int64_t>(pairs.size());
    t.indices[static_cast<size_t>(i * t.w + j)] = has ? pairs[j].second : -1;
    t.keys[static_cast<size_t>(i * t.w + j)] = has ? pairs[j].first : std::numeric_limits<double>::infinity();
  }
}

TopkLists empty_lists(int64_t n, int64_t w) {
  TopkLists t;
  t.n = n;
  t.w = w;
  t.indices.assign(static_cast<size_t>(n * w), -1);
  t.keys.assign(static_cast<size_t>(n * w), std::numeric_limits<double>::infinity());
  return t;
}

// Every row has a pool of candidates (distinct indices, integer keys 0..9: many ties) dealt out to
// S parts at random; each part keeps its own top-w_p (some parts fewer than w, some empty rows). The
// merge must equal the top-w of the whole pool by (key, index), for any thread count.
TEST(KnnMerge, MergeTopkEqualsTheTopOfTheWholePool) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  const int64_t n = 3000, w = 14;
  for (int S : {1, 2, 3, 5}) {
    std::vector<TopkLists> parts;
    for (int s = 0; s < S; ++s) parts.push_back(empty_lists(n, s == 1 ? w + 6 : w));  // widths may differ
    TopkLists want = empty_lists(n, w);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pool = static_cast<int64_t>(rng() % 60);  // sometimes fewer than w in all
      std::vector<int32_t> ids(200);
      for (int32_t j = 0; j < 200; ++j) ids[j] = j;
      std::shuffle(ids.begin(), ids.end(), rng);
      std::vector<Pair> all;
      std::vector<std::vector<Pair>> dealt(static_cast<size_t>(S));
      for (int64_t c = 0; c < pool; ++c) {
        const Pair p(static_cast<double>(rng() % 10), ids[c]);
        all.push_back(p);
        dealt[rng() % S].push_back(p);
      }
      put_row(want, i, all);
      for (int s = 0; s < S; ++s) put_row(parts[s], i, dealt[s]);
    }
    for (int threads : {1, 3}) {
      const TopkLists got = merge_topk(parts, w, threads);
      ASSERT_EQ(got.n, n);
      ASSERT_EQ(got.w, w);
      EXPECT_EQ(got.indices, want.indices) << S << " parts, " << threads << " threads";
      EXPECT_EQ(got.keys, want.keys) << S << " parts, " << threads << " threads";
    }
  }
  // A pair held by two parts counts once; unsorted rows and parts of other lengths are refused.
  TopkLists a = empty_lists(1, 3), b = empty_lists(1, 3);
  a.indices = {2, 7, -1};
  a.keys = {0.5, 1.0, std::numeric_limits<double>::infinity()};
  b.indices = {2, 9, 4};
  b.keys = {0.5, 1.0, 3.0};
  const TopkLists m = merge_topk({a, b}, 4);
  EXPECT_EQ(m.indices, (std::vector<int32_t>{2, 7, 9, 4}));
  EXPECT_EQ(m.keys, (std::vector<double>{0.5, 1.0, 1.0, 3.0}));
  TopkLists c = empty_lists(2, 3);
  EXPECT_THROW(merge_topk({a, c}, 3), Error);
  TopkLists u = a;
  u.indices = {7, 2, -1};
  u.keys = {1.0, 0.5, std::numeric_limits<double>::infinity()};
  EXPECT_THROW(merge_topk({u, b}, 4), Error);
}

// The index-sharded search in miniature: the rows of integer-valued data (distances tie often) are
// split into S contiguous shards; each shard gives every query its k - 1 nearest rows of the shard
// (float64, self excluded, ties by index), the merge and knn_from_lists give the whole search:
// equal to knn_brute_force (indices and float distances) for both metrics.
TEST(KnnMerge, ShardedSearchMergesToBruteForce) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  const int64_t n = 400, d = 3, k = 15;
  DenseF x(n, d);
  for (float& v : x.data) v = static_cast<float>(static_cast<int>(rng() % 5) - 2);
  for (int64_t j = 0; j < d; ++j) x(7, j) = 0.f;  // a zero row (cosine: distance 1 from everything)
  for (KnnMetric metric : {KnnMetric::euclidean, KnnMetric::cosine}) {
    const Knn want = knn_brute_force(x, k, metric);
    auto dist = [&](int64_t i, int64_t j) {
      double dd = 0, dot = 0, ni = 0, nj = 0;
      for (int64_t c = 0; c < d; ++c) {
        const double a = x(i, c), b = x(j, c);
        dd += (a - b) * (a - b);
        dot += a * b;
        ni += a * a;
        nj += b * b;
      }
      if (metric == KnnMetric::euclidean) return std::sqrt(dd);
      return (ni == 0 || nj == 0) ? 1.0 : 1.0 - dot / (std::sqrt(ni) * std::sqrt(nj));
    };
    for (int S : {1, 2, 3, 7}) {
      std::vector<TopkLists> parts;
      for (int s = 0; s < S; ++s) {
        const int64_t b = n * s / S, e = n * (s + 1) / S;
        TopkLists t = empty_lists(n, k - 1);
        for (int64_t i = 0; i < n; ++i) {
          std::vector<Pair> row;
          for (int64_t j = b; j < e; ++j)
            if (j != i) row.emplace_back(dist(i, j), static_cast<int32_t>(j));
          put_row(t, i, row);
        }
        parts.push_back(std::move(t));
      }
      const Knn got = knn_from_lists(merge_topk(parts, k - 1, 2), k);
      EXPECT_EQ(got.n, n);
      EXPECT_EQ(got.k, k);
      EXPECT_EQ(got.indices, want.indices) << knn_metric_name(metric) << ", " << S << " shards";
      EXPECT_EQ(got.distances, want.distances) << knn_metric_name(metric) << ", " << S << " shards";
    }
  }
}

}  // namespace
}  // namespace scurry
