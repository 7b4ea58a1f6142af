// zarr stores: round trips of every slot type for zarr v2 and v3 and each codec, the v2/v3 metadata
// against zarr-python 2 / the v3 spec, the lazy row reader (blocks == the whole X, and only the
// chunks covering the rows are read), sharded v3 arrays, malformed stores (missing keys, wrong
// dtype, wrong chunk size, corrupt chunks), atomic writes, and (when SCURRY_WRITE_ZARR_SAMPLE is set)
// the samples for the Python client (test_zarr_client.sh).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.hpp"
#include "io/h5ad.hpp"
#include "io/read.hpp"
#include "io/zarr.hpp"
#include "io/zarr_codecs.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

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

// ---- zarr helpers ------------------------------------------------------------------------------

json load_json(const fs::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  return json::parse(in);
}
void save_json(const fs::path& p, const json& j) {
  std::ofstream out(p);
  out << j.dump(2);
}
std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void spit(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(s.data(), static_cast<std::streamsize>(s.size()));
}

// Expects an InputError whose message holds every one of `parts`.
template <class F>
void expect_input_error(F f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    const std::string m = e.what();
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
  }
}

const char* codec_name(ZarrCodec c) {
  switch (c) {
    case ZarrCodec::blosc_lz4: return "blosc-lz4";
    case ZarrCodec::zstd: return "zstd";
    case ZarrCodec::gzip: return "gzip";
    case ZarrCodec::none: return "none";
  }
  return "?";
}

// Concatenated row blocks of a reader == the whole matrix.
// (check_nnz: false for dense X holding zeros, whose nnz() counts every entry.)
void expect_blocks_equal(RowSource& rr, const CsrF& whole, int64_t block, bool check_nnz = true) {
  ASSERT_EQ(rr.n_rows(), whole.n_rows);
  ASSERT_EQ(rr.n_cols(), whole.n_cols);
  if (check_nnz) {
    EXPECT_EQ(rr.nnz(), whole.nnz());
  }
  EXPECT_EQ(rr.row_pointers(), whole.indptr);
  CsrF cat = CsrF::zeros(0, whole.n_cols);
  for (int64_t b = 0; b < rr.n_rows(); b += block) {
    CsrF part = rr.read_rows(b, std::min(rr.n_rows(), b + block));
    ASSERT_EQ(part.n_rows, std::min(rr.n_rows(), b + block) - b);
    ASSERT_EQ(part.indptr.front(), 0);
    const int64_t base = cat.nnz();
    for (int64_t r = 0; r < part.n_rows; ++r) cat.indptr.push_back(base + part.indptr[r + 1]);
    cat.indices.insert(cat.indices.end(), part.indices.begin(), part.indices.end());
    cat.data.insert(cat.data.end(), part.data.begin(), part.data.end());
    cat.n_rows += part.n_rows;
  }
  EXPECT_EQ(cat.indptr, whole.indptr);
  EXPECT_EQ(cat.indices, whole.indices);
  EXPECT_EQ(cat.data, whole.data);
}

