// scurry: sc.get.aggregate (see aggregate.hpp).
#include "get/aggregate.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/parallel.hpp"
#include "tl/rank_genes_groups_gpu.hpp"

namespace scurry {

namespace {

// A column's categories (pandas' Categorical(...).remove_unused_categories()) and codes (-1: missing).
struct Cats {
  std::vector<std::string> categories;
  std::vector<int32_t> codes;
  bool ordered = false;
};

Cats categories_of(const Table& obs, const std::string& key) {
  if (!obs.has(key)) throw InputError("aggregate: by column '" + key + "' is not in obs");
  const Column& c = obs.at(key);
  Cats out;
  std::vector<std::string> cats;
  std::vector<int32_t> codes;
  if (const auto* cc = std::get_if<CategoricalColumn>(&c.c)) {
    cats = cc->categories;
    codes = cc->codes;
    out.ordered = cc->ordered;
  } else if (const auto* s = std::get_if<StringColumn>(&c.c)) {
    std::set<std::string> u(s->values.begin(), s->values.end());
    cats.assign(u.begin(), u.end());
    for (const auto& v : s->values)
      codes.push_back(static_cast<int32_t>(std::lower_bound(cats.begin(), cats.end(), v) - cats.begin()));
  } else if (const auto* b = std::get_if<BoolColumn>(&c.c)) {
    cats = {"False", "True"};
    for (uint8_t v : b->values) codes.push_back(v ? 1 : 0);
  } else {
    throw InputError("aggregate: by column '" + key + "' is numeric; give a categorical, string or bool column");
  }
  // remove unused categories, keeping their order
  std::vector<uint8_t> used(cats.size(), 0);
  for (int32_t k : codes)
    if (k >= 0) used[k] = 1;
  std::vector<int32_t> remap(cats.size(), -1);
  for (size_t k = 0; k < cats.size(); ++k)
    if (used[k]) {
      remap[k] = static_cast<int32_t>(out.categories.size());
      out.categories.push_back(cats[k]);
    }
  out.codes.resize(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) out.codes[i] = codes[i] < 0 ? -1 : remap[codes[i]];
  return out;
}

}  // namespace

Dataset aggregate(const Dataset& d, const AggregateOptions& o, const Context& ctx) {
  return aggregate(d, o, ctx, {});
}

Dataset aggregate(const Dataset& d, const AggregateOptions& o, const Context& ctx, const std::vector<Context*>& gpus) {
  if (o.by.empty()) throw InputError("aggregate: give at least one obs column to group by");
  if (o.func.empty()) throw InputError("aggregate: give at least one function (sum, mean, count_nonzero, var)");
  for (const auto& f : o.func)
    if (f != "sum" && f != "mean" && f != "count_nonzero" && f != "var")
      throw InputError("aggregate: function '" + f + "' is not one of sum, mean, count_nonzero, var");
  const Matrix* X = &d.X;
  if (!o.layer.empty()) {
    auto it = d.layers.find(o.layer);
    if (it == d.layers.end()) throw InputError("aggregate: layer '" + o.layer + "' is not in layers");
    X = &it->second;
  }
  if (X->empty()) throw InputError("aggregate: the dataset has no X");
  const int64_t N = d.n_obs(), G = X->n_cols();
  std::vector<uint8_t> keep(static_cast<size_t>(N), 1);
  if (!o.mask.empty()) {
    if (!d.obs.has(o.mask)) throw InputError("aggregate: mask column '" + o.mask + "' is not in obs");
    const auto* b = std::get_if<BoolColumn>(&d.obs.at(o.mask).c);
    if (!b) throw InputError("aggregate: mask column '" + o.mask + "' is not a boolean obs column");
    keep = b->values;
  }
  // Combined groups: mixed-radix codes over the by columns (the first varies slowest).
  std::vector<Cats> cats;
  for (const auto& k : o.by) cats.push_back(categories_of(d.obs, k));
  int64_t n_comb = 1;
  for (const auto& c : cats) n_comb *= static_cast<int64_t>(c.categories.size());
  std::vector<int64_t> comb(static_cast<size_t>(N), -1);
  std::vector<uint8_t> seen(static_cast<size_t>(n_comb), 0);
  for (int64_t i = 0; i < N; ++i) {
    if (!keep[i]) continue;
    int64_t code = 0;
    bool missing = false;
    for (const auto& c : cats) {
      missing = missing || c.codes[i] < 0;
      code = code * static_cast<int64_t>(c.categories.size()) + c.codes[i];
    }
    if (missing) continue;
    comb[i] = code;
    seen[code] = 1;
  }
  // observed combinations, in code order (remove_unused_categories)
  std::vector<int64_t> group_of_comb(static_cast<size_t>(n_comb), -1), comb_of_group;
  for (int64_t k = 0; k < n_comb; ++k)
    if (seen[k]) {
      group_of_comb[k] = static_cast<int64_t>(comb_of_group.size());
      comb_of_group.push_back(k);
    }
  const int64_t K = static_cast<int64_t>(comb_of_group.size());
  if (K == 0) throw InputError("aggregate: no cell is left to aggregate (mask or missing categories)");
  std::vector<int32_t> grp(static_cast<size_t>(N), -1);
  std::vector<int64_t> n_in(static_cast<size_t>(K), 0);
  for (int64_t i = 0; i < N; ++i)
    if (comb[i] >= 0) {
      grp[i] = static_cast<int32_t>(group_of_comb[comb[i]]);
      ++n_in[grp[i]];
    }

  // One pass: [sum | sum_sq | nnz][group][gene] float64 partials per row block.
  const CsrF copy = X->is_sparse() && std::holds_alternative<CsrF>(X->m) ? CsrF() : to_csr_f(*X);
  const CsrF& x = std::holds_alternative<CsrF>(X->m) ? std::get<CsrF>(X->m) : copy;
  const size_t plane = static_cast<size_t>(K * G);
  const int64_t nb = std::min<int64_t>(plane * 3 * 8 > (size_t{64} << 20) ? 4 : 16, std::max<int64_t>(1, N));
  std::vector<double> acc;
  // On a GPU context (float32 data): the per-group sums, sums of squares and nonzero counts of
  // rank_genes_groups' device statistics (rows gathered in group order, each group one segment of
  // entries reduced into exact fixed-point sums: rank_genes_groups_gpu.hpp), shared between `gpus`
  // by genes. A matrix holding NaN or inf is summed here instead (float64, as the CPU path).
  const bool f64_data = X->dtype == DType::f64;
  if (ctx.backend() == Backend::cuda && ctx.cuda() && !f64_data) {
    RankGenesGroupsGpu dev = rank_genes_groups_gpu(gpu_devices(ctx, gpus), x, grp, K, false, -1, {});
    if (!dev.has_nan) {
      acc.assign(3 * plane, 0.0);
      for (size_t i = 0; i < plane; ++i) {  // (buckets 0..K-1 are the groups; K, the cells left out, unused)
        acc[i] = dev.st.sum[i];
        acc[plane + i] = dev.st.sum_sq[i];
        acc[2 * plane + i] = static_cast<double>(dev.st.nnz[i]);
      }
    } else {
      log::warn("aggregate: the matrix holds NaN or infinite values; summing on the CPU");
    }
  }
  if (acc.empty()) reduce_blocks(ctx.threads(), nb, 3 * plane, acc, [&](int64_t b, double* part) {
    const int64_t r0 = N * b / nb, r1 = N * (b + 1) / nb;
    for (int64_t r = r0; r < r1; ++r) {
      if (grp[r] < 0) continue;
      double* ps = part + static_cast<size_t>(grp[r]) * G;
      double* pq = ps + plane;
      double* pn = pq + plane;
      for (int64_t q = x.indptr[r]; q < x.indptr[r + 1]; ++q) {
        const double v = x.data[q];
        const int32_t j = x.indices[q];
        ps[j] += v;
        pq[j] += v * v;
        if (v != 0) pn[j] += 1;
      }
    }
  });

  Dataset out;
  out.var = d.var;
  out.varm = {};
  // obs: index "a_b", one categorical column per by column (its observed categories)
  std::vector<std::vector<int32_t>> col_codes(cats.size());
  for (int64_t g = 0; g < K; ++g) {
    int64_t rest = comb_of_group[g];
    std::vector<int32_t> parts(cats.size());
    for (size_t c = cats.size(); c-- > 0;) {
      const int64_t n = static_cast<int64_t>(cats[c].categories.size());
      parts[c] = static_cast<int32_t>(rest % n);
      rest /= n;
    }
    std::string name;
    for (size_t c = 0; c < cats.size(); ++c) {
      name += (c ? "_" : "") + cats[c].categories[parts[c]];
      col_codes[c].push_back(parts[c]);
    }
    out.obs.index.push_back(name);
  }
  for (size_t c = 0; c < cats.size(); ++c) {
    CategoricalColumn cc;
    cc.categories = cats[c].categories;
    cc.codes = col_codes[c];
    cc.ordered = cats[c].ordered;
    out.obs.set(o.by[c], Column(cc));
  }
  const bool f64 = X->dtype == DType::f64;
  for (const auto& f : o.func) {
    DenseD m(K, G);
    for (int64_t g = 0; g < K; ++g)
      for (int64_t j = 0; j < G; ++j) {
        const size_t at = static_cast<size_t>(g * G + j);
        const double n = static_cast<double>(n_in[g]);
        const double s = acc[at], q = acc[plane + at], nz = acc[2 * plane + at];
        double v = 0;
        if (f == "sum") v = f64 ? s : static_cast<double>(static_cast<float>(s));
        else if (f == "count_nonzero") v = nz;
        else if (f == "mean") v = s / n;
        else {
          // scanpy 1.10: mean of squares minus squared mean, set to 0 where that difference is lost
          // to the data type's precision (2 << 20 for float32 data, 2 << 42 for float64), then
          // scaled by n / (n - dof).
          const double mean = s / n, sq_mean = mean * mean;
          v = q / n - sq_mean;
          const double precision = f64 ? static_cast<double>(int64_t{2} << 42) : static_cast<double>(2 << 20);
          if (precision * v < sq_mean) v = 0;
          if (o.dof != 0) v *= n / (n - o.dof);
        }
        m(g, j) = v;
      }
    const DType dt = f == "count_nonzero" ? DType::i64 : f == "sum" ? (f64 ? DType::f64 : DType::f32) : DType::f64;
    out.layers[f] = Matrix(std::move(m), dt);
  }
  return out;
}

}  // namespace scurry
