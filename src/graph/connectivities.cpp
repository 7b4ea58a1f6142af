#include "graph/connectivities.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.hpp"

namespace scurry {
namespace {

constexpr double kSmoothKTolerance = 1e-5;  // umap's SMOOTH_K_TOLERANCE
constexpr double kMinKDistScale = 1e-3;     // umap's MIN_K_DIST_SCALE

// Sorted-column CSR from per-row (column, value) lists; explicit zeros dropped.
CsrF build_csr(int64_t n, std::vector<std::vector<std::pair<int32_t, float>>>& rows) {
  CsrF m = CsrF::zeros(n, n);
  for (int64_t i = 0; i < n; ++i) {
    auto& r = rows[i];
    std::sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
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

SmoothKnn smooth_knn_dist(const Knn& knn, const ConnectivitiesOptions& opt) {
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
        if (interpolation > kSmoothKTolerance)
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
      if (std::fabs(psum - target) < kSmoothKTolerance) break;
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
    if (sigma < kMinKDistScale * floor_mean) sigma = kMinKDistScale * floor_mean;
    out.sigma[i] = static_cast<float>(sigma);
    out.rho[i] = rho;
  }
  return out;
}

CsrF fuzzy_simplicial_set(const Knn& knn, const ConnectivitiesOptions& opt) {
  const int64_t n = knn.n, k = knn.k;
  const SmoothKnn s = smooth_knn_dist(knn, opt);
  // Directed memberships A (row i: its k neighbours), float32 as umap computes them.
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

CsrF knn_distance_matrix(const Knn& knn) {
  const int64_t n = knn.n, k = knn.k;
  std::vector<std::vector<std::pair<int32_t, float>>> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t c = knn.index(i, j);
      if (c < 0 || c == i) continue;
      rows[i].emplace_back(c, knn.distance(i, j));
    }
  return build_csr(n, rows);
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