json sidecar(const Dataset& d) {
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

// ---- tests ---------------------------------------------------------------------------------------

TEST(Zarr, RoundTripEverySlotEveryFormatAndCodec) {
  const uint64_t seed = test::fresh_seed();
  test::TempDir tmp;
  int i = 0;
  for (int format : {2, 3})
    for (ZarrCodec codec : {ZarrCodec::blosc_lz4, ZarrCodec::zstd, ZarrCodec::gzip, ZarrCodec::none}) {
      const int kind = i % 5;
      SCOPED_TRACE("zarr v" + std::to_string(format) + " " + codec_name(codec) + " X kind " + std::to_string(kind));
      Dataset d = random_dataset(seed + i, kind);
      ZarrWriteOptions o;
      o.format = format;
      o.codec = codec;
      o.chunk_rows = 3 + i;        // many chunks, partial edge chunks
      o.chunk_elems = 97 + 11 * i;
      o.threads = 1 + i % 3;
      const std::string p = tmp.path("rt" + std::to_string(i) + ".zarr");
      write_zarr(d, p, o);
      EXPECT_TRUE(fs::exists(fs::path(p) / (format == 3 ? "zarr.json" : ".zgroup")));
      Dataset r = read_zarr(p);
      expect_dataset_eq(d, r);
      // Written again from what was read, over the existing store, with the default chunking.
      write_zarr(r, p, {format, codec});
      expect_dataset_eq(d, read_zarr(p));
      // And via read_any's format detection.
      Format f = Format::unknown;
      expect_dataset_eq(d, read_any(p, f));
      EXPECT_EQ(f, Format::zarr);
      ++i;
    }
}

TEST(Zarr, SharedPbmcEqualsH5adAndAWrittenH5adEqualsTheStore) {
  Dataset h = read_h5ad(test::shared_data("golden/pbmc3k_first1000.scanpy.h5ad"));
  test::TempDir tmp;
  write_zarr(h, tmp.path("g.zarr"));
  Dataset z = read_zarr(tmp.path("g.zarr"));
  expect_dataset_eq(h, z);
  write_h5ad(z, tmp.path("g.h5ad"));
  expect_dataset_eq(h, read_h5ad(tmp.path("g.h5ad")));
}

// zarr v2 metadata as zarr-python 2.13 / anndata write it (see the .sh test for the real client).
TEST(Zarr, V2MetadataAsZarrPythonWritesIt) {
  test::TempDir tmp;
  Dataset d = random_dataset(test::fresh_seed(), 0);
  const fs::path p = tmp.dir() / "v2.zarr";
  ZarrWriteOptions o;
  o.chunk_elems = 50;
  o.chunk_rows = 10;
  write_zarr(d, p.string(), o);
  EXPECT_EQ(load_json(p / ".zgroup"), json({{"zarr_format", 2}}));
  EXPECT_EQ(load_json(p / ".zattrs"), json({{"encoding-type", "anndata"}, {"encoding-version", "0.1.0"}}));
  const json xa = load_json(p / "X" / ".zattrs");
  EXPECT_EQ(xa["encoding-type"], "csr_matrix");
  EXPECT_EQ(xa["shape"], json({d.n_obs(), d.n_vars()}));
  const json data = load_json(p / "X" / "data" / ".zarray");
  EXPECT_EQ(data["dtype"], "<f4");
  EXPECT_EQ(data["order"], "C");
  EXPECT_EQ(data["zarr_format"], 2);
  EXPECT_EQ(data["chunks"], json({50}));
  EXPECT_EQ(data["shape"], json({d.X.nnz()}));
  EXPECT_EQ(data["compressor"],
            json({{"id", "blosc"}, {"cname", "lz4"}, {"clevel", 5}, {"shuffle", 1}, {"blocksize", 0}}));
  EXPECT_EQ(data["fill_value"], 0.0);
  const int64_t n_chunks = (d.X.nnz() + 49) / 50;
  for (int64_t c = 0; c < n_chunks; ++c) EXPECT_TRUE(fs::exists(p / "X" / "data" / std::to_string(c))) << c;
  EXPECT_FALSE(fs::exists(p / "X" / "data" / std::to_string(n_chunks)));
  const json idx = load_json(p / "obs" / "_index" / ".zarray");
  EXPECT_EQ(idx["dtype"], "|O");
  EXPECT_EQ(idx["filters"], json::array({{{"id", "vlen-utf8"}}}));
  EXPECT_EQ(load_json(p / "obs" / "_index" / ".zattrs")["encoding-type"], "string-array");
  EXPECT_EQ(load_json(p / "obs" / "flag" / ".zarray")["dtype"], "|b1");
  EXPECT_EQ(load_json(p / "obs" / "n_int" / ".zarray")["dtype"], "<i8");
  EXPECT_EQ(load_json(p / "obs" / "cluster" / "codes" / ".zarray")["dtype"], "|i1");
  EXPECT_EQ(load_json(p / "obs" / "cluster" / ".zattrs")["ordered"], false);
  const json dense = load_json(p / "obsm" / "X_pca" / ".zarray");
  EXPECT_EQ(dense["chunks"], json({10, 7}));
  EXPECT_TRUE(fs::exists(p / "obsm" / "X_pca" / "0.0"));
  EXPECT_TRUE(fs::exists(p / "obsm" / "X_pca" / (std::to_string((d.n_obs() - 1) / 10) + ".0")));
  // Scalars: 0-d, key "0"; strings as numpy fixed-width unicode, as anndata 0.8 writes them.
  const json n = load_json(p / "uns" / "params" / "n_neighbors" / ".zarray");
  EXPECT_EQ(n["shape"], json::array());
  EXPECT_EQ(n["dtype"], "<i8");
  EXPECT_TRUE(fs::exists(p / "uns" / "params" / "n_neighbors" / "0"));
  const json t = load_json(p / "uns" / "params" / "method" / ".zarray");
  EXPECT_EQ(t["dtype"], "<U4");  // "umap"
  EXPECT_EQ(load_json(p / "uns" / "params" / "method" / ".zattrs")["encoding-type"], "string");
}

// zarr v3 metadata checked field by field against the v3 core spec and the vlen-utf8 extension.
TEST(Zarr, V3MetadataFollowsTheSpec) {
  test::TempDir tmp;
  Dataset d = random_dataset(test::fresh_seed(), 3);  // dense float32 X
  const fs::path p = tmp.dir() / "v3.zarr";
  ZarrWriteOptions o;
  o.format = 3;
  o.codec = ZarrCodec::zstd;
  o.chunk_rows = 16;
  write_zarr(d, p.string(), o);
  EXPECT_FALSE(fs::exists(p / ".zgroup"));
  EXPECT_FALSE(fs::exists(p / ".zattrs"));
  const json root = load_json(p / "zarr.json");
  EXPECT_EQ(root["zarr_format"], 3);
  EXPECT_EQ(root["node_type"], "group");
  EXPECT_EQ(root["attributes"], json({{"encoding-type", "anndata"}, {"encoding-version", "0.1.0"}}));
  const json x = load_json(p / "X" / "zarr.json");
  EXPECT_EQ(x["zarr_format"], 3);
  EXPECT_EQ(x["node_type"], "array");
  EXPECT_EQ(x["shape"], json({d.n_obs(), d.n_vars()}));
  EXPECT_EQ(x["data_type"], "float32");
  EXPECT_EQ(x["chunk_grid"], json({{"name", "regular"}, {"configuration", {{"chunk_shape", {16, d.n_vars()}}}}}));
  EXPECT_EQ(x["chunk_key_encoding"], json({{"name", "default"}, {"configuration", {{"separator", "/"}}}}));
  EXPECT_EQ(x["fill_value"], 0.0);
  EXPECT_EQ(x["codecs"], json::array({{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}},
                                      {{"name", "zstd"}, {"configuration", {{"level", 0}, {"checksum", false}}}}}));
  EXPECT_EQ(x["attributes"], json({{"encoding-type", "array"}, {"encoding-version", "0.2.0"}}));
  const int64_t last = (d.n_obs() - 1) / 16;
  EXPECT_TRUE(fs::exists(p / "X" / "c" / "0" / "0"));
  EXPECT_TRUE(fs::exists(p / "X" / "c" / std::to_string(last) / "0"));
  EXPECT_FALSE(fs::exists(p / "X" / "c" / std::to_string(last + 1)));
  const json s = load_json(p / "obs" / "label" / "zarr.json");
  EXPECT_EQ(s["data_type"], "string");
  EXPECT_EQ(s["fill_value"], "");
  EXPECT_EQ(s["codecs"][0]["name"], "vlen-utf8");
  EXPECT_TRUE(fs::exists(p / "obs" / "label" / "c" / "0"));
  EXPECT_EQ(load_json(p / "obs" / "flag" / "zarr.json")["data_type"], "bool");
  EXPECT_EQ(load_json(p / "obs" / "flag" / "zarr.json")["fill_value"], false);
  const json cat = load_json(p / "obs" / "cluster" / "zarr.json");
  EXPECT_EQ(cat["node_type"], "group");
  EXPECT_EQ(cat["attributes"]["encoding-type"], "categorical");
  EXPECT_EQ(load_json(p / "obs" / "cluster" / "codes" / "zarr.json")["data_type"], "int8");
  // A 0-d array: chunk_shape [], its one chunk under the key "c"; scalars uncompressed.
  const json sc = load_json(p / "uns" / "params" / "resolution" / "zarr.json");
  EXPECT_EQ(sc["shape"], json::array());
  EXPECT_EQ(sc["chunk_grid"]["configuration"]["chunk_shape"], json::array());
  EXPECT_EQ(sc["data_type"], "float64");
  EXPECT_EQ(sc["codecs"].size(), 1u);
  EXPECT_EQ(sc["attributes"]["encoding-type"], "numeric-scalar");
  const std::string raw = slurp(p / "uns" / "params" / "resolution" / "c");
  ASSERT_EQ(raw.size(), 8u);
  double v;
  std::memcpy(&v, raw.data(), 8);
  EXPECT_EQ(v, std::get<double>(d.uns.at("params").dict().at("resolution").v));
  const json str = load_json(p / "uns" / "title" / "zarr.json");
  EXPECT_EQ(str["data_type"], "string");
  EXPECT_EQ(str["attributes"]["encoding-type"], "string");
  // vlen-utf8 layout of that scalar: u32 count 1, u32 length, the bytes.
  const std::string title = std::get<std::string>(d.uns.at("title").v);
  const std::string enc = slurp(p / "uns" / "title" / "c");
  ASSERT_EQ(enc.size(), 8 + title.size());
  EXPECT_EQ(enc.substr(8), title);
  EXPECT_EQ(static_cast<uint8_t>(enc[0]), 1);
}

