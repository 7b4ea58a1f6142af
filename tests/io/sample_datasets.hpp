// Test helpers shared by the h5ad and zarr tests: exact comparison of every slot of two Datasets,
// and seeded random Datasets holding every slot type (for round trips). Included by one test
// executable each (everything is in an anonymous namespace).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dataset.hpp"

namespace scurry {
namespace {

// ---- comparison helpers ------------------------------------------------------------------------

void expect_matrix_eq(const Matrix& a, const Matrix& b, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.m.index(), b.m.index()) << a.describe() << " vs " << b.describe();
  EXPECT_EQ(a.dtype, b.dtype);
  ASSERT_EQ(a.n_rows(), b.n_rows());
  ASSERT_EQ(a.n_cols(), b.n_cols());
  std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::monostate>) {
        } else {
          const auto& y = std::get<X>(b.m);
          if constexpr (std::is_same_v<X, CsrF> || std::is_same_v<X, CsrD>) {
            EXPECT_EQ(x.indptr, y.indptr);
            EXPECT_EQ(x.indices, y.indices);
          }
          EXPECT_EQ(x.data, y.data);
        }
      },
      a.m);
}

void expect_column_eq(const Column& a, const Column& b, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.c.index(), b.c.index()) << a.kind() << " vs " << b.kind();
  if (auto* x = std::get_if<NumericColumn>(&a.c)) {
    const auto& y = std::get<NumericColumn>(b.c);
    EXPECT_EQ(x->dtype, y.dtype);
    ASSERT_EQ(x->values.size(), y.values.size());
    for (size_t i = 0; i < x->values.size(); ++i)
      if (!(std::isnan(x->values[i]) && std::isnan(y.values[i]))) {
        ASSERT_EQ(x->values[i], y.values[i]) << "row " << i;
      }
  } else if (auto* x = std::get_if<BoolColumn>(&a.c)) {
    EXPECT_EQ(x->values, std::get<BoolColumn>(b.c).values);
  } else if (auto* x = std::get_if<StringColumn>(&a.c)) {
    EXPECT_EQ(x->values, std::get<StringColumn>(b.c).values);
  } else {
    const auto& p = std::get<CategoricalColumn>(a.c);
    const auto& q = std::get<CategoricalColumn>(b.c);
    EXPECT_EQ(p.categories, q.categories);
    EXPECT_EQ(p.codes, q.codes);
    EXPECT_EQ(p.ordered, q.ordered);
  }
}

void expect_table_eq(const Table& a, const Table& b, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.index_name, b.index_name);
  ASSERT_EQ(a.names(), b.names());
  for (const auto& n : a.names()) expect_column_eq(a.at(n), b.at(n), what + "/" + n);
}

void expect_value_eq(const Value& a, const Value& b, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.v.index(), b.v.index());
  if (a.is_dict()) {
    const auto& x = a.dict();
    const auto& y = b.dict();
    ASSERT_EQ(x.size(), y.size());
    for (const auto& [k, v] : x) {
      ASSERT_TRUE(y.count(k)) << k;
      expect_value_eq(v, y.at(k), what + "/" + k);
    }
  } else if (auto* s = std::get_if<NumArray>(&a.v)) {
    const auto& t = std::get<NumArray>(b.v);
    EXPECT_EQ(s->shape, t.shape);
    EXPECT_EQ(s->dtype, t.dtype);
    EXPECT_EQ(s->data, t.data);
  } else if (auto* s = std::get_if<std::string>(&a.v)) {
    EXPECT_EQ(*s, std::get<std::string>(b.v));
  } else if (auto* s = std::get_if<std::vector<std::string>>(&a.v)) {
    EXPECT_EQ(*s, std::get<std::vector<std::string>>(b.v));
  } else if (auto* x = std::get_if<double>(&a.v)) {
    EXPECT_EQ(*x, std::get<double>(b.v));
  } else if (auto* x = std::get_if<int64_t>(&a.v)) {
    EXPECT_EQ(*x, std::get<int64_t>(b.v));
  } else if (auto* x = std::get_if<bool>(&a.v)) {
    EXPECT_EQ(*x, std::get<bool>(b.v));
  } else if (auto* x = std::get_if<RecArray>(&a.v)) {
    const auto& y = std::get<RecArray>(b.v);
    ASSERT_EQ(x->n, y.n);
    ASSERT_EQ(x->fields.size(), y.fields.size());
    for (size_t f = 0; f < x->fields.size(); ++f) {
      EXPECT_EQ(x->fields[f].name, y.fields[f].name);
      EXPECT_EQ(x->fields[f].is_string, y.fields[f].is_string);
      EXPECT_EQ(x->fields[f].str, y.fields[f].str);
      EXPECT_EQ(x->fields[f].num, y.fields[f].num);
    }
  } else if (auto* x = std::get_if<Table>(&a.v)) {
    expect_table_eq(*x, std::get<Table>(b.v), what);
  }
}

