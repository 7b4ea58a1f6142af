// scurry bench --markers: rank_genes_groups on the simulated matrix, log-normalised on the host
// (normalize_total to 1e4, log1p), with --marker-groups groups of cells drawn at random, vs rest.
// Each method: one untimed run, then --repeat timed runs of the whole call (host matrix in; on the
// GPU the upload is part of it: SCURRY_RGG_TIMES=1 prints each phase, the upload among them), the
// median reported against the floor of one read of the matrix's values and indices. "aggregate" and
// "score_genes" among the methods time those (all four functions by the groups; 100 genes).
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
#include "get/aggregate.hpp"
#include "pp/normalize.hpp"
#include "tl/rank_genes_groups.hpp"
#include "tl/rank_genes_groups_gpu.hpp"
#include "tl/score_genes.hpp"

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
    if (m == "aggregate" || m == "score_genes") {  // the other marker tools, on the same matrix and groups
      std::vector<double> t;
      for (int rep = 0; rep <= repeat; ++rep) {
        auto a = std::chrono::steady_clock::now();
        if (m == "aggregate") {
          AggregateOptions ao;
          ao.by = {"group"};
          ao.func = {"sum", "mean", "count_nonzero", "var"};
          (void)aggregate(base, ao, ctx);
        } else {
          ScoreGenesOptions so;  // 100 genes spread over the matrix, scanpy's defaults otherwise
          for (int64_t j = 0; j < 100; ++j) so.gene_list.push_back(base.var.index[j * x.n_cols / 100]);
          so.use_raw = false;
          (void)score_genes(base, so, ctx);
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
        if (rep > 0) t.push_back(s);
        std::printf("  %s run %d: %.4f s%s\n", m.c_str(), rep, s, rep == 0 ? " (warm-up)" : "");
      }
      std::sort(t.begin(), t.end());
      std::printf("%s: median %.4f s over %d runs (host matrix in; floor, one read: %.4f s)\n", m.c_str(),
                  t[t.size() / 2], repeat, floor_s);
      out[m] = {{"median_s", t[t.size() / 2]}, {"floor_s", floor_s}};
      continue;
    }
    RankGenesGroupsOptions o;
    o.groupby = "group";
    o.method = m;
    o.use_raw = false;
    o.n_genes = 100;
    std::vector<double> t, after_upload, kernels;
    for (int rep = 0; rep <= repeat; ++rep) {
      reset_rgg_gpu_times();
      auto a = std::chrono::steady_clock::now();
      const RankGenesGroupsResult r = rank_genes_groups(base, o, ctx);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
      const RggGpuTimes g = rgg_gpu_times();
      if (rep > 0) t.push_back(s), after_upload.push_back(s - g.upload_s), kernels.push_back(g.sums_s + g.pvalues_s);
      std::printf("  %s run %d: %.4f s%s (top gene of group 0: %s)\n", m.c_str(), rep, s, rep == 0 ? " (warm-up)" : "",
                  r.order.empty() || r.order[0].empty() ? "-" : r.gene_names[r.order[0][0]].c_str());
      if (ctx.cuda())
        std::printf("    on the GPU: upload + gather %.4f s (wall); after it %.4f s (wall); CUDA events: per-group "
                    "sums %.4f s (floor %.4f s: %d passes over values + indices), t-test p-values %.4f s\n",
                    g.upload_s, s - g.upload_s, g.sums_s, 3 * floor_s, 3, g.pvalues_s);
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double med = median(t);
    std::printf("%s: median %.4f s over %d runs (floor, one read of values + indices: %.4f s; %.1fx)\n", m.c_str(), med,
                repeat, floor_s, med / floor_s);
    out[m] = {{"median_s", med}, {"runs_s", t}, {"floor_s", floor_s}};
    if (ctx.cuda()) {
      const double mu = median(after_upload), mk = median(kernels);
      std::printf("%s on the GPU: median after the upload %.4f s (%.1fx the floor), of it kernels (CUDA events) "
                  "%.4f s\n", m.c_str(), mu, mu / floor_s, mk);
      out[m]["after_upload_s"] = after_upload;
      out[m]["kernels_s"] = kernels;
      out[m]["median_after_upload_s"] = mu;
    }
  }
  if (!json.empty()) {
    std::ofstream f(json);
    f << out.dump(2) << "\n";
  }
}

}  // namespace scurry::cli