TEST(Zarr, RowReaderBlocksEqualTheWholeX) {
  test::TempDir tmp;
  const uint64_t seed = test::fresh_seed();
  for (int kind = 0; kind < 5; ++kind) {
    for (int format : {2, 3}) {
      SCOPED_TRACE("X kind " + std::to_string(kind) + " v" + std::to_string(format));
      Dataset d = random_dataset(seed + kind, kind);
      const std::string p = tmp.path("rr" + std::to_string(kind) + "_" + std::to_string(format) + ".zarr");
      ZarrWriteOptions o;
      o.format = format;
      o.chunk_elems = 61;
      o.chunk_rows = 5;
      write_zarr(d, p, o);
      for (int threads : {1, 3}) {
        ZarrRowReader rr(p, "X", threads);
        for (int64_t block : {1, 7, 1000}) expect_blocks_equal(rr, to_csr_f(d.X), block);
      }
      ZarrRowReader lr(p, "layers/counts");
      expect_blocks_equal(lr, to_csr_f(d.layers.at("counts")), 6);
    }
  }
  EXPECT_THROW(ZarrRowReader(tmp.path("rr0_2.zarr"), "layers/nope"), InputError);
}

// Only the chunks covering the rows are read: with every other data/indices chunk deleted, a block
// whose nonzeros lie inside the kept chunks still reads exactly.
TEST(Zarr, RowReaderReadsOnlyTheChunksOfItsRows) {
  test::TempDir tmp;
  Rng rng(test::fresh_seed());
  const int64_t n = 200, g = 30;
  Dataset d;
  d.obs.index = unique_names(n, "c", rng);
  d.var.index = unique_names(g, "g", rng);
  d.X = Matrix(random_csr<float>(n, g, 0.2, rng, true), DType::f32);
  const fs::path p = tmp.dir() / "lazy.zarr";
  ZarrWriteOptions o;
  o.chunk_elems = 40;
  write_zarr(d, p.string(), o);
  const CsrF& x = d.X.csr_f();
  // Rows 100..120: the chunks holding their nonzeros.
  const int64_t b = 100, e = 120;
  const int64_t c0 = x.indptr[b] / 40, c1 = (x.indptr[e] - 1) / 40;
  for (const char* arr : {"data", "indices"})
    for (int64_t c = 0; c <= (x.nnz() - 1) / 40; ++c)
      if (c < c0 || c > c1) fs::remove(p / "X" / arr / std::to_string(c));
  ZarrRowReader rr(p.string());
  CsrF part = rr.read_rows(b, e);
  CsrF want = slice_rows(x, b, e);
  EXPECT_EQ(part.indptr, want.indptr);
  EXPECT_EQ(part.indices, want.indices);
  EXPECT_EQ(part.data, want.data);
}

