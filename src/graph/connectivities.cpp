#include "graph/connectivities.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "exec/parallel.hpp"
#include "graph/connectivities_row.hpp"

namespace scurry {
namespace {

const char* kWhere = "connectivities";
constexpr int64_t kSmoothRows = 1024;  // rows per parallel block of the sigma search (~30 x k exp per row)
constexpr int64_t kRows = 8192;        // rows per parallel block of the other passes
constexpr int64_t kMaxBuckets = 1024;   // column buckets of the transpose (at most)
constexpr int64_t kMinBucketCols = 2048;  // columns per bucket (at least): a bucket's A^T rows stay in cache

int64_t blocks_of(int64_t n, int64_t per) { return (n + per - 1) / per; }

// Sizes, n < 2^31 (int32 column indices) and neighbour indices in [-1, n); InputError naming the
// first bad entry otherwise.
void check_knn(int threads, const Knn& knn) {
  const int64_t n = knn.n, k = knn.k;
  if (n < 0 || k < 0) fail_input(kWhere, "the kNN result has negative shape ", n, " x ", k);
  if (n > std::numeric_limits<int32_t>::max())
    fail_input(kWhere, n, " cells: more than 2^31 - 1 are not supported (int32 column indices)");
  const size_t nk = static_cast<size_t>(n) * static_cast<size_t>(k);
  if (knn.indices.size() != nk || knn.distances.size() != nk)
    fail_input(kWhere, "the kNN result holds ", knn.indices.size(), " indices and ", knn.distances.size(),
               " distances; expected n x k = ", n, " x ", k, " of each");
  const int64_t nb = blocks_of(n, kRows);
  std::vector<int64_t> bad(static_cast<size_t>(nb), -1);
  parallel_for(threads, nb, [&](int64_t b) {
    const size_t e = static_cast<size_t>(std::min(n, (b + 1) * kRows) * k);
    for (size_t p = static_cast<size_t>(b * kRows * k); p < e; ++p)
      if (knn.indices[p] < -1 || knn.indices[p] >= n) {
        bad[b] = static_cast<int64_t>(p);
        return;
      }
  });
  for (int64_t p : bad)
    if (p >= 0)
      fail_input(kWhere, "neighbour ", p % k, " of cell ", p / k, " has index ", knn.indices[p],
                 ", outside [0, ", n, ") (-1 marks a missing neighbour); the kNN result is corrupt");
}

conn::SmoothParams smooth_params(const Knn& knn, const ConnectivitiesOptions& opt) {
  conn::SmoothParams p;
  p.local_connectivity = opt.local_connectivity;
  p.target = std::log2(static_cast<double>(knn.k)) * opt.bandwidth;
  p.n_iter = opt.n_iter;
  return p;
}

SmoothKnn smooth_impl(int threads, const Knn& knn, const ConnectivitiesOptions& opt) {
  const int64_t n = knn.n, k = knn.k;
  const conn::SmoothParams p = smooth_params(knn, opt);
  SmoothKnn out;
  out.sigma.assign(static_cast<size_t>(n), 0.0f);
  out.rho.assign(static_cast<size_t>(n), 0.0f);
  // Rows with rho = 0 need the mean of all distances: they wait until it is known.
  std::vector<uint8_t> deferred(static_cast<size_t>(n), 0);
  const int64_t nb = blocks_of(n, kSmoothRows);
  std::vector<int64_t> n_deferred(static_cast<size_t>(nb), 0);
  parallel_for(threads, nb, [&](int64_t b) {
    for (int64_t i = b * kSmoothRows, e = std::min(n, (b + 1) * kSmoothRows); i < e; ++i)
      if (!conn::smooth_row(knn.distances.data() + i * k, k, p, 0.0, false, &out.rho[i], &out.sigma[i])) {
        deferred[i] = 1;
        ++n_deferred[b];
      }
  });
  int64_t total = 0;
  for (int64_t c : n_deferred) total += c;
  if (total > 0) {
    const double mean_all = conn::mean_finite(knn.distances.data(), knn.distances.size());
    parallel_for(threads, nb, [&](int64_t b) {
      if (n_deferred[b] == 0) return;
      for (int64_t i = b * kSmoothRows, e = std::min(n, (b + 1) * kSmoothRows); i < e; ++i)
        if (deferred[i]) conn::smooth_row(knn.distances.data() + i * k, k, p, mean_all, true, &out.rho[i], &out.sigma[i]);
    });
  }
  return out;
}

// One entry of a row of A or A^T.
struct Entry {
  int32_t c;
  float v;
};

// The valid neighbours of row i (index >= 0, not i itself) as keys (column << 32 | position j),
// sorted: by column, ties (a neighbour listed twice) in kNN order.
void sorted_neighbours(const Knn& knn, int64_t i, std::vector<uint64_t>& keys) {
  keys.clear();
  for (int64_t j = 0; j < knn.k; ++j) {
    const int32_t c = knn.index(i, j);
    if (c < 0 || c == i) continue;
    keys.push_back((static_cast<uint64_t>(c) << 32) | static_cast<uint64_t>(j));
  }
  std::sort(keys.begin(), keys.end());
}

// A CSR whose rows are filled in parallel: count(i) gives row i's nnz, fill(i, indices, data) writes
// it.
template <class Count, class Fill>
CsrF parallel_csr(int threads, int64_t n_rows, int64_t n_cols, Count count, Fill fill) {
  CsrF m = CsrF::zeros(n_rows, n_cols);
  const int64_t nb = blocks_of(n_rows, kRows);
  parallel_for(threads, nb, [&](int64_t b) {
    for (int64_t i = b * kRows, e = std::min(n_rows, (b + 1) * kRows); i < e; ++i) m.indptr[i + 1] = count(i);
  });
  for (int64_t i = 0; i < n_rows; ++i) m.indptr[i + 1] += m.indptr[i];
  resize_large(m.indices, static_cast<size_t>(m.indptr[n_rows]));
  resize_large(m.data, static_cast<size_t>(m.indptr[n_rows]));
  parallel_for(threads, nb, [&](int64_t b) {
    for (int64_t i = b * kRows, e = std::min(n_rows, (b + 1) * kRows); i < e; ++i)
      fill(i, m.indices.data() + m.indptr[i], m.data.data() + m.indptr[i]);
  });
  return m;
}

CsrF fuzzy_impl(int threads, const Knn& knn, const ConnectivitiesOptions& opt) {
  check_knn(threads, knn);
  const int64_t n = knn.n, k = knn.k;
  const SmoothKnn s = smooth_impl(threads, knn, opt);
  const int64_t nb = blocks_of(n, kRows);
  // A, row i in a[i k, i k + a_len[i]): sorted columns, duplicates summed, zeros dropped.
  std::unique_ptr<Entry[]> a(new Entry[static_cast<size_t>(n * k)]);  // uninitialised: filled in parallel
  advise_huge_pages(a.get(), static_cast<size_t>(n * k) * sizeof(Entry));
  std::vector<int32_t> a_len(static_cast<size_t>(n));
  // A^T without atomics, in two cache-friendly passes: A's entries are first partitioned into
  // buckets of consecutive columns (each row block writes its share of a bucket after the earlier
  // blocks' shares), then each bucket is counting-sorted by column into its range of A^T. Both
  // passes keep source-row order, so each row of A^T comes out sorted by source row.
  const int64_t bucket_cols = std::max(kMinBucketCols, blocks_of(n, kMaxBuckets));
  const int64_t n_buckets = blocks_of(n, bucket_cols);
  std::vector<int64_t> hist(static_cast<size_t>(nb * n_buckets), 0);  // [block][bucket]
  parallel_for(threads, nb, [&](int64_t b) {
    std::vector<uint64_t> keys;
    int64_t* h = hist.data() + b * n_buckets;
    for (int64_t i = b * kRows, e = std::min(n, (b + 1) * kRows); i < e; ++i) {
      sorted_neighbours(knn, i, keys);
      Entry* row = a.get() + i * k;
      int32_t len = 0;
      for (size_t q = 0; q < keys.size();) {
        const int32_t c = static_cast<int32_t>(keys[q] >> 32);
        float v = 0.0f;
        for (bool first = true; q < keys.size() && static_cast<int32_t>(keys[q] >> 32) == c; ++q, first = false) {
          const float m = conn::membership(knn.distance(i, static_cast<int64_t>(keys[q] & 0xffffffffu)), s.rho[i], s.sigma[i]);
          v = first ? m : v + m;
        }
        if (v != 0.0f) {
          row[len++] = Entry{c, v};
          ++h[c / bucket_cols];
        }
      }
      a_len[i] = len;
    }
  });
  // hist -> each block's first slot in each bucket (bucket-major, then block order).
  std::vector<int64_t> bucket_start(static_cast<size_t>(n_buckets) + 1);
  int64_t nnz_a = 0;
  for (int64_t u = 0; u < n_buckets; ++u) {
    bucket_start[u] = nnz_a;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t c = hist[b * n_buckets + u];
      hist[b * n_buckets + u] = nnz_a;
      nnz_a += c;
    }
  }
  bucket_start[n_buckets] = nnz_a;
  struct Staged {
    int32_t c, src;
    float v;
  };
  std::unique_ptr<Staged[]> staged(new Staged[static_cast<size_t>(nnz_a)]);
  advise_huge_pages(staged.get(), static_cast<size_t>(nnz_a) * sizeof(Staged));
  parallel_for(threads, nb, [&](int64_t b) {
    int64_t* cur = hist.data() + b * n_buckets;
    for (int64_t i = b * kRows, e = std::min(n, (b + 1) * kRows); i < e; ++i)
      for (int32_t q = 0; q < a_len[i]; ++q) {
        const Entry& x = a[i * k + q];
        staged[cur[x.c / bucket_cols]++] = Staged{x.c, static_cast<int32_t>(i), x.v};
      }
  });
  std::vector<int64_t> t_off(static_cast<size_t>(n) + 1);
  std::unique_ptr<Entry[]> t(new Entry[static_cast<size_t>(nnz_a)]);
  advise_huge_pages(t.get(), static_cast<size_t>(nnz_a) * sizeof(Entry));
  parallel_for(threads, n_buckets, [&](int64_t u) {
    const int64_t c0 = u * bucket_cols, c1 = std::min(n, c0 + bucket_cols);
    const Staged* in = staged.get() + bucket_start[u];
    const int64_t len = bucket_start[u + 1] - bucket_start[u];
    int64_t* off = t_off.data() + c0;  // counts, then the first slot of each column
    std::fill(off, off + (c1 - c0), 0);
    for (int64_t q = 0; q < len; ++q) ++off[in[q].c - c0];
    for (int64_t c = 0, run = bucket_start[u]; c < c1 - c0; ++c) {
      const int64_t cnt = off[c];
      off[c] = run;
      run += cnt;
    }
    std::vector<int64_t> cur(off, off + (c1 - c0));
    for (int64_t q = 0; q < len; ++q) t[cur[in[q].c - c0]++] = Entry{in[q].src, in[q].v};
  });
  t_off[n] = nnz_a;
  staged.reset();
  // Row i of the result: the sorted merge of row i of A and of A^T, fuzzy union, zeros dropped.
  const float ratio = static_cast<float>(opt.set_op_mix_ratio);
  auto merge = [&](int64_t i, auto&& emit) {
    const Entry* ar = a.get() + i * k;
    const Entry* tr = t.get() + t_off[i];
    int64_t p = 0, q = 0;
    const int64_t pe = a_len[i], qe = t_off[i + 1] - t_off[i];
    while (p < pe || q < qe) {
      float x = 0.0f, y = 0.0f;
      int32_t c;
      if (q >= qe || (p < pe && ar[p].c < tr[q].c)) {
        c = ar[p].c;
        x = ar[p++].v;
      } else if (p >= pe || tr[q].c < ar[p].c) {
        c = tr[q].c;
        y = tr[q++].v;
      } else {
        c = ar[p].c;
        x = ar[p++].v;
        y = tr[q++].v;
      }
      const float v = conn::fuzzy_union(x, y, ratio);
      if (v != 0.0f) emit(c, v);
    }
  };
  return parallel_csr(
      threads, n, n,
      [&](int64_t i) {
        int64_t cnt = 0;
        merge(i, [&](int32_t, float) { ++cnt; });
        return cnt;
      },
      [&](int64_t i, int32_t* idx, float* val) {
        merge(i, [&](int32_t c, float v) { *idx++ = c, *val++ = v; });
      });
}

CsrF distance_matrix_impl(int threads, const Knn& knn) {
  check_knn(threads, knn);
  // Per row: the sorted neighbour keys, then the non-zero distances in that order.
  auto walk = [&](int64_t i, std::vector<uint64_t>& keys, auto&& emit) {
    sorted_neighbours(knn, i, keys);
    for (uint64_t key : keys) {
      const float d = knn.distance(i, static_cast<int64_t>(key & 0xffffffffu));
      if (d != 0.0f) emit(static_cast<int32_t>(key >> 32), d);
    }
  };
  return parallel_csr(
      threads, knn.n, knn.n,
      [&](int64_t i) {
        thread_local std::vector<uint64_t> keys;
        int64_t cnt = 0;
        walk(i, keys, [&](int32_t, float) { ++cnt; });
        return cnt;
      },
      [&](int64_t i, int32_t* idx, float* val) {
        thread_local std::vector<uint64_t> keys;
        walk(i, keys, [&](int32_t c, float d) { *idx++ = c, *val++ = d; });
      });
}

// Sorted-column CSR from per-row (column, value) lists (each list sorted stably by column);
// explicit zeros dropped.
CsrF build_csr(int64_t n, std::vector<std::vector<std::pair<int32_t, float>>>& rows) {
  CsrF m = CsrF::zeros(n, n);
  for (int64_t i = 0; i < n; ++i) {
    auto& r = rows[i];
    std::stable_sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [c, v] : r)
      if (v != 0.0f) {
        m.indices.push_back(c);
        m.data.push_back(v);
      }
    m.indptr[i + 1] = static_cast<int64_t>(m.data.size());
  }
  return m;
}

}  // namespace

