// scurry bench --markers: rank_genes_groups on the simulated matrix, log-normalised on the host
// (normalize_total to 1e4, log1p), with --marker-groups groups of cells drawn at random, vs rest.
// Each method: one untimed run, then --repeat timed runs of the whole call (host matrix in; on the
// GPU the upload is part of it: SCURRY_RGG_TIMES=1 prints each phase, the upload among them), the
// median reported against the floor of one read of the matrix's values and indices.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dataset.hpp"
#include "core/error.hpp"
#include "exec/context.hpp"
#include "pp/normalize.hpp"
#include "tl/rank_genes_groups.hpp"

namespace scurry::cli {

void bench_markers(Context& ctx, Dataset& base, const std::vector<std::string>& methods, int n_groups, int repeat,
                   uint64_t seed, const std::string& json) {
  if (n_groups < 2) throw InputError("--marker-groups must be at least 2");
  if (repeat < 1) throw InputError("--repeat must be at least 1");
  CsrF& x = base.X.csr_f();
  auto t0 = std::chrono::steady_clock::now();
  NormalizeTotalOptions no;
  no.target_sum = 1e4;
  normalize_log1p(Context::cpu(ctx.threads()), x, no);
  const double t_norm = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::mt19937_64 rng(seed + 77);
  CategoricalColumn cat;
  for (int c = 0; c < n_groups; ++c) cat.categories.push_back(std::to_string(c));
  cat.codes.resize(static_cast<size_t>(x.n_rows));
  for (auto& c : cat.codes) c = static_cast<int32_t>(rng() % static_cast<uint64_t>(n_groups));
  base.obs.set("group", Column(std::move(cat)));
  base.raw.reset();
  const double bytes = static_cast<double>(x.nnz()) * 8.0;
  const double floor_s = bytes / 4.3e12;
  std::printf("markers: %lld x %lld, nnz %lld, log-normalised on the host in %.2f s; %d groups vs rest; %s\n",
              static_cast<long long>(x.n_rows), static_cast<long long>(x.n_cols), static_cast<long long>(x.nnz()),
              t_norm, n_groups, ctx.describe().c_str());
  nlohmann::json out = nlohmann::json::object();
  for (const std::string& m : methods) {
    RankGenesGroupsOptions o;
    o.groupby = "group";
    o.method = m;
    o.use_raw = false;
    o.n_genes = 100;
    std::vector<double> t;
    for (int rep = 0; rep <= repeat; ++rep) {
      auto a = std::chrono::steady_clock::now();
      const RankGenesGroupsResult r = rank_genes_groups(base, o, ctx);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
      if (rep > 0) t.push_back(s);
      std::printf("  %s run %d: %.4f s%s (top gene of group 0: %s)\n", m.c_str(), rep, s, rep == 0 ? " (warm-up)" : "",
                  r.order.empty() || r.order[0].empty() ? "-" : r.gene_names[r.order[0][0]].c_str());
    }
    std::vector<double> sorted = t;
    std::sort(sorted.begin(), sorted.end());
    const double med = sorted[sorted.size() / 2];
    std::printf("%s: median %.4f s over %d runs (floor, one read of values + indices: %.4f s; %.1fx)\n", m.c_str(), med,
                repeat, floor_s, med / floor_s);
    out[m] = {{"median_s", med}, {"runs_s", t}, {"floor_s", floor_s}};
  }
  if (!json.empty()) {
    std::ofstream f(json);
    f << out.dump(2) << "\n";
  }
}

}  // namespace scurry::cli