// A CSC X (genes x cells compressed) is read and transposed; the row reader gives the same rows.
TEST(Zarr, CscMatrixIsReadAsCsr) {
  test::TempDir tmp;
  Dataset d = random_dataset(test::fresh_seed(), 0);
  const CsrF want = d.X.csr_f();
  Dataset t = d;
  t.X = Matrix(transpose(want), DType::f32);  // CSR of the transpose == CSC of X
  t.var = d.obs;                              // shapes of the transposed store
  t.obs = d.var;
  t.layers.clear(), t.obsm.clear(), t.varm.clear(), t.obsp.clear(), t.varp.clear();
  t.raw.reset();
  const fs::path p = tmp.dir() / "csc.zarr";
  write_zarr(t, p.string(), {3, ZarrCodec::gzip, -1, 0, 23});
  // Relabel X as csc_matrix of the original shape, with obs/var swapped back.
  json x = load_json(p / "X" / "zarr.json");
  x["attributes"]["encoding-type"] = "csc_matrix";
  x["attributes"]["shape"] = {d.n_obs(), d.n_vars()};
  save_json(p / "X" / "zarr.json", x);
  fs::rename(p / "obs", p / "tmp");
  fs::rename(p / "var", p / "obs");
  fs::rename(p / "tmp", p / "var");
  Dataset r = read_zarr(p.string());
  expect_matrix_eq(r.X, Matrix(want, DType::f32), "X");
  ZarrRowReader rr(p.string());
  expect_blocks_equal(rr, want, 9);
}