SmoothKnn smooth_knn_dist(const Context& ctx, const Knn& knn, const ConnectivitiesOptions& opt) {
  check_knn(ctx.threads(), knn);
  return smooth_impl(ctx.threads(), knn, opt);
}

SmoothKnn smooth_knn_dist(const Knn& knn, const ConnectivitiesOptions& opt) {
  check_knn(1, knn);
  return smooth_impl(1, knn, opt);
}

CsrF fuzzy_simplicial_set(const Context& ctx, const Knn& knn, const ConnectivitiesOptions& opt) {
  return fuzzy_impl(ctx.threads(), knn, opt);
}

CsrF fuzzy_simplicial_set(const Knn& knn, const ConnectivitiesOptions& opt) { return fuzzy_impl(1, knn, opt); }

CsrF knn_distance_matrix(const Context& ctx, const Knn& knn) { return distance_matrix_impl(ctx.threads(), knn); }

CsrF knn_distance_matrix(const Knn& knn) { return distance_matrix_impl(1, knn); }

SmoothKnn smooth_knn_dist_reference(const Knn& knn, const ConnectivitiesOptions& opt) {
  check_knn(1, knn);
  const int64_t n = knn.n, k = knn.k;
  SmoothKnn out;
  out.sigma.assign(static_cast<size_t>(n), 0.0f);
  out.rho.assign(static_cast<size_t>(n), 0.0f);
  const double target = std::log2(static_cast<double>(k)) * opt.bandwidth;
  // Mean of all distances (missing neighbours, infinite, are left out).
  double total = 0;
  int64_t count = 0;
  for (float d : knn.distances)
    if (std::isfinite(d)) total += d, ++count;
  const double mean_all = count > 0 ? total / static_cast<double>(count) : 0.0;
  std::vector<float> nonzero;
  for (int64_t i = 0; i < n; ++i) {
    const float* di = knn.distances.data() + static_cast<size_t>(i * k);
    nonzero.clear();
    double row_sum = 0;
    int64_t row_count = 0;
    for (int64_t j = 0; j < k; ++j) {
      if (!std::isfinite(di[j])) continue;
      row_sum += di[j];
      ++row_count;
      if (di[j] > 0.0f) nonzero.push_back(di[j]);
    }
    float rho = 0.0f;
    if (static_cast<double>(nonzero.size()) >= opt.local_connectivity) {
      const int64_t index = static_cast<int64_t>(std::floor(opt.local_connectivity));
      const double interpolation = opt.local_connectivity - static_cast<double>(index);
      if (index > 0) {
        double r = nonzero[index - 1];
        if (interpolation > conn::kSmoothKTolerance)
          r += interpolation * (static_cast<double>(nonzero[index]) - nonzero[index - 1]);
        rho = static_cast<float>(r);
      } else {
        rho = static_cast<float>(interpolation * nonzero[0]);
      }
    } else if (!nonzero.empty()) {
      rho = *std::max_element(nonzero.begin(), nonzero.end());
    }
    double lo = 0.0, hi = std::numeric_limits<double>::infinity(), mid = 1.0;
    for (int it = 0; it < opt.n_iter; ++it) {
      double psum = 0.0;
      for (int64_t j = 1; j < k; ++j) {
        if (!std::isfinite(di[j])) continue;
        const float d = di[j] - rho;  // float32, as umap's arrays
        psum += d > 0 ? std::exp(-(static_cast<double>(d) / mid)) : 1.0;
      }
      if (std::fabs(psum - target) < conn::kSmoothKTolerance) break;
      if (psum > target) {
        hi = mid;
        mid = (lo + hi) / 2.0;
      } else {
        lo = mid;
        mid = std::isinf(hi) ? mid * 2 : (lo + hi) / 2.0;
      }
    }
    double sigma = mid;
    const double floor_mean = rho > 0.0f ? (row_count > 0 ? row_sum / static_cast<double>(row_count) : 0.0) : mean_all;
    if (sigma < conn::kMinKDistScale * floor_mean) sigma = conn::kMinKDistScale * floor_mean;
    out.sigma[i] = static_cast<float>(sigma);
    out.rho[i] = rho;
  }
  return out;
}

