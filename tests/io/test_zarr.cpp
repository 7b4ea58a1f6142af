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
#include "io/sample_datasets.hpp"
#include "io/store_edit.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- zarr helpers ------------------------------------------------------------------------------

using test::load_json;
using test::save_json;
using test::slurp;
using test::spit;

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
    case ZarrCodec::blosc_zstd: return "blosc-zstd";
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


}  // namespace

// ---- tests ---------------------------------------------------------------------------------------

TEST(Zarr, RoundTripEverySlotEveryFormatAndCodec) {
  const uint64_t seed = test::fresh_seed();
  test::TempDir tmp;
  int i = 0;
  for (int format : {2, 3})
    for (ZarrCodec codec : {ZarrCodec::blosc_lz4, ZarrCodec::blosc_zstd, ZarrCodec::zstd, ZarrCodec::gzip, ZarrCodec::none}) {
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

// A table of unnamed rows (the Python package's cells when a step needs only their number): its
// size without names, kept unnamed by take(), and refused by both writers rather than written short.
TEST(Zarr, UnnamedRowsAreCountedTakenAndNeverWritten) {
  const uint64_t seed = test::fresh_seed();
  test::TempDir tmp;
  Dataset d = random_dataset(seed, 0);
  const int64_t n = d.n_obs();
  ASSERT_GT(n, 2);
  d.obs.set_unnamed_rows(n);
  EXPECT_TRUE(d.obs.unnamed());
  EXPECT_EQ(d.n_obs(), n);
  EXPECT_NO_THROW(d.check_shapes("unnamed"));
  Table t = d.obs.take({n - 1, 0});
  EXPECT_TRUE(t.unnamed());
  EXPECT_EQ(t.n_rows(), 2);
  for (const auto& c : d.obs.names()) EXPECT_EQ(t.at(c).size(), 2);
  for (const std::string name : {"u.zarr", "u.h5ad"}) {
    const std::string p = tmp.path(name);
    try {
      if (name == "u.zarr") write_zarr(d, p);
      else write_h5ad(d, p);
      ADD_FAILURE() << "an unnamed obs was written to " << p;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("no names"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(p)) << "partial output left at " << p;
  }
  d.obs.index.assign(static_cast<size_t>(n), "c");
  EXPECT_FALSE(d.obs.unnamed());
  EXPECT_EQ(d.n_obs(), n);
}

TEST(Zarr, GoldenPbmcEqualsH5adAndAWrittenH5adEqualsTheStore) {
  Dataset h = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"));
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
  Dataset d = read_h5ad(test::test_data("pbmc3k_first1000.h5ad"));
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
  for (ZarrCodec c : {ZarrCodec::blosc_lz4, ZarrCodec::blosc_zstd, ZarrCodec::zstd, ZarrCodec::gzip, ZarrCodec::none})
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