// A v3 array stored with the sharding_indexed codec (anndata >= 0.12's auto-sharding): shards of 4
// inner chunks, inner chunks zstd-compressed, index at the end with crc32c, one inner chunk empty.
TEST(Zarr, ReadsShardedV3Arrays) {
  test::TempDir tmp;
  Rng rng(test::fresh_seed());
  const int64_t n = 40, g = 6;
  Dataset d;
  d.obs.index = unique_names(n, "c", rng);
  d.var.index = unique_names(g, "g", rng);
  DenseF x = random_dense<float>(n, g, rng);
  for (int64_t c = 0; c < g; ++c) x(8, c) = x(9, c) = 0;  // rows 8-9: inner chunk 4 all zero -> left empty
  d.X = Matrix(x, DType::f32);
  const fs::path p = tmp.dir() / "sharded.zarr";
  write_zarr(d, p.string(), {3, ZarrCodec::none});
  // Rewrite X: inner chunks of 2 rows, shards of 8 rows (4 inner chunks; the last shard partial).
  const int64_t inner = 2, shard = 8;
  fs::remove_all(p / "X" / "c");
  for (int64_t s = 0; s * shard < n; ++s) {
    std::string body, index;
    auto put64 = [&](uint64_t v) {
      for (int k = 0; k < 8; ++k) index += static_cast<char>(v >> (8 * k));
    };
    for (int64_t i = 0; i < shard / inner; ++i) {
      const int64_t row = s * shard + i * inner;
      if (row == 8 || row >= n) {
        put64(~uint64_t{0});
        put64(~uint64_t{0});
        continue;
      }
      zarr::Bytes raw(static_cast<size_t>(inner * g * 4), 0);
      for (int64_t r = 0; r < inner && row + r < n; ++r) std::memcpy(raw.data() + r * g * 4, x.row(row + r), g * 4);
      zarr::Codec z;
      z.kind = zarr::Codec::Kind::zstd;
      z.level = 3;
      const zarr::Bytes enc = zarr::encode(z, raw);
      put64(body.size());
      put64(enc.size());
      body.append(enc.begin(), enc.end());
    }
    const uint32_t crc = zarr::crc32c(reinterpret_cast<const uint8_t*>(index.data()), index.size());
    for (int k = 0; k < 4; ++k) index += static_cast<char>(crc >> (8 * k));
    fs::create_directories(p / "X" / "c" / std::to_string(s));
    spit(p / "X" / "c" / std::to_string(s) / "0", body + index);
  }
  json meta = load_json(p / "X" / "zarr.json");
  meta["chunk_grid"]["configuration"]["chunk_shape"] = {shard, g};
  meta["codecs"] = json::array(
      {{{"name", "sharding_indexed"},
        {"configuration",
         {{"chunk_shape", {inner, g}},
          {"codecs", json::array({{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}},
                                  {{"name", "zstd"}, {"configuration", {{"level", 3}, {"checksum", false}}}}})},
          {"index_codecs", json::array({{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}},
                                        {{"name", "crc32c"}}})},
          {"index_location", "end"}}}}});
  save_json(p / "X" / "zarr.json", meta);
  Dataset r = read_zarr(p.string());
  expect_matrix_eq(r.X, d.X, "X");
  ZarrRowReader rr(p.string());
  expect_blocks_equal(rr, to_csr_f(d.X), 3, false);
  EXPECT_EQ(rr.nnz(), n * g);
  // A corrupted shard index is caught by its checksum.
  std::string sh = slurp(p / "X" / "c" / "1" / "0");
  sh[sh.size() - 10] ^= 0x5a;
  spit(p / "X" / "c" / "1" / "0", sh);
  expect_input_error([&] { read_zarr(p.string()); }, {p.string(), "X", "crc32c"});
}