void expect_dataset_eq(const Dataset& a, const Dataset& b) {
  expect_matrix_eq(a.X, b.X, "X");
  expect_table_eq(a.obs, b.obs, "obs");
  expect_table_eq(a.var, b.var, "var");
  auto maps = [](const std::map<std::string, Matrix>& x, const std::map<std::string, Matrix>& y, const std::string& w) {
    ASSERT_EQ(x.size(), y.size()) << w;
    for (const auto& [k, m] : x) {
      ASSERT_TRUE(y.count(k)) << w << "/" << k;
      expect_matrix_eq(m, y.at(k), w + "/" + k);
    }
  };
  maps(a.layers, b.layers, "layers");
  maps(a.obsm, b.obsm, "obsm");
  maps(a.varm, b.varm, "varm");
  maps(a.obsp, b.obsp, "obsp");
  maps(a.varp, b.varp, "varp");
  expect_value_eq(Value(a.uns), Value(b.uns), "uns");
  ASSERT_EQ(static_cast<bool>(a.raw), static_cast<bool>(b.raw));
  if (a.raw) {
    expect_matrix_eq(a.raw->X, b.raw->X, "raw/X");
    expect_table_eq(a.raw->var, b.raw->var, "raw/var");
    maps(a.raw->varm, b.raw->varm, "raw/varm");
  }
}

// ---- random content ----------------------------------------------------------------------------

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t s) : g(s) {}
  double unif() { return std::uniform_real_distribution<double>(0, 1)(g); }
  double normal() { return std::normal_distribution<double>(0, 1)(g); }
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); }
  std::string word() {
    // Non-ASCII too: anndata strings are UTF-8.
    static const std::vector<std::string> parts = {"a", "B", "gene", "-", "_", "7", "é", "ü", "Ж", "x1"};
    std::string s;
    const int n = static_cast<int>(integer(1, 5));
    for (int i = 0; i < n; ++i) s += parts[static_cast<size_t>(integer(0, static_cast<int64_t>(parts.size()) - 1))];
    return s;
  }
};

template <class T>
Csr<T> random_csr(int64_t r, int64_t c, double density, Rng& rng, bool integers) {
  Csr<T> m = Csr<T>::zeros(r, c);
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < c; ++j)
      if (rng.unif() < density) {
        m.indices.push_back(static_cast<int32_t>(j));
        m.data.push_back(integers ? static_cast<T>(rng.integer(1, 50)) : static_cast<T>(rng.normal()));
      }
    m.indptr[i + 1] = m.nnz();
  }
  return m;
}

// Sparse with at most `per_row` entries a row (fast for huge, very sparse shapes).
template <class T>
Csr<T> sparse_few(int64_t r, int64_t c, int per_row, Rng& rng) {
  Csr<T> m = Csr<T>::zeros(r, c);
  for (int64_t i = 0; i < r; ++i) {
    std::vector<int32_t> cols;
    const int64_t k = rng.integer(0, per_row);
    for (int64_t t = 0; t < k; ++t) cols.push_back(static_cast<int32_t>(rng.integer(0, c - 1)));
    std::sort(cols.begin(), cols.end());
    cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
    for (int32_t j : cols) {
      m.indices.push_back(j);
      m.data.push_back(static_cast<T>(rng.normal()));
    }
    m.indptr[i + 1] = m.nnz();
  }
  return m;
}

template <class T>
Dense<T> random_dense(int64_t r, int64_t c, Rng& rng) {
  Dense<T> m(r, c);
  for (auto& v : m.data) v = static_cast<T>(rng.normal());
  return m;
}

std::vector<std::string> unique_names(int64_t n, const std::string& prefix, Rng& rng) {
  std::vector<std::string> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = prefix + rng.word() + "_" + std::to_string(i);
  return v;
}

void add_columns(Table& t, Rng& rng) {
  const int64_t n = t.n_rows();
  std::vector<double> ints(n), f32(n), f64(n);
  std::vector<uint8_t> b(n);
  std::vector<std::string> s(n);
  CategoricalColumn cat, ord;
  cat.categories = {"T cell", "B cell", "NK", "Mono é"};
  ord.categories = {"low", "mid", "high"};
  ord.ordered = true;
  for (int64_t i = 0; i < n; ++i) {
    ints[i] = static_cast<double>(rng.integer(-1000000, 1000000));
    f32[i] = static_cast<double>(static_cast<float>(rng.normal()));
    f64[i] = rng.normal() * 1e3;
    b[i] = rng.unif() < 0.3;
    s[i] = rng.word();
    cat.codes.push_back(static_cast<int32_t>(rng.integer(-1, 3)));  // -1 = missing
    ord.codes.push_back(static_cast<int32_t>(rng.integer(0, 2)));
  }
  t.set("n_int", Column::numeric(ints, DType::i64));
  t.set("n_i32", Column::numeric(ints, DType::i32));
  t.set("score_f32", Column::numeric(f32, DType::f32));
  t.set("score_f64", Column::numeric(f64, DType::f64));
  t.set("flag", Column::boolean(b));
  t.set("label", Column::strings(s));
  t.set("cluster", Column(cat));
  t.set("level", Column(ord));
}