CsrF fuzzy_simplicial_set_reference(const Knn& knn, const ConnectivitiesOptions& opt) {
  const int64_t n = knn.n, k = knn.k;
  const SmoothKnn s = smooth_knn_dist_reference(knn, opt);
  // Directed memberships A (row i: its k neighbours), float32 as umap computes them; a neighbour
  // listed twice: the sum of its memberships, in kNN order.
  std::vector<std::vector<std::pair<int32_t, float>>> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    auto& r = rows[i];
    r.reserve(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) {
      const int32_t c = knn.index(i, j);
      if (c < 0 || c == i) continue;
      const float d = knn.distance(i, j);
      float v;
      if (d - s.rho[i] <= 0.0f || s.sigma[i] == 0.0f)
        v = 1.0f;
      else
        v = std::exp(-((d - s.rho[i]) / s.sigma[i]));
      r.emplace_back(c, v);
    }
    std::stable_sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    size_t w = 0;
    for (size_t q = 0; q < r.size(); ++q) {
      if (w > 0 && r[w - 1].first == r[q].first)
        r[w - 1].second += r[q].second;
      else
        r[w++] = r[q];
    }
    r.resize(w);
  }
  const CsrF a = build_csr(n, rows);
  const CsrF at = transpose(a);
  // Fuzzy union: ratio (A + A^T - A∘A^T) + (1 - ratio) A∘A^T, row by row (sorted merge).
  const float ratio = static_cast<float>(opt.set_op_mix_ratio);
  std::vector<std::vector<std::pair<int32_t, float>>> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t p = a.indptr[i], q = at.indptr[i];
    const int64_t pe = a.indptr[i + 1], qe = at.indptr[i + 1];
    auto& r = out[i];
    while (p < pe || q < qe) {
      float x = 0.0f, y = 0.0f;
      int32_t c;
      if (q >= qe || (p < pe && a.indices[p] < at.indices[q])) {
        c = a.indices[p];
        x = a.data[p++];
      } else if (p >= pe || at.indices[q] < a.indices[p]) {
        c = at.indices[q];
        y = at.data[q++];
      } else {
        c = a.indices[p];
        x = a.data[p++];
        y = at.data[q++];
      }
      const float prod = x * y;
      r.emplace_back(c, ratio * ((x + y) - prod) + (1.0f - ratio) * prod);
    }
  }
  return build_csr(n, out);
}