TEST(Zarr, SummaryFromMetadata) {
  test::TempDir tmp;
  Dataset d = random_dataset(test::fresh_seed(), 0);
  for (int format : {2, 3}) {
    const std::string p = tmp.path("s" + std::to_string(format) + ".zarr");
    write_zarr(d, p, {format});
    H5adSummary s = summarize_zarr(p);
    EXPECT_EQ(s.n_obs, d.n_obs());
    EXPECT_EQ(s.n_vars, d.n_vars());
    EXPECT_EQ(s.x_encoding, "csr_matrix");
    EXPECT_EQ(s.x_dtype, "float32");
    EXPECT_EQ(s.x_nnz, d.X.nnz());
    EXPECT_EQ(s.anndata_encoding_version, "0.1.0");
    std::map<std::string, SlotInfo> by;
    for (const auto& x : s.slots) by[x.name] = x;
    EXPECT_EQ(by["obsm/X_pca"].shape, (std::vector<int64_t>{d.n_obs(), 7}));
    EXPECT_EQ(by["obs/cluster"].encoding, "categorical");
    EXPECT_EQ(by["obs/label"].dtype, "str");
    EXPECT_EQ(by["layers/counts"].dtype, "int64");
    EXPECT_EQ(by["uns/params/n_neighbors"].encoding, "numeric-scalar");
    EXPECT_EQ(by["raw/X"].shape, (std::vector<int64_t>{d.n_obs(), d.raw->X.n_cols()}));
  }
}

