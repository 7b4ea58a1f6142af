// scurry: embedding_density (see embedding_density.hpp).
#include "tl/embedding_density.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/parallel.hpp"
#include "tl/groups.hpp"

namespace scurry {

std::vector<double> kde_density(const std::vector<double>& x, const std::vector<double>& y, int threads) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<double> z(static_cast<size_t>(n), 0.0);
  if (n == 0) return z;
  if (n < 3) fail_input("embedding_density", "a group of ", n, " cells is too small for a kernel density (needs >= 3)");
  double mx = 0, my = 0;
  for (int64_t i = 0; i < n; ++i) mx += x[i], my += y[i];
  mx /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double sxx = 0, syy = 0, sxy = 0;
  for (int64_t i = 0; i < n; ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  const double f2 = std::pow(static_cast<double>(n), -2.0 / 6.0);  // Scott's factor squared
  const double cxx = sxx / static_cast<double>(n - 1) * f2, cyy = syy / static_cast<double>(n - 1) * f2,
               cxy = sxy / static_cast<double>(n - 1) * f2;
  const double det = cxx * cyy - cxy * cxy;
  if (!(det > 0)) fail_input("embedding_density", "the embedding's points are collinear (singular covariance)");
  const double ixx = cyy / det, iyy = cxx / det, ixy = -cxy / det;
  constexpr int64_t kBlock = 512;
  parallel_for(threads, (n + kBlock - 1) / kBlock, [&](int64_t b) {
    for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
      double s = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double dx = x[i] - x[j], dy = y[i] - y[j];
        s += std::exp(-0.5 * (ixx * dx * dx + 2 * ixy * dx * dy + iyy * dy * dy));
      }
      z[i] = s;  // the normalising constant cancels in the scaling
    }
  });
  const auto [lo, hi] = std::minmax_element(z.begin(), z.end());
  const double a = *lo, r = *hi - *lo;
  for (auto& v : z) v = r > 0 ? (v - a) / r : 0.0;
  return z;
}

std::vector<double> embedding_density(const Context& ctx, Dataset& d, const EmbeddingDensityOptions& opt) {
  std::string basis = opt.basis == "fa" ? "draw_graph_fa" : opt.basis;
  const std::string key = "X_" + basis;
  auto it = d.obsm.find(key);
  if (it == d.obsm.end()) fail_input("embedding_density", "obsm['", key, "'] is missing; compute the ", basis, " embedding first");
  std::vector<int64_t> comp;
  {
    std::stringstream ss(opt.components);
    std::string t;
    while (std::getline(ss, t, ',')) {
      try {
        comp.push_back(std::stoll(t) - 1);
      } catch (...) {
        fail_input("embedding_density", "components '", opt.components, "' must be two 1-based integers like 1,2");
      }
    }
  }
  const DenseD e = to_dense_d(it->second);
  if (comp.size() != 2) fail_input("embedding_density", "components '", opt.components, "': give exactly two");
  for (int64_t c : comp)
    if (c < 0 || c >= e.n_cols) fail_input("embedding_density", "component ", c + 1, " is out of range: obsm['", key, "'] has ", e.n_cols, " columns");
  const int64_t n = e.n_rows;
  std::vector<double> dens(static_cast<size_t>(n), 0.0);
  const std::string cov = opt.key_added.empty() ? (opt.groupby.empty() ? basis + "_density" : basis + "_density_" + opt.groupby)
                                                : opt.key_added;
  if (opt.groupby.empty()) {
    std::vector<double> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[i] = e(i, comp[0]), y[i] = e(i, comp[1]);
    dens = kde_density(x, y, ctx.threads());
  } else {
    const CellGroups g = cell_groups(d.obs, opt.groupby, "embedding_density");
    for (int32_t c = 0; c < static_cast<int32_t>(g.categories.size()); ++c) {
      std::vector<int64_t> rows;
      for (int64_t i = 0; i < n; ++i)
        if (g.codes[i] == c) rows.push_back(i);
      std::vector<double> x, y;
      for (int64_t i : rows) x.push_back(e(i, comp[0])), y.push_back(e(i, comp[1]));
      const std::vector<double> z = kde_density(x, y, ctx.threads());
      for (size_t t = 0; t < rows.size(); ++t) dens[rows[t]] = z[t];
    }
  }
  d.obs.set(cov, Column::numeric(dens));
  Dict params;
  if (!opt.groupby.empty()) params["covariate"] = Value(opt.groupby);  // scanpy: None (not written) without
  NumArray cs;
  cs.shape = {2};
  for (int64_t c : comp) cs.data.push_back(static_cast<double>(basis == "diffmap" ? c : c + 1));
  cs.dtype = DType::i64;
  params["components"] = Value(cs);
  d.uns[cov + "_params"] = Value(std::move(params));
  log::info(detail::concat("embedding_density: obs['", cov, "'] from ", key));
  return dens;
}

}  // namespace scurry
