// libFuzzer target: one chunk of a zarr store through a codec, then through the AnnData reader that
// checks what it decoded. Built three times, with SCURRY_FUZZ_CODEC = blosc_lz4, zstd or gzip
// (fuzz_zarr_blosc, fuzz_zarr_zstd, fuzz_zarr_gzip). At start the target writes small template
// stores with scurry's zarr writer and that codec: zarr v2 and v3 (and, for gzip, a v2 store whose
// array says "zlib", numcodecs' Zlib). Input: one selector byte, then the bytes of a chunk.
//   selector & 0x07: which array's chunk the bytes replace (X/data, X/indices, X/indptr,
//                    obs/_index, var/_index, obs/n_counts, obsm/X_pca; taken modulo 7)
//   selector & 0x80: the zarr v3 store (else v2);  selector & 0x40 (gzip build, v2): zlib
// The chunk is read by read_zarr (whole) and by ZarrRowReader (X by rows), as the CLI reads a store.
// Setting SCURRY_FUZZ_DUMP_SEEDS=DIR writes one seed per (array, store) -- the template's own chunk
// with its selector -- into DIR and exits (fuzz/make_corpus.py uses it).
#include <fstream>
#include <sstream>

#include "core/dataset.hpp"
#include "fuzz_common.hpp"
#include "io/zarr.hpp"

#ifndef SCURRY_FUZZ_CODEC
#define SCURRY_FUZZ_CODEC zstd
#endif
#define SCURRY_STR2(x) #x
#define SCURRY_STR(x) SCURRY_STR2(x)

namespace {
using namespace scurry;
namespace fs = std::filesystem;

constexpr const char* kArrays[] = {"X/data", "X/indices", "X/indptr", "obs/_index", "var/_index", "obs/n_counts", "obsm/X_pca"};
constexpr int kNumArrays = 7;

Dataset template_dataset() {
  Dataset d;
  CsrF x;
  x.n_rows = 7;
  x.n_cols = 5;
  x.indptr = {0, 2, 3, 3, 6, 8, 9, 11};
  x.indices = {0, 3, 2, 0, 1, 4, 1, 3, 2, 0, 4};
  x.data = {1, 2, 5, 1, 1, 3, 7, 1, 2, 4, 1};
  d.X = Matrix(std::move(x));
  d.obs.index = {"AAAC-1", "AAAG-1", "AACT-1", "ACGT-1", "AGGT-1", "CCAT-1", "TTGA-1"};
  d.obs.set("n_counts", Column::numeric({3, 5, 0, 5, 8, 2, 5}));
  d.var.index = {"MT-CO1", "CD3E", "LYZ", "MS4A1", "NKG7"};
  DenseF pca(7, 2);
  for (int i = 0; i < 14; ++i) pca.data[i] = 0.25f * static_cast<float>(i) - 1.5f;
  d.obsm["X_pca"] = Matrix(std::move(pca));
  return d;
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Variant {
  std::string dir;
  bool v3 = false;
  // Per array: the chunk file replaced and its original bytes, the metadata file and its bytes.
  std::string chunk[kNumArrays], chunk_bytes[kNumArrays], meta[kNumArrays], meta_bytes[kNumArrays];
};
std::vector<Variant> g_variants;  // [0] v2, [1] v3

void make_variant(int format) {
  Variant v;
  v.v3 = format == 3;
  v.dir = fuzz::scratch() + "/template_v" + std::to_string(format) + ".zarr";
  ZarrWriteOptions o;
  o.format = format;
  o.codec = ZarrCodec::SCURRY_FUZZ_CODEC;
  o.threads = 1;
  write_zarr(template_dataset(), v.dir, o);
  for (int a = 0; a < kNumArrays; ++a) {
    const fs::path adir = fs::path(v.dir) / kArrays[a];
    v.meta[a] = (adir / (v.v3 ? "zarr.json" : ".zarray")).string();
    v.meta_bytes[a] = slurp(v.meta[a]);
    for (const auto& e : fs::recursive_directory_iterator(adir))
      if (e.is_regular_file() && e.path().filename().string()[0] != '.' && e.path().filename() != "zarr.json") {
        v.chunk[a] = e.path().string();
        break;
      }
    if (v.chunk[a].empty()) std::abort();
    v.chunk_bytes[a] = slurp(v.chunk[a]);
  }
  g_variants.push_back(std::move(v));
}

void spit(const std::string& p, const std::string& s) { fuzz::write_bytes(p, reinterpret_cast<const uint8_t*>(s.data()), s.size()); }

std::string zlib_meta(std::string m) {
  // numcodecs' Zlib in place of GZip: {"id": "gzip", ...} -> {"id": "zlib", ...}
  const size_t p = m.find("\"gzip\"");
  if (p != std::string::npos) m.replace(p, 6, "\"zlib\"");
  return m;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  log::set_quiet(true);
  make_variant(2);
  make_variant(3);
  if (const char* out = std::getenv("SCURRY_FUZZ_DUMP_SEEDS")) {
    fs::create_directories(out);
    for (int vi = 0; vi < 2; ++vi)
      for (int a = 0; a < kNumArrays; ++a) {
        std::string s(1, static_cast<char>(a | (vi ? 0x80 : 0)));
        s += g_variants[vi].chunk_bytes[a];
        spit(std::string(out) + "/" + (vi ? "v3_" : "v2_") + std::to_string(a), s);
      }
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int sel = data[0];
  Variant& v = g_variants[(sel & 0x80) ? 1 : 0];
  const int a = (sel & 0x07) % kNumArrays;
  const bool zlib = std::string_view(SCURRY_STR(SCURRY_FUZZ_CODEC)) == "gzip" && !v.v3 && (sel & 0x40);
  fuzz::write_bytes(v.chunk[a], data + 1, size - 1);
  if (zlib) spit(v.meta[a], zlib_meta(v.meta_bytes[a]));
  fuzz::materialize_if_asked(v.dir);
  fuzz::run_clean([&] { read_zarr(v.dir); });
  fuzz::run_clean([&] {
    ZarrRowReader r(v.dir, "X", 1);
    r.row_pointers();
    r.read_rows(0, r.n_rows());
  });
  spit(v.chunk[a], v.chunk_bytes[a]);
  if (zlib) spit(v.meta[a], v.meta_bytes[a]);
  return 0;
}