Knn knn_from_distance_matrix(const CsrF& distances, int64_t k, const std::string& where) {
  const int64_t n = distances.n_rows;
  if (distances.n_cols != n)
    fail_input(where, "the distances matrix is ", n, " x ", distances.n_cols, "; it must be square (cells x cells)");
  if (k < 1) fail_input(where, "n_neighbors = ", k, " must be at least 1");
  Knn out;
  out.n = n;
  out.k = k;
  out.indices.resize(static_cast<size_t>(n * k));
  out.distances.resize(static_cast<size_t>(n * k));
  std::vector<std::pair<float, int32_t>> r;
  for (int64_t i = 0; i < n; ++i) {
    if (distances.row_nnz(i) != k - 1)
      fail_input(where, "row ", i, " of the distances matrix holds ", distances.row_nnz(i), " neighbours, expected ",
                 k - 1, " (n_neighbors - 1); recompute the neighbours");
    r.clear();
    for (int64_t p = distances.indptr[i]; p < distances.indptr[i + 1]; ++p)
      r.emplace_back(distances.data[p], distances.indices[p]);
    std::sort(r.begin(), r.end());
    out.indices[static_cast<size_t>(i * k)] = static_cast<int32_t>(i);
    out.distances[static_cast<size_t>(i * k)] = 0.0f;
    for (int64_t j = 0; j < k - 1; ++j) {
      out.indices[static_cast<size_t>(i * k + j + 1)] = r[j].second;
      out.distances[static_cast<size_t>(i * k + j + 1)] = r[j].first;
    }
  }
  return out;
}

}  // namespace scurry