Dict random_uns(Rng& rng) {
  NumArray a1{{5}, {}, DType::f32};
  for (int i = 0; i < 5; ++i) a1.data.push_back(static_cast<float>(rng.normal()));
  NumArray a2{{2, 3}, {}, DType::i64};
  for (int i = 0; i < 6; ++i) a2.data.push_back(static_cast<double>(rng.integer(-100, 100)));
  NumArray a3{{4}, {1, 0, 0, 1}, DType::boolean};
  Dict inner;
  inner["method"] = Value("umap");
  inner["n_neighbors"] = Value(static_cast<int64_t>(rng.integer(2, 100)));
  inner["resolution"] = Value(rng.unif());
  inner["zero_center"] = Value(true);
  inner["off"] = Value(false);
  inner["deeper"] = Value(Dict{{"x", Value(rng.normal())}, {"names", Value(std::vector<std::string>{"a", "ü", ""})}});
  Dict u;
  u["params"] = Value(inner);
  u["variance"] = Value(a1);
  u["grid"] = Value(a2);
  u["mask"] = Value(a3);
  u["title"] = Value(rng.word());
  u["colors"] = Value(std::vector<std::string>{"#1f77b4", "#ff7f0e", rng.word()});
  u["empty"] = Value(Dict{});
  return u;
}

Dataset random_dataset(uint64_t seed, int x_kind) {
  Rng rng(seed);
  const int64_t n = rng.integer(30, 80), g = rng.integer(20, 60);
  Dataset d;
  d.obs.index = unique_names(n, "cell", rng);
  d.var.index = unique_names(g, "gene", rng);
  switch (x_kind) {
    case 0: d.X = Matrix(random_csr<float>(n, g, 0.2, rng, false), DType::f32); break;
    case 1: d.X = Matrix(random_csr<double>(n, g, 0.2, rng, false), DType::f64); break;
    case 2: d.X = Matrix(random_csr<float>(n, g, 0.2, rng, true), DType::i32); break;
    case 3: d.X = Matrix(random_dense<float>(n, g, rng), DType::f32); break;
    default: d.X = Matrix(random_dense<double>(n, g, rng), DType::f64); break;
  }
  add_columns(d.obs, rng);
  add_columns(d.var, rng);
  d.var.index_name = "gene_symbols";
  d.layers["counts"] = Matrix(random_csr<float>(n, g, 0.3, rng, true), DType::i64);
  d.layers["dense"] = Matrix(random_dense<float>(n, g, rng), DType::f32);
  d.layers["f64"] = Matrix(random_csr<double>(n, g, 0.1, rng, false), DType::f64);
  d.obsm["X_pca"] = Matrix(random_dense<float>(n, 7, rng), DType::f32);
  d.obsm["X_sparse"] = Matrix(random_csr<float>(n, 9, 0.3, rng, false), DType::f32);
  d.varm["PCs"] = Matrix(random_dense<double>(g, 7, rng), DType::f64);
  d.varm["loadings_sp"] = Matrix(random_csr<double>(g, 4, 0.5, rng, false), DType::f64);
  d.obsp["connectivities"] = Matrix(random_csr<float>(n, n, 0.1, rng, false), DType::f32);
  d.obsp["distances"] = Matrix(random_csr<double>(n, n, 0.1, rng, false), DType::f64);
  d.varp["corr"] = Matrix(random_dense<float>(g, g, rng), DType::f32);
  d.uns = random_uns(rng);
  auto raw = std::make_shared<Dataset>();
  const int64_t g_raw = g + rng.integer(1, 20);
  raw->X = Matrix(random_csr<float>(n, g_raw, 0.25, rng, true), DType::f32);
  raw->var.index = unique_names(g_raw, "rawgene", rng);
  add_columns(raw->var, rng);
  raw->varm["stats"] = Matrix(random_dense<float>(g_raw, 2, rng), DType::f32);
  d.raw = raw;
  return d;
}