TEST(Zarr, MalformedStoresThrowInputErrorNamingStoreAndArray) {
  test::TempDir tmp;
  Dataset d = random_dataset(test::fresh_seed(), 0);
  auto fresh = [&](const std::string& name, int format, ZarrCodec codec) {
    const fs::path p = tmp.dir() / name;
    write_zarr(d, p.string(), {format, codec});
    return p;
  };
  {  // missing key: the obs index
    fs::path p = fresh("missing.zarr", 2, ZarrCodec::blosc_lz4);
    fs::remove_all(p / "obs" / "_index");
    expect_input_error([&] { read_zarr(p.string()); }, {p.string(), "obs", "_index", "missing"});
  }
  {  // missing key: X/indices
    fs::path p = fresh("missing3.zarr", 3, ZarrCodec::zstd);
    fs::remove_all(p / "X" / "indices");
    expect_input_error([&] { read_zarr(p.string()); }, {p.string(), "X/indices", "missing"});
    expect_input_error([&] { ZarrRowReader rr(p.string()); }, {p.string(), "X/indices"});
  }
  {  // wrong dtype: complex numbers
    fs::path p = fresh("dtype.zarr", 2, ZarrCodec::none);
    json a = load_json(p / "X" / "data" / ".zarray");
    a["dtype"] = "<c8";
    save_json(p / "X" / "data" / ".zarray", a);
    expect_input_error([&] { read_zarr(p.string()); }, {p.string(), "X/data", "<c8"});
  }
  {  // wrong dtype: strings where numbers belong
    fs::path p = fresh("strx.zarr", 3, ZarrCodec::none);
    json a = load_json(p / "X" / "data" / "zarr.json");
    a["data_type"] = "string";
    a["codecs"] = json::array({{{"name", "vlen-utf8"}}});
    save_json(p / "X" / "data" / "zarr.json", a);
    expect_input_error([&] { read_zarr(p.string()); }, {p.string(), "X/data", "strings"});
  }
  {  // a chunk of the wrong size (uncompressed, truncated)
    fs::path p = fresh("short.zarr", 2, ZarrCodec::none);
    std::string c = slurp(p / "X" / "indptr" / "0");
    spit(p / "X" / "indptr" / "0", c.substr(0, c.size() - 4));
    expect_input_error([&] { read_zarr(p.string()); }, {p.string(), "X/indptr", "wrong chunk size"});
  }
  {  // a chunk of the wrong size (v3, compressed: decodes to too many bytes)
    fs::path p = fresh("long3.zarr", 3, ZarrCodec::gzip);
    json a = load_json(p / "obsm" / "X_pca" / "zarr.json");
    a["chunk_grid"]["configuration"]["chunk_shape"] = {1, 7};  // the stored chunk holds all rows
    save_json(p / "obsm" / "X_pca" / "zarr.json", a);
    expect_input_error([&] { read_zarr(p.string()); }, {p.string(), "obsm/X_pca", "wrong chunk size"});
  }
  for (ZarrCodec codec : {ZarrCodec::blosc_lz4, ZarrCodec::zstd, ZarrCodec::gzip}) {  // corrupt compressed chunks
    SCOPED_TRACE(codec_name(codec));
    fs::path p = fresh(std::string("corrupt_") + codec_name(codec) + ".zarr", 2, codec);
    std::string c = slurp(p / "X" / "data" / "0");
    for (size_t i = 0; i < c.size(); i += 3) c[i] = static_cast<char>(c[i] ^ 0xA5);
    spit(p / "X" / "data" / "0", c.substr(0, c.size() * 2 / 3));
    expect_input_error([&] { read_zarr(p.string()); }, {p.string(), "X/data", "corrupt"});
  }
  {  // broken JSON metadata
    fs::path p = fresh("json.zarr", 3, ZarrCodec::zstd);
    spit(p / "var" / "zarr.json", "{\"zarr_format\": 3, ");
    expect_input_error([&] { read_zarr(p.string()); }, {p.string(), "var", "JSON"});
  }
  {  // unsupported compressor
    fs::path p = fresh("lzma.zarr", 2, ZarrCodec::zstd);
    json a = load_json(p / "X" / "data" / ".zarray");
    a["compressor"] = {{"id", "lzma"}};
    save_json(p / "X" / "data" / ".zarray", a);
    expect_input_error([&] { read_zarr(p.string()); }, {p.string(), "X/data", "lzma"});
  }
  {  // wrong indptr length
    fs::path p = fresh("shape.zarr", 2, ZarrCodec::zstd);
    json a = load_json(p / "X" / ".zattrs");
    a["shape"] = {d.n_obs() + 1, d.n_vars()};
    save_json(p / "X" / ".zattrs", a);
    expect_input_error([&] { read_zarr(p.string()); }, {p.string(), "X", "indptr"});
  }
  // Not a store at all.
  fs::create_directories(tmp.dir() / "empty");
  expect_input_error([&] { read_zarr((tmp.dir() / "empty").string()); }, {"empty", "not a zarr store"});
}