// The expected values of a written sample, as JSON, for the Python clients (anndata_client.py,
// zarr_client.py).
[[maybe_unused]] nlohmann::json sidecar(const Dataset& d) {
  using nlohmann::json;
  auto mat = [](const Matrix& m) {
    double sum = 0, sq = 0;
    std::vector<double> row0(static_cast<size_t>(std::min<int64_t>(m.n_cols(), 20)), 0.0);
    std::visit(
        [&](const auto& x) {
          using X = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<X, std::monostate>) {
          } else {
            for (double v : x.data) {
              sum += v;
              sq += v * v;
            }
            if constexpr (std::is_same_v<X, CsrF> || std::is_same_v<X, CsrD>) {
              for (int64_t p = x.indptr[0]; p < x.indptr[1]; ++p)
                if (x.indices[p] < static_cast<int32_t>(row0.size())) row0[x.indices[p]] = x.data[p];
            } else {
              for (size_t c = 0; c < row0.size(); ++c) row0[c] = x.data[c];
            }
          }
        },
        m.m);
    return json{{"shape", {m.n_rows(), m.n_cols()}},
                {"sparse", m.is_sparse()},
                {"nnz", m.is_sparse() ? m.nnz() : -1},
                {"dtype", dtype_name(m.dtype)},
                {"sum", sum},
                {"sumsq", sq},
                {"row0", row0}};
  };
  auto table = [](const Table& t) {
    json j;
    j["index"] = t.index;
    j["columns"] = t.names();
    json cols = json::object();
    for (const auto& name : t.names()) {
      const Column& c = t.at(name);
      json cj;
      if (auto* x = std::get_if<NumericColumn>(&c.c)) {
        cj = {{"kind", "numeric"}, {"dtype", dtype_name(x->dtype)}, {"values", x->values}};
      } else if (auto* x = std::get_if<BoolColumn>(&c.c)) {
        cj = {{"kind", "bool"}, {"values", std::vector<int>(x->values.begin(), x->values.end())}};
      } else if (auto* x = std::get_if<StringColumn>(&c.c)) {
        cj = {{"kind", "string"}, {"values", x->values}};
      } else {
        const auto& y = std::get<CategoricalColumn>(c.c);
        cj = {{"kind", "categorical"}, {"categories", y.categories}, {"codes", y.codes}, {"ordered", y.ordered}};
      }
      cols[name] = cj;
    }
    j["cols"] = cols;
    return j;
  };
  std::function<json(const Value&)> val = [&](const Value& v) -> json {
    return std::visit(
        [&](const auto& x) -> json {
          using X = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<X, std::monostate>) return nullptr;
          else if constexpr (std::is_same_v<X, Dict>) {
            json o = json::object();
            for (const auto& [k, e] : x) o[k] = val(e);
            return json{{"type", "dict"}, {"items", o}};
          } else if constexpr (std::is_same_v<X, std::string>) return json{{"type", "string"}, {"value", x}};
          else if constexpr (std::is_same_v<X, std::vector<std::string>>)
            return json{{"type", "string-array"}, {"value", x}};
          else if constexpr (std::is_same_v<X, double>) return json{{"type", "float"}, {"value", x}};
          else if constexpr (std::is_same_v<X, int64_t>) return json{{"type", "int"}, {"value", x}};
          else if constexpr (std::is_same_v<X, bool>) return json{{"type", "bool"}, {"value", x}};
          else if constexpr (std::is_same_v<X, RecArray>) {
            json f = json::array();
            for (const auto& fl : x.fields)
              f.push_back(fl.is_string ? json{{"name", fl.name}, {"value", fl.str}}
                                       : json{{"name", fl.name}, {"dtype", dtype_name(fl.dtype)}, {"value", fl.num}});
            return json{{"type", "rec-array"}, {"fields", f}};
          } else if constexpr (std::is_same_v<X, Table>) return json{{"type", "dataframe"}, {"value", table(x)}};
          else return json{{"type", "array"}, {"shape", x.shape}, {"dtype", dtype_name(x.dtype)}, {"value", x.data}};
        },
        v.v);
  };
  json j;
  j["X"] = mat(d.X);
  j["obs"] = table(d.obs);
  j["var"] = table(d.var);
  for (const auto* slot : {"layers", "obsm", "varm", "obsp", "varp"}) {
    const auto& m = std::string(slot) == "layers" ? d.layers
                    : std::string(slot) == "obsm" ? d.obsm
                    : std::string(slot) == "varm" ? d.varm
                    : std::string(slot) == "obsp" ? d.obsp
                                                  : d.varp;
    json o = json::object();
    for (const auto& [k, x] : m) o[k] = mat(x);
    j[slot] = o;
  }
  j["uns"] = val(Value(d.uns));
  const auto& raw = *d.raw;
  j["raw"] = {{"X", mat(raw.X)}, {"var", table(raw.var)}, {"varm", {{"stats", mat(raw.varm.at("stats"))}}}};
  return j;
}

}  // namespace
}  // namespace scurry