TEST(Zarr, FailedWriteLeavesExistingStoreUntouchedAndNoTemporary) {
  test::TempDir tmp;
  const std::string p = tmp.path("keep.zarr");
  Dataset d = random_dataset(test::fresh_seed(), 2);
  write_zarr(d, p);
  Dataset bad = random_dataset(test::fresh_seed() + 1, 0);
  bad.uns["bad/key"] = Value(1.0);
  expect_input_error([&] { write_zarr(bad, p, {3}); }, {"keep.zarr", "bad/key"});
  int entries = 0;
  for (const auto& e : fs::directory_iterator(tmp.dir())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);  // no temporary left behind
  expect_dataset_eq(d, read_zarr(p));
  // A directory that is not a zarr store is never replaced.
  fs::create_directories(tmp.dir() / "precious");
  spit(tmp.dir() / "precious" / "notes.txt", "keep me");
  expect_input_error([&] { write_zarr(d, tmp.path("precious")); }, {"precious", "not a zarr store"});
  EXPECT_EQ(slurp(tmp.dir() / "precious" / "notes.txt"), "keep me");
}

// Writes zarr stores (v2: one per codec; and v3) and JSON sidecars of expected values for
// tests/io/zarr_client.py; runs only when SCURRY_WRITE_ZARR_SAMPLE names an output directory.
TEST(Zarr, WriteSampleForPython) {
  const char* out = std::getenv("SCURRY_WRITE_ZARR_SAMPLE");
  if (!out || !*out) GTEST_SKIP() << "SCURRY_WRITE_ZARR_SAMPLE not set (used by test_zarr_client.sh)";
  Rng rng(test::fresh_seed());
  Dataset d = read_h5ad(test::shared_data("pbmc3k_first1000.h5ad"));
  const int64_t n = d.n_obs(), g = d.n_vars();
  add_columns(d.obs, rng);
  add_columns(d.var, rng);
  d.layers["counts"] = d.X;
  d.layers["scaled"] = Matrix(sparse_few<double>(n, g, 100, rng), DType::f64);
  d.obsm["X_pca"] = Matrix(random_dense<float>(n, 10, rng), DType::f32);
  d.obsm["X_sparse"] = Matrix(random_csr<double>(n, 5, 0.3, rng, false), DType::f64);
  d.varm["PCs"] = Matrix(random_dense<double>(g, 3, rng), DType::f64);
  d.obsp["connectivities"] = Matrix(sparse_few<float>(n, n, 20, rng), DType::f32);
  d.varp["tiny"] = Matrix(sparse_few<float>(g, g, 1, rng), DType::f32);
  d.uns = random_uns(rng);
  auto raw = std::make_shared<Dataset>();
  std::vector<int64_t> first(500);
  for (int64_t j = 0; j < 500; ++j) first[j] = j;
  raw->X = take_cols(d.X, first);
  raw->var = d.var.take(first);
  raw->varm["stats"] = Matrix(random_dense<float>(500, 2, rng), DType::f32);
  d.raw = raw;
  fs::create_directories(out);
  for (ZarrCodec c : {ZarrCodec::blosc_lz4, ZarrCodec::zstd, ZarrCodec::gzip, ZarrCodec::none})
    write_zarr(d, (fs::path(out) / (std::string("v2_") + codec_name(c) + ".zarr")).string(), {2, c, -1, 100, 5000});
  write_zarr(d, (fs::path(out) / "v3_zstd.zarr").string(), {3, ZarrCodec::zstd});
  std::ofstream js(fs::path(out) / "sample.json");
  js << sidecar(d).dump();
  ASSERT_TRUE(js.good());
}

// Compares a store written by Python (test_zarr_client.sh) with the h5ad anndata wrote from the same
// AnnData; runs only when SCURRY_PY_ZARR names the store (and SCURRY_PY_H5AD the h5ad).
TEST(Zarr, ReadsStoreWrittenByPython) {
  const char* z = std::getenv("SCURRY_PY_ZARR");
  const char* h = std::getenv("SCURRY_PY_H5AD");
  if (!z || !*z || !h || !*h) GTEST_SKIP() << "SCURRY_PY_ZARR/SCURRY_PY_H5AD not set (used by test_zarr_client.sh)";
  Dataset want = read_h5ad(h);
  Dataset got = read_zarr(z);
  expect_dataset_eq(want, got);
  ZarrRowReader rr(z);
  expect_blocks_equal(rr, to_csr_f(want.X), 13);
}

}  // namespace scurry
