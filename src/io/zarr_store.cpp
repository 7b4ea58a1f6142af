#include "io/zarr_store.hpp"

#include "core/memory.hpp"

#include <algorithm>
#include <thread>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <type_traits>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.hpp"
#include "core/output.hpp"
#include "core/fill_ahead.hpp"
#include "exec/parallel.hpp"

namespace scurry::zarr {

namespace fs = std::filesystem;

namespace {

std::string join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "/" + b;
}

std::optional<Bytes> read_file(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0) return std::nullopt;
  Bytes b(static_cast<size_t>(st.st_size));
  for (size_t got = 0; got < b.size();) {
    const ssize_t r = ::read(fd, b.data() + got, b.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return std::nullopt;  // (shorter than its size: changed while read)
    got += static_cast<size_t>(r);
  }
  return b;
}

// Bytes [off, off+n) of a file (off < 0: from the end).
Bytes read_range(const fs::path& p, int64_t off, int64_t n, const std::string& where) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail_input(where, ": cannot open ", p.string());
  in.seekg(0, std::ios::end);
  const int64_t size = in.tellg();
  if (off < 0) off += size;
  if (off < 0 || n < 0 || off + n > size)
    fail_input(where, ": shard ", p.filename().string(), " is too short (", size, " bytes) for bytes [", off, ", ",
               off + n, ")");
  in.seekg(off);
  Bytes b(static_cast<size_t>(n));
  if (n > 0) in.read(reinterpret_cast<char*>(b.data()), n);
  if (!in) fail_input(where, ": cannot read ", p.string());
  return b;
}

// POSIX calls, for the errno of a failure (fail_write: "disk full" for ENOSPC).
void write_file(const fs::path& p, const void* data, size_t n) {
  const int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_write(p.string(), errno, "cannot be created for writing", true);
  const char* c = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      close(fd);
      fail_write(p.string(), err, "write failed");
    }
    c += w, n -= static_cast<size_t>(w);
  }
  if (close(fd) != 0) fail_write(p.string(), errno, "write failed");
}

void write_json(const fs::path& p, const Json& j) {
  const std::string s = j.dump(4);
  write_file(p, s.data(), s.size());
}

Json read_json(const fs::path& p, const std::string& where) {
  auto b = read_file(p);
  if (!b) fail_input(where, ": cannot read ", p.filename().string());
  try {
    return Json::parse(b->begin(), b->end());
  } catch (const Json::exception& e) {
    fail_input(where, ": ", p.filename().string(), " is not valid JSON (", e.what(), ")");
  }
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (auto x : v) p *= x;
  return p;
}

// ---- dtypes ---------------------------------------------------------------------------------------

DType dtype_of(char kind, int size, const std::string& where, const std::string& name) {
  if (kind == 'f' && size == 4) return DType::f32;
  if (kind == 'f' && size == 8) return DType::f64;
  if (kind == 'b' && size == 1) return DType::boolean;
  if (kind == 'i') {
    if (size == 1) return DType::i8;
    if (size == 2) return DType::i16;
    if (size == 4) return DType::i32;
    if (size == 8) return DType::i64;
  }
  if (kind == 'u') {
    if (size == 1) return DType::u8;
    if (size == 2) return DType::u16;
    if (size == 4) return DType::u32;
    if (size == 8) return DType::u64;
  }
  fail_input(where, ": unsupported data type '", name, "' (supported: bool, int8..64, uint8..64, float32/64, strings)");
}

// v2 dtype strings: "<f4", "|b1", "|O", "<U12", "|S5", ...
void parse_v2_dtype(ArrayMeta& m, const Json& j, const std::string& where);

// A structured dtype: every field [name, "<f4" | "<U12" | "|S5" | ...]; sub-array fields refused.
void parse_v2_record(ArrayMeta& m, const Json& j, const std::string& where) {
  int total = 0;
  for (const auto& f : j) {
    if (!f.is_array() || f.size() != 2 || !f[0].is_string() || !f[1].is_string())
      fail_input(where, ": unsupported structured dtype field ", f.dump(), " (expected [name, type])");
    ArrayMeta fm;
    parse_v2_dtype(fm, f[1], where);
    if (fm.elem == Elem::vlen_string) fail_input(where, ": structured dtype field ", f.dump(), " is an object");
    total += fm.itemsize;
  }
  if (j.empty()) fail_input(where, ": structured dtype without fields");
  m.record = j;
  m.elem = Elem::fixed_bytes;
  m.itemsize = total;
}

void parse_v2_dtype(ArrayMeta& m, const Json& j, const std::string& where) {
  if (j.is_array()) return parse_v2_record(m, j, where);
  if (!j.is_string()) fail_input(where, ": unsupported dtype (", j.dump(), ")");
  const std::string s = j.get<std::string>();
  if (s.size() < 2) fail_input(where, ": bad dtype '", s, "'");
  const char endian = s[0];
  if (endian != '<' && endian != '>' && endian != '|' && endian != '=')
    fail_input(where, ": bad dtype '", s, "' (no byte order)");
  m.big_endian = endian == '>';
  const char kind = s[1];
  if (kind == 'O') {
    m.elem = Elem::vlen_string;
    return;
  }
  int size = 0;
  try {
    size = std::stoi(s.substr(2));
  } catch (...) {
    fail_input(where, ": bad dtype '", s, "'");
  }
  if (kind == 'U') {
    m.elem = Elem::fixed_unicode;
    m.itemsize = 4 * size;
    return;
  }
  if (kind == 'S') {
    m.elem = Elem::fixed_bytes;
    m.itemsize = size;
    return;
  }
  m.dtype = dtype_of(kind, size, where, s);
  m.itemsize = dtype_size(m.dtype);
}

void parse_v3_dtype(ArrayMeta& m, const Json& j, const std::string& where) {
  std::string s = j.is_string() ? j.get<std::string>() : j.is_object() ? j.value("name", "") : "";
  if (s == "string") {
    m.elem = Elem::vlen_string;
    return;
  }
  static const std::pair<const char*, DType> names[] = {
      {"bool", DType::boolean}, {"int8", DType::i8},   {"int16", DType::i16},  {"int32", DType::i32},
      {"int64", DType::i64},    {"uint8", DType::u8},  {"uint16", DType::u16}, {"uint32", DType::u32},
      {"uint64", DType::u64},   {"float32", DType::f32}, {"float64", DType::f64}};
  for (const auto& [n, t] : names)
    if (s == n) {
      m.dtype = t;
      m.itemsize = dtype_size(t);
      return;
    }
  fail_input(where, ": unsupported data_type ", j.dump(), " (supported: bool, int8..64, uint8..64, float32/64, string)");
}

const char* v2_dtype_string(DType t) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::i8: return "|i1";
    case DType::i16: return "<i2";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::u8: return "|u1";
    case DType::u16: return "<u2";
    case DType::u32: return "<u4";
    case DType::u64: return "<u8";
    case DType::boolean: return "|b1";
  }
  return "<f8";
}

const char* v3_dtype_string(DType t) { return t == DType::boolean ? "bool" : dtype_name(t); }

double parse_fill(const Json& f, const ArrayMeta& m, const std::string& where) {
  if (f.is_null()) return 0;
  if (f.is_boolean()) return f.get<bool>() ? 1 : 0;
  if (f.is_number()) return f.get<double>();
  if (f.is_string()) {
    const std::string s = f.get<std::string>();
    if (s == "NaN") return std::nan("");
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    if (s.rfind("0x", 0) == 0 && is_float(m.dtype)) {
      const uint64_t bits = std::stoull(s.substr(2), nullptr, 16);
      if (m.dtype == DType::f32) {
        const uint32_t b32 = static_cast<uint32_t>(bits);
        float x;
        std::memcpy(&x, &b32, 4);
        return x;
      }
      double x;
      std::memcpy(&x, &bits, 8);
      return x;
    }
    if (s.empty()) return 0;
  }
  fail_input(where, ": bad fill_value ", f.dump());
}

// ---- codecs ---------------------------------------------------------------------------------------

Codec v2_compressor(const Json& c, const ArrayMeta& m, const std::string& where) {
  const std::string id = c.value("id", "");
  Codec k;
  if (id == "blosc") {
    k.kind = Codec::Kind::blosc;
    k.cname = c.value("cname", "lz4");
    k.level = c.value("clevel", 5);
    k.shuffle = c.value("shuffle", 1);
    if (k.shuffle < 0) k.shuffle = m.itemsize == 1 ? 2 : 1;  // numcodecs AUTOSHUFFLE
    k.typesize = m.itemsize;
  } else if (id == "zstd") {
    k.kind = Codec::Kind::zstd;
    k.level = c.value("level", 1);
  } else if (id == "gzip") {
    k.kind = Codec::Kind::gzip;
    k.level = c.value("level", 1);
  } else if (id == "zlib") {
    k.kind = Codec::Kind::zlib;
    k.level = c.value("level", 1);
  } else {
    fail_input(where, ": compressor '", id, "' is not supported (blosc, zstd, gzip, zlib are); recompress the store");
  }
  return k;
}

// A v3 bytes->bytes codec; false if `c` is not one.
bool v3_bytes_codec(const Json& c, const ArrayMeta& m, Codec& k, const std::string& where) {
  const std::string name = c.value("name", "");
  const Json cfg = c.contains("configuration") ? c["configuration"] : Json::object();
  if (name == "blosc") {
    k.kind = Codec::Kind::blosc;
    k.cname = cfg.value("cname", "lz4");
    k.level = cfg.value("clevel", 5);
    const std::string sh = cfg.value("shuffle", "noshuffle");
    k.shuffle = sh == "shuffle" ? 1 : sh == "bitshuffle" ? 2 : 0;
    k.typesize = cfg.value("typesize", m.itemsize);
  } else if (name == "zstd") {
    k.kind = Codec::Kind::zstd;
    k.level = cfg.value("level", 0);
    k.checksum = cfg.value("checksum", false);
  } else if (name == "gzip") {
    k.kind = Codec::Kind::gzip;
    k.level = cfg.value("level", 5);
  } else if (name == "crc32c") {
    k.kind = Codec::Kind::crc32c;
  } else {
    (void)where;
    return false;
  }
  return true;
}

// Parses a v3 codec chain into m (the array->bytes codec sets the element encoding).
void parse_v3_codecs(ArrayMeta& m, const Json& codecs, const std::string& where, bool inner) {
  if (!codecs.is_array()) fail_input(where, ": 'codecs' must be a list");
  bool have_a2b = false;
  for (const auto& c : codecs) {
    const std::string name = c.is_string() ? c.get<std::string>() : c.value("name", "");
    const Json cfg = c.is_object() && c.contains("configuration") ? c["configuration"] : Json::object();
    if (name == "transpose") {
      const Json order = cfg.value("order", Json::array());
      bool identity = true;
      for (size_t i = 0; i < order.size(); ++i) identity = identity && order[i].get<int64_t>() == static_cast<int64_t>(i);
      if (!identity) fail_input(where, ": the transpose codec (F order) is not supported; rewrite in C order");
      continue;
    }
    if (name == "bytes") {
      m.big_endian = cfg.value("endian", "little") == "big";
      have_a2b = true;
      continue;
    }
    if (name == "vlen-utf8") {
      if (m.elem != Elem::vlen_string) fail_input(where, ": vlen-utf8 codec on a non-string data type");
      have_a2b = true;
      continue;
    }
    if (name == "sharding_indexed") {
      if (inner) fail_input(where, ": nested sharding is not supported");
      m.sharded = true;
      m.shard = m.chunks;
      m.chunks = cfg.at("chunk_shape").get<std::vector<int64_t>>();
      if (m.chunks.size() != m.shard.size()) fail_input(where, ": shard chunk_shape rank differs from the array");
      for (size_t d = 0; d < m.chunks.size(); ++d)
        if (m.chunks[d] <= 0 || m.shard[d] % m.chunks[d] != 0)
          fail_input(where, ": shard shape is not a multiple of the inner chunk shape");
      m.index_at_end = cfg.value("index_location", "end") != "start";
      for (const auto& ic : cfg.value("index_codecs", Json::array())) {
        const std::string in = ic.is_string() ? ic.get<std::string>() : ic.value("name", "");
        if (in == "crc32c") m.index_crc = true;
        else if (in != "bytes") fail_input(where, ": shard index codec '", in, "' is not supported");
      }
      parse_v3_codecs(m, cfg.at("codecs"), where, true);
      have_a2b = true;
      continue;
    }
    Codec k;
    if (!v3_bytes_codec(c.is_object() ? c : Json{{"name", name}}, m, k, where))
      fail_input(where, ": codec '", name, "' is not supported (bytes, vlen-utf8, blosc, zstd, gzip, crc32c, ",
                 "sharding_indexed are)");
    m.codecs.push_back(k);
  }
  if (!have_a2b) fail_input(where, ": codec chain without an array->bytes codec (bytes or vlen-utf8)");
}

// ---- element conversion -----------------------------------------------------------------------------

template <class S>
S load(const uint8_t* p, bool swap) {
  S v;
  if (!swap) {
    std::memcpy(&v, p, sizeof(S));
  } else {
    uint8_t b[sizeof(S)];
    for (size_t i = 0; i < sizeof(S); ++i) b[i] = p[sizeof(S) - 1 - i];
    std::memcpy(&v, b, sizeof(S));
  }
  return v;
}

template <class T, class S>
T cast_checked(S v, const std::string& where) {
  if constexpr (std::is_integral_v<T> && std::is_floating_point_v<S>) {
    if (!std::isfinite(v) || v != std::floor(v)) fail_input(where, ": holds ", v, ", not an integer");
    if (!(v >= static_cast<S>(std::numeric_limits<T>::min()) && v <= static_cast<S>(std::numeric_limits<T>::max())))
      fail_input(where, ": value ", v, " does not fit the expected integer type");
    return static_cast<T>(v);
  } else if constexpr (std::is_integral_v<T> && std::is_integral_v<S>) {
    if (!std::in_range<T>(v)) fail_input(where, ": value ", v, " does not fit the expected integer type");
    return static_cast<T>(v);
  } else {
    return static_cast<T>(v);
  }
}

// The DType whose elements are T's bytes (boolean for none: u8 arrays may hold bools).
template <class T>
constexpr DType native_dtype() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  else if constexpr (std::is_same_v<T, double>) return DType::f64;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::i32;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::i64;
  else return DType::boolean;
}

template <class T>
void convert(const uint8_t* src, DType dt, bool swap, T* dst, int64_t n, const std::string& where) {
  auto run = [&](auto tag) {
    using S = decltype(tag);
    for (int64_t i = 0; i < n; ++i) dst[i] = cast_checked<T>(load<S>(src + i * sizeof(S), swap), where);
  };
  switch (dt) {
    case DType::f32: run(float{}); break;
    case DType::f64: run(double{}); break;
    case DType::i8: run(int8_t{}); break;
    case DType::i16: run(int16_t{}); break;
    case DType::i32: run(int32_t{}); break;
    case DType::i64: run(int64_t{}); break;
    case DType::u8: run(uint8_t{}); break;
    case DType::u16: run(uint16_t{}); break;
    case DType::u32: run(uint32_t{}); break;
    case DType::u64: run(uint64_t{}); break;
    case DType::boolean:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i] != 0);
      break;
  }
}

std::string utf32_to_utf8(const uint8_t* p, int64_t n_chars, bool swap) {
  std::string s;
  for (int64_t i = 0; i < n_chars; ++i) {
    const uint32_t c = load<uint32_t>(p + 4 * i, swap);
    if (c == 0) break;
    if (c < 0x80) {
      s += static_cast<char>(c);
    } else if (c < 0x800) {
      s += static_cast<char>(0xC0 | (c >> 6));
      s += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      s += static_cast<char>(0xE0 | (c >> 12));
      s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (c >> 18));
      s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return s;
}

std::vector<uint32_t> utf8_to_utf32(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<uint8_t>(s[i]);
    uint32_t c = b;
    int extra = 0;
    if (b >= 0xF0) { c = b & 0x07; extra = 3; }
    else if (b >= 0xE0) { c = b & 0x0F; extra = 2; }
    else if (b >= 0xC0) { c = b & 0x1F; extra = 1; }
    ++i;
    for (int k = 0; k < extra && i < s.size(); ++k, ++i) c = (c << 6) | (static_cast<uint8_t>(s[i]) & 0x3F);
    out.push_back(c);
  }
  return out;
}

}  // namespace

// ---- ArrayMeta / Store --------------------------------------------------------------------------------

int64_t ArrayMeta::size() const { return product(shape); }

std::string ArrayMeta::type_name() const { return elem == Elem::numeric ? dtype_name(dtype) : "str"; }

Store::Store(std::string root) : root_(std::move(root)) {
  std::error_code ec;
  if (!fs::is_directory(root_, ec)) fail_input(root_, "not a zarr store (not a directory)");
  if (kind("") == NodeKind::missing)
    fail_input(root_, "not a zarr store (no .zgroup/.zattrs or zarr.json at its root)");
}

std::string Store::where(const std::string& path) const { return path.empty() ? root_ : root_ + ": " + path; }

NodeKind Store::kind(const std::string& path) const {
  const fs::path d = fs::path(root_) / path;
  std::error_code ec;
  if (fs::exists(d / "zarr.json", ec)) {
    const Json j = read_json(d / "zarr.json", where(path));
    const std::string t = j.value("node_type", "");
    if (t == "array") return NodeKind::array;
    if (t == "group") return NodeKind::group;
    fail_input(where(path), ": zarr.json has node_type '", t, "' (expected group or array)");
  }
  if (fs::exists(d / ".zarray", ec)) return NodeKind::array;
  if (fs::exists(d / ".zgroup", ec)) return NodeKind::group;
  // A v2 group with attributes only (implicit group).
  if (fs::exists(d / ".zattrs", ec) && fs::is_directory(d, ec)) return NodeKind::group;
  return NodeKind::missing;
}

int Store::format(const std::string& path) const {
  std::error_code ec;
  return fs::exists(fs::path(root_) / path / "zarr.json", ec) ? 3 : 2;
}

Json Store::attrs(const std::string& path) const {
  const fs::path d = fs::path(root_) / path;
  std::error_code ec;
  if (fs::exists(d / "zarr.json", ec)) {
    Json j = read_json(d / "zarr.json", where(path));
    if (j.contains("attributes") && j["attributes"].is_object()) return j["attributes"];
    return Json::object();
  }
  if (fs::exists(d / ".zattrs", ec)) {
    Json j = read_json(d / ".zattrs", where(path));
    if (!j.is_object()) fail_input(where(path), ": .zattrs is not a JSON object");
    return j;
  }
  return Json::object();
}

std::vector<std::string> Store::children(const std::string& path) const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(root_) / path, ec)) {
    if (!e.is_directory()) continue;
    const std::string name = e.path().filename().string();
    if (kind(join(path, name)) != NodeKind::missing) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

ArrayMeta Store::array_meta(const std::string& path) const {
  const std::string w = where(path);
  const fs::path d = fs::path(root_) / path;
  ArrayMeta m;
  try {
    if (format(path) == 3) {
      const Json j = read_json(d / "zarr.json", w);
      m.format = 3;
      if (j.value("node_type", "") != "array") fail_input(w, ": not an array");
      m.shape = j.at("shape").get<std::vector<int64_t>>();
      parse_v3_dtype(m, j.at("data_type"), w);
      const Json& grid = j.at("chunk_grid");
      if (grid.value("name", "") != "regular") fail_input(w, ": chunk grid '", grid.value("name", ""), "' is not supported");
      m.chunks = grid.at("configuration").at("chunk_shape").get<std::vector<int64_t>>();
      const Json kenc = j.value("chunk_key_encoding", Json{{"name", "default"}});
      const std::string kname = kenc.value("name", "default");
      const Json kcfg = kenc.value("configuration", Json::object());
      if (kname == "default") {
        m.v3_default_keys = true;
        m.sep = kcfg.value("separator", "/").at(0);
      } else if (kname == "v2") {
        m.sep = kcfg.value("separator", ".").at(0);
      } else {
        fail_input(w, ": chunk_key_encoding '", kname, "' is not supported");
      }
      parse_v3_codecs(m, j.at("codecs"), w, false);
      if (m.elem == Elem::vlen_string) m.fill_str = j.value("fill_value", Json("")).is_string() ? j["fill_value"].get<std::string>() : "";
      else m.fill = parse_fill(j.value("fill_value", Json(0)), m, w);
      m.attrs = j.contains("attributes") && j["attributes"].is_object() ? j["attributes"] : Json::object();
    } else {
      const Json j = read_json(d / ".zarray", w);
      m.format = 2;
      if (j.value("zarr_format", 2) != 2) fail_input(w, ": .zarray has zarr_format ", j.value("zarr_format", 0));
      m.shape = j.at("shape").get<std::vector<int64_t>>();
      m.chunks = j.at("chunks").get<std::vector<int64_t>>();
      parse_v2_dtype(m, j.at("dtype"), w);
      if (j.value("order", "C") != "C") fail_input(w, ": Fortran (F) order is not supported; rewrite the array in C order");
      const std::string sep = j.value("dimension_separator", ".");
      m.sep = sep.empty() ? '.' : sep[0];
      if (j.contains("compressor") && !j["compressor"].is_null()) m.codecs.push_back(v2_compressor(j["compressor"], m, w));
      if (j.contains("filters") && !j["filters"].is_null()) {
        for (const auto& f : j["filters"]) {
          const std::string id = f.value("id", "");
          if (id == "vlen-utf8" && m.elem == Elem::vlen_string) continue;
          fail_input(w, ": filter '", id, "' is not supported (only vlen-utf8 for strings)");
        }
      }
      if (m.elem == Elem::vlen_string && !(j.contains("filters") && j["filters"].is_array() && !j["filters"].empty()))
        fail_input(w, ": object array without the vlen-utf8 filter (only UTF-8 string object arrays are supported)");
      const Json fv = j.value("fill_value", Json());
      m.fill_null = fv.is_null();
      if (m.elem == Elem::numeric) m.fill = parse_fill(fv, m, w);
      else m.fill_str = fv.is_string() ? fv.get<std::string>() : "";
      m.attrs = attrs(path);
    }
  } catch (const Json::exception& e) {
    fail_input(w, ": malformed array metadata (", e.what(), ")");
  }
  if (m.chunks.size() != m.shape.size())
    fail_input(w, ": chunk shape has ", m.chunks.size(), " dimensions but the array has ", m.shape.size());
  for (size_t i = 0; i < m.shape.size(); ++i) {
    if (m.shape[i] < 0) fail_input(w, ": negative shape");
    if (m.chunks[i] <= 0) fail_input(w, ": chunk sizes must be positive");
  }
  // Products of the shape and of the chunk shape (element counts, chunk bytes) are used as sizes:
  // each must stay far from int64's range (2^62 elements; a chunk of at most 2^31 bytes, blosc's limit
  // and far above any writer's).
  auto bounded_product = [&](const std::vector<int64_t>& v, int64_t limit, const char* what) {
    int64_t p = 1;
    for (int64_t x : v) {
      if (x != 0 && p > limit / x) fail_input(w, ": its ", what, " is too large (file corrupt?)");
      p *= x;
    }
    return p;
  };
  bounded_product(m.shape, int64_t(1) << 62, "shape");
  bounded_product(m.chunks, (int64_t(1) << 31) / std::max(m.itemsize, 1), "chunk shape");
  if (m.sharded) bounded_product(m.shard, int64_t(1) << 62, "shard shape");
  return m;
}

// ---- Array: reading --------------------------------------------------------------------------------

Array::Array(const Store& s, std::string path) : store_(&s), path_(std::move(path)), m_(s.array_meta(path_)) {}

DType Array::dtype() const {
  if (is_string()) fail_input(store_->where(path_), ": holds strings, expected numbers");
  return m_.dtype;
}

std::string Array::chunk_key(const std::vector<int64_t>& idx) const {
  std::string key;
  if (m_.v3_default_keys) {
    key = "c";
    for (auto i : idx) key += m_.sep + std::to_string(i);
  } else if (idx.empty()) {
    key = "0";
  } else {
    for (size_t d = 0; d < idx.size(); ++d) key += (d ? std::string(1, m_.sep) : "") + std::to_string(idx[d]);
  }
  return key;
}

std::string Array::chunk_file(const std::vector<int64_t>& idx) const {
  return (fs::path(store_->root()) / path_ / chunk_key(idx)).string();
}

void Array::fail_missing_chunk(const std::vector<int64_t>& idx) const {
  std::string key;
  if (m_.sharded) {
    std::vector<int64_t> shard_idx(idx.size());
    for (size_t d = 0; d < idx.size(); ++d) shard_idx[d] = idx[d] / (m_.shard[d] / m_.chunks[d]);
    key = chunk_key(shard_idx) + " (inner chunk ";
    for (size_t d = 0; d < idx.size(); ++d) key += (d ? "," : "") + std::to_string(idx[d]);
    key += ")";
  } else {
    key = chunk_key(idx);
  }
  fail_input(store_->where(path_), ": chunk ", key, " is missing",
             require_chunks_ ? " (every chunk of a sparse matrix's data, indices and indptr must be stored)"
                             : " and the array has no fill_value (null), so its contents are undefined");
}

std::optional<Bytes> Array::raw_chunk(const std::vector<int64_t>& idx) const {
  const std::string w = store_->where(path_);
  if (!m_.sharded) {
    std::error_code ec;
    const std::string f = chunk_file(idx);
    if (!fs::exists(f, ec)) return std::nullopt;
    auto b = read_file(f);
    if (!b) fail_input(w, ": cannot read chunk ", fs::path(f).filename().string());
    return b;
  }
  // The shard holding inner chunk idx, and the inner chunk's position in it (C order).
  const size_t r = idx.size();
  std::vector<int64_t> shard_idx(r);
  int64_t pos = 0, n_inner = 1;
  for (size_t d = 0; d < r; ++d) {
    const int64_t per = m_.shard[d] / m_.chunks[d];
    shard_idx[d] = idx[d] / per;
    pos = pos * per + idx[d] % per;
    n_inner *= per;
  }
  const std::string f = chunk_file(shard_idx);
  std::error_code ec;
  if (!fs::exists(f, ec)) return std::nullopt;
  const int64_t index_bytes = 16 * n_inner + (m_.index_crc ? 4 : 0);
  Bytes index = read_range(f, m_.index_at_end ? -index_bytes : 0, index_bytes, w);
  if (m_.index_crc) {
    Codec c;
    c.kind = Codec::Kind::crc32c;
    index = decode(c, index, 0, w + " shard index");
  }
  const uint64_t off = load<uint64_t>(index.data() + 16 * pos, false);
  const uint64_t n = load<uint64_t>(index.data() + 16 * pos + 8, false);
  if (off == std::numeric_limits<uint64_t>::max() && n == std::numeric_limits<uint64_t>::max()) return std::nullopt;
  if (off > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
      n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail_input(w, ": corrupt shard index in ", fs::path(f).filename().string());
  return read_range(f, static_cast<int64_t>(off), static_cast<int64_t>(n), w);
}

// Collects rows [begin, end) of the array: decode(idx, raw-or-null) returns one chunk's elements.
template <class E, class Decode>
std::vector<E> Array::gather(int64_t begin, int64_t end, int threads, const E& fill, Decode decode) const {
  const std::string w = store_->where(path_);
  const int r = rank();
  if (r == 0) {
    auto raw = raw_chunk({});
    if (!raw && (require_chunks_ || m_.fill_null)) fail_missing_chunk({});
    if (!raw) return {fill};
    return decode(std::vector<int64_t>{}, *raw, int64_t{1});
  }
  if (begin < 0 || end < begin || end > m_.shape[0])
    fail("zarr: rows [", begin, ", ", end, ") out of range for ", w);
  const int64_t row_elems = product(std::vector<int64_t>(m_.shape.begin() + 1, m_.shape.end()));
  if (end == begin || row_elems == 0) return std::vector<E>(static_cast<size_t>((end - begin) * row_elems), fill);
  // The chunks covering the rows: all chunks along the other axes.
  std::vector<int64_t> grid(r);
  for (int d = 0; d < r; ++d) grid[d] = (m_.shape[d] + m_.chunks[d] - 1) / m_.chunks[d];
  const int64_t c0 = begin / m_.chunks[0], c1 = (end - 1) / m_.chunks[0] + 1;
  int64_t per_row = 1;
  for (int d = 1; d < r; ++d) per_row *= grid[d];
  const int64_t n_chunks = (c1 - c0) * per_row;
  const int64_t chunk_elems = product(m_.chunks);
  const int64_t n_out = (end - begin) * row_elems;
  // Sizes claimed by the metadata are checked against what the store holds before the output is
  // allocated: a 200-byte .zarray saying shape [10^12] must not make the reader allocate terabytes.
  // A read of more than kCheckedReadBytes must be backed by the array's stored objects (chunk or
  // shard files, counted in one walk of its directory): at least half of it by their number times
  // the elements each stands for, and all of it by their bytes times kMaxDecodeRatio (no codec
  // scurry reads inflates more: zarr_codecs.cpp). An array that large and mostly fill_value is
  // refused (zarr allows it; no AnnData writer makes one).
  constexpr int64_t kCheckedReadBytes = int64_t(256) << 20;
  constexpr double kMaxDecodeRatio = 65536;
  if (n_out > kCheckedReadBytes / static_cast<int64_t>(sizeof(E))) {
    double files = 0, bytes = 0;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(fs::path(store_->root()) / path_, ec), e; !ec && it != e; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!it->is_regular_file(ec) || name == "zarr.json" || name[0] == '.') continue;
      files += 1;
      bytes += static_cast<double>(it->file_size(ec));
    }
    double per_object = 1;
    if (m_.sharded)
      for (int d = 0; d < r; ++d) per_object *= static_cast<double>(m_.shard[d] / m_.chunks[d]);
    const double backed = files * per_object * static_cast<double>(chunk_elems);
    const double item = std::max(1.0, static_cast<double>(m_.itemsize));
    if (2 * backed < static_cast<double>(n_out) || bytes * kMaxDecodeRatio < static_cast<double>(n_out) * item)
      fail_input(w, ": its metadata claims ", n_out, " elements for rows [", begin, ", ", end, ") but its ", files,
                 " stored chunks (", bytes, " bytes) cannot hold them (the store is damaged or truncated)");
  }
  std::vector<E> out(static_cast<size_t>(n_out), fill);
  parallel_for(threads, n_chunks, [&](int64_t t) {
    std::vector<int64_t> idx(r);
    int64_t rest = t;
    for (int d = r - 1; d >= 1; --d) {
      idx[d] = rest % grid[d];
      rest /= grid[d];
    }
    idx[0] = c0 + rest;
    auto raw = raw_chunk(idx);
    if (!raw && (require_chunks_ || m_.fill_null)) fail_missing_chunk(idx);
    if (!raw) return;  // fill value already in place
    const std::vector<E> vals = decode(idx, *raw, chunk_elems);
    // Copy the intersection, one contiguous run along the last axis at a time.
    std::vector<int64_t> lo(r), hi(r);
    for (int d = 0; d < r; ++d) {
      lo[d] = idx[d] * m_.chunks[d];
      hi[d] = std::min(lo[d] + m_.chunks[d], m_.shape[d]);
    }
    lo[0] = std::max(lo[0], begin);
    hi[0] = std::min(hi[0], end);
    std::vector<int64_t> pos(lo.begin(), lo.end() - 1);  // position over axes 0..r-2
    const int64_t run = hi[r - 1] - lo[r - 1];
    while (true) {
      int64_t src = 0, dst = 0;
      for (int d = 0; d < r - 1; ++d) {
        src = src * m_.chunks[d] + (pos[d] - idx[d] * m_.chunks[d]);
        dst = dst * (d == 0 ? 1 : m_.shape[d]) + (d == 0 ? pos[d] - begin : pos[d]);
      }
      src = src * m_.chunks[r - 1] + (lo[r - 1] - idx[r - 1] * m_.chunks[r - 1]);
      dst = dst * m_.shape[r - 1] + lo[r - 1] - (r == 1 ? begin : 0);
      std::copy(vals.begin() + src, vals.begin() + src + run, out.begin() + dst);
      int d = r - 2;
      for (; d >= 0; --d) {
        if (++pos[d] < hi[d]) break;
        pos[d] = lo[d];
      }
      if (d < 0) break;
    }
  });
  return out;
}

namespace {
std::string chunk_where(const std::string& w, const std::vector<int64_t>& idx) {
  std::string s = w + " chunk (";
  for (size_t i = 0; i < idx.size(); ++i) s += (i ? "," : "") + std::to_string(idx[i]);
  return s + ")";
}

Bytes decode_chain(const ArrayMeta& m, Bytes b, size_t expected, const std::string& where) {
  for (auto it = m.codecs.rbegin(); it != m.codecs.rend(); ++it)
    b = decode(*it, b, it + 1 == m.codecs.rend() ? expected : 0, where);
  return b;
}
}  // namespace

template <class T>
std::vector<T> Array::read_rows(int64_t begin, int64_t end, int threads, ArrayTap* tap) const {
  const std::string w = store_->where(path_);
  const DType dt = dtype();
  T fill{};
  if (std::isfinite(m_.fill) || std::is_floating_point_v<T>) fill = static_cast<T>(m_.fill);
  if (rank() == 1 && begin >= 0 && begin <= end && end <= m_.shape[0] && m_.chunks[0] > 0) {
    // 1-D (the CSR arrays, the columns): each chunk decoded on a thread and converted straight into
    // its place in the output, in chunk order, while this thread sizes the output a step ahead
    // (core/fill_ahead.hpp: the zero fill costs nothing beside the decoding; a missing chunk's
    // range is filled by its thread).
    std::vector<T> out;
    const size_t n = static_cast<size_t>(end - begin);
    if (n == 0) return out;
    const int64_t ch = m_.chunks[0];
    const int64_t c0 = begin / ch, c1 = (end - 1) / ch + 1;
    // Many chunk files: a thread asks the kernel to read them ahead, in order, while the decoding
    // threads work (one small read per file and thread keeps few requests in flight on a cold disk).
    std::atomic<bool> stop{false};
    std::thread ahead;
    if (!m_.sharded && c1 - c0 > 64)
      ahead = std::thread([&] {
        for (int64_t t = c0; t < c1 && !stop; ++t) {
          const int fd = ::open(chunk_file({t}).c_str(), O_RDONLY | O_CLOEXEC);
          if (fd < 0) continue;
          ::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
          ::close(fd);
        }
      });
    struct Join {
      std::atomic<bool>& stop;
      std::thread& t;
      ~Join() {
        stop = true;
        if (t.joinable()) t.join();
      }
    } join_ahead{stop, ahead};
    auto chunk_end = [&](int64_t t) { return static_cast<size_t>(std::min(end, (c0 + t + 1) * ch) - begin); };
    if (tap) tap->begin(n, sizeof(T));
    // Chunk t's elements [lo, hi) of the array, decoded into place.
    auto decode_chunk = [&](int64_t t, int64_t lo, int64_t hi) {
      const std::vector<int64_t> idx{c0 + t};
      auto raw = raw_chunk(idx);
      if (!raw && (require_chunks_ || m_.fill_null)) fail_missing_chunk(idx);
      if (!raw) {
        std::fill(out.data() + (lo - begin), out.data() + (hi - begin), fill);
        return;
      }
      const std::string cw = chunk_where(w, idx);
      const size_t want = static_cast<size_t>(ch) * static_cast<size_t>(m_.itemsize);
      // a whole chunk of T's own type under one codec: decoded straight into its place
      if (lo == idx[0] * ch && hi == lo + ch && m_.codecs.size() == 1 && dt == native_dtype<T>() &&
          !m_.big_endian && sizeof(T) == static_cast<size_t>(m_.itemsize) &&
          decode_into(m_.codecs[0], *raw, reinterpret_cast<uint8_t*>(out.data() + (lo - begin)), want, cw))
        return;
      const Bytes b = decode_chain(m_, *raw, want, cw);
      if (b.size() != want)
        fail_input(cw, ": decoded to ", b.size(), " bytes but the chunk shape needs ", want, " (wrong chunk size)");
      convert(b.data() + static_cast<size_t>(lo - idx[0] * ch) * static_cast<size_t>(m_.itemsize), dt, m_.big_endian,
              out.data() + (lo - begin), hi - lo, cw);
    };
    if (tap) tap->begin(n, sizeof(T));
    fill_ahead_for(out, n, std::max(threads, 1), c1 - c0, chunk_end, [&](int64_t t) {
      const int64_t lo = std::max(begin, (c0 + t) * ch), hi = std::min(end, (c0 + t + 1) * ch);
      decode_chunk(t, lo, hi);
      if (tap) tap->piece(out.data() + (lo - begin), static_cast<size_t>(lo - begin), static_cast<size_t>(hi - begin));
    });
    return out;
  }
  std::vector<T> out = gather<T>(begin, end, threads, fill, [&](const std::vector<int64_t>& idx, const Bytes& raw, int64_t n) {
    const std::string cw = chunk_where(w, idx);
    const size_t want = static_cast<size_t>(n) * static_cast<size_t>(m_.itemsize);
    Bytes b = decode_chain(m_, raw, want, cw);
    if (b.size() != want)
      fail_input(cw, ": decoded to ", b.size(), " bytes but the chunk shape needs ", want, " (wrong chunk size)");
    std::vector<T> v(static_cast<size_t>(n));
    convert(b.data(), dt, m_.big_endian, v.data(), n, cw);
    return v;
  });
  tap_whole(tap, out.data(), out.size(), sizeof(T));
  return out;
}

template <class T>
std::vector<T> Array::read_all(int threads, ArrayTap* tap) const {
  return read_rows<T>(0, rank() == 0 ? 0 : m_.shape[0], threads, tap);
}

std::vector<std::string> Array::read_strings(int threads) const {
  const std::string w = store_->where(path_);
  if (!is_string()) fail_input(w, ": holds numbers, expected strings");
  return gather<std::string>(0, rank() == 0 ? 0 : m_.shape[0], threads, m_.fill_str,
                             [&](const std::vector<int64_t>& idx, const Bytes& raw, int64_t n) {
                               const std::string cw = chunk_where(w, idx);
                               if (m_.elem == Elem::vlen_string)
                                 return decode_vlen_utf8(decode_chain(m_, raw, 0, cw), n, cw);
                               const size_t want = static_cast<size_t>(n) * static_cast<size_t>(m_.itemsize);
                               Bytes b = decode_chain(m_, raw, want, cw);
                               if (b.size() != want)
                                 fail_input(cw, ": decoded to ", b.size(), " bytes but the chunk shape needs ", want,
                                            " (wrong chunk size)");
                               std::vector<std::string> v(static_cast<size_t>(n));
                               for (int64_t i = 0; i < n; ++i) {
                                 const uint8_t* p = b.data() + i * m_.itemsize;
                                 if (m_.elem == Elem::fixed_unicode) {
                                   v[i] = utf32_to_utf8(p, m_.itemsize / 4, m_.big_endian);
                                 } else {
                                   size_t len = 0;
                                   while (len < static_cast<size_t>(m_.itemsize) && p[len] != 0) ++len;
                                   v[i].assign(reinterpret_cast<const char*>(p), len);
                                 }
                               }
                               return v;
                             });
}

RecArray Array::read_records(int threads) const {
  const std::string w = store_->where(path_);
  if (!m_.record.is_array()) fail_input(w, ": not a structured (record) array");
  if (rank() != 1) fail_input(w, ": record arrays must be 1-D");
  const std::vector<std::string> recs =
      gather<std::string>(0, m_.shape[0], threads, std::string(),
                          [&](const std::vector<int64_t>& idx, const Bytes& raw, int64_t n) {
                            const std::string cw = chunk_where(w, idx);
                            const size_t want = static_cast<size_t>(n) * static_cast<size_t>(m_.itemsize);
                            Bytes b = decode_chain(m_, raw, want, cw);
                            if (b.size() != want)
                              fail_input(cw, ": decoded to ", b.size(), " bytes but the chunk shape needs ", want,
                                         " (wrong chunk size)");
                            std::vector<std::string> v(static_cast<size_t>(n));
                            for (int64_t i = 0; i < n; ++i)
                              v[i].assign(reinterpret_cast<const char*>(b.data() + i * m_.itemsize), m_.itemsize);
                            return v;
                          });
  RecArray a;
  a.n = m_.shape[0];
  int off = 0;
  for (const auto& f : m_.record) {
    ArrayMeta fm;
    parse_v2_dtype(fm, f[1], w);
    RecField fl;
    fl.name = f[0].get<std::string>();
    for (const std::string& r : recs) {
      if (r.empty()) fail_input(w, ": a chunk of the record array is missing");
      const uint8_t* p = reinterpret_cast<const uint8_t*>(r.data()) + off;
      if (fm.elem == Elem::fixed_unicode) {
        fl.str.push_back(utf32_to_utf8(p, fm.itemsize / 4, fm.big_endian));
      } else if (fm.elem == Elem::fixed_bytes) {
        size_t len = 0;
        while (len < static_cast<size_t>(fm.itemsize) && p[len] != 0) ++len;
        fl.str.emplace_back(reinterpret_cast<const char*>(p), len);
      } else {
        uint8_t buf[8];
        std::memcpy(buf, p, static_cast<size_t>(fm.itemsize));
        if (fm.big_endian) std::reverse(buf, buf + fm.itemsize);
        double v = 0;
        switch (fm.dtype) {
          case DType::f32: { float x; std::memcpy(&x, buf, 4); v = x; break; }
          case DType::f64: std::memcpy(&v, buf, 8); break;
          case DType::i8: v = static_cast<int8_t>(buf[0]); break;
          case DType::u8: case DType::boolean: v = buf[0]; break;
          case DType::i16: { int16_t x; std::memcpy(&x, buf, 2); v = x; break; }
          case DType::u16: { uint16_t x; std::memcpy(&x, buf, 2); v = x; break; }
          case DType::i32: { int32_t x; std::memcpy(&x, buf, 4); v = x; break; }
          case DType::u32: { uint32_t x; std::memcpy(&x, buf, 4); v = x; break; }
          case DType::i64: { int64_t x; std::memcpy(&x, buf, 8); v = static_cast<double>(x); break; }
          case DType::u64: { uint64_t x; std::memcpy(&x, buf, 8); v = static_cast<double>(x); break; }
        }
        fl.num.push_back(v);
      }
    }
    fl.is_string = fm.elem != Elem::numeric;
    fl.dtype = fl.is_string ? DType::f64 : fm.dtype;
    off += fm.itemsize;
    a.fields.push_back(std::move(fl));
  }
  return a;
}

template std::vector<float> Array::read_rows<float>(int64_t, int64_t, int, ArrayTap*) const;
template std::vector<double> Array::read_rows<double>(int64_t, int64_t, int, ArrayTap*) const;
template std::vector<int32_t> Array::read_rows<int32_t>(int64_t, int64_t, int, ArrayTap*) const;
template std::vector<int64_t> Array::read_rows<int64_t>(int64_t, int64_t, int, ArrayTap*) const;
template std::vector<uint8_t> Array::read_rows<uint8_t>(int64_t, int64_t, int, ArrayTap*) const;
template std::vector<float> Array::read_all<float>(int, ArrayTap*) const;
template std::vector<double> Array::read_all<double>(int, ArrayTap*) const;
template std::vector<int32_t> Array::read_all<int32_t>(int, ArrayTap*) const;
template std::vector<int64_t> Array::read_all<int64_t>(int, ArrayTap*) const;
template std::vector<uint8_t> Array::read_all<uint8_t>(int, ArrayTap*) const;

// ---- writing -------------------------------------------------------------------------------------

namespace {

Json v2_compressor_json(const ArrayWriteSpec& s, int itemsize) {
  const int lvl = s.level;
  switch (s.codec) {
    case CodecChoice::blosc_lz4:
      return {{"id", "blosc"}, {"cname", "lz4"}, {"clevel", lvl < 0 ? 5 : lvl}, {"shuffle", 1}, {"blocksize", 0}};
    case CodecChoice::blosc_zstd:
      return {{"id", "blosc"}, {"cname", "zstd"}, {"clevel", lvl < 0 ? 5 : lvl}, {"shuffle", 1}, {"blocksize", 0}};
    case CodecChoice::zstd: return {{"id", "zstd"}, {"level", lvl < 0 ? 0 : lvl}};
    case CodecChoice::gzip: return {{"id", "gzip"}, {"level", lvl < 0 ? 5 : lvl}};
    case CodecChoice::none: return nullptr;
  }
  (void)itemsize;
  return nullptr;
}

Json v3_compressor_json(const ArrayWriteSpec& s, int itemsize) {
  const int lvl = s.level;
  switch (s.codec) {
    case CodecChoice::blosc_lz4:
    case CodecChoice::blosc_zstd:
      return {{"name", "blosc"},
              {"configuration",
               {{"cname", s.codec == CodecChoice::blosc_zstd ? "zstd" : "lz4"}, {"clevel", lvl < 0 ? 5 : lvl},
                {"shuffle", itemsize > 1 ? "shuffle" : "noshuffle"}, {"typesize", itemsize}, {"blocksize", 0}}}};
    case CodecChoice::zstd: return {{"name", "zstd"}, {"configuration", {{"level", lvl < 0 ? 0 : lvl}, {"checksum", false}}}};
    case CodecChoice::gzip: return {{"name", "gzip"}, {"configuration", {{"level", lvl < 0 ? 5 : lvl}}}};
    case CodecChoice::none: return nullptr;
  }
  return nullptr;
}

std::optional<Codec> codec_of(const ArrayWriteSpec& s, int itemsize) {
  if (s.codec == CodecChoice::none) return std::nullopt;
  Codec c;
  if (s.codec == CodecChoice::blosc_lz4 || s.codec == CodecChoice::blosc_zstd) {
    c.kind = Codec::Kind::blosc;
    c.cname = s.codec == CodecChoice::blosc_zstd ? "zstd" : "lz4";
    c.level = s.level < 0 ? 5 : s.level;
    c.shuffle = (s.format == 3 && itemsize == 1) ? 0 : 1;
    c.typesize = std::max(itemsize, 1);
  } else if (s.codec == CodecChoice::zstd) {
    c.kind = Codec::Kind::zstd;
    c.level = s.level < 0 ? 0 : s.level;
  } else {
    c.kind = Codec::Kind::gzip;
    c.level = s.level < 0 ? 5 : s.level;
  }
  return c;
}

std::vector<int64_t> chunk_shape(const std::vector<int64_t>& shape, const ArrayWriteSpec& s) {
  if (shape.empty()) return {};
  std::vector<int64_t> c = shape;
  for (auto& x : c) x = std::max<int64_t>(x, 1);
  int64_t inner = 1;
  for (size_t d = 1; d < shape.size(); ++d) inner *= c[d];
  int64_t rows;
  if (shape.size() == 1) rows = s.chunk_elems > 0 ? s.chunk_elems : kAutoChunkElems;
  else rows = s.chunk_rows > 0 ? s.chunk_rows : std::max<int64_t>(1, kAutoChunkElems / inner);
  c[0] = std::max<int64_t>(1, std::min(c[0], rows));
  return c;
}

void write_meta(const std::string& dir, const std::vector<int64_t>& shape, const std::vector<int64_t>& chunks,
                const Json& dtype, const Json& fill, const Json& filters, int itemsize, bool vlen, const Json& attrs,
                const ArrayWriteSpec& s) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail_write(dir, ec.value(), "cannot create directory", true);
  if (s.format == 3) {
    Json codecs = Json::array();
    if (vlen) codecs.push_back({{"name", "vlen-utf8"}, {"configuration", Json::object()}});
    else if (itemsize > 1) codecs.push_back({{"name", "bytes"}, {"configuration", {{"endian", "little"}}}});
    else codecs.push_back({{"name", "bytes"}, {"configuration", Json::object()}});
    Json c = v3_compressor_json(s, itemsize);
    if (!c.is_null()) codecs.push_back(c);
    Json j = {{"zarr_format", 3},
              {"node_type", "array"},
              {"shape", shape},
              {"data_type", dtype},
              {"chunk_grid", {{"name", "regular"}, {"configuration", {{"chunk_shape", chunks}}}}},
              {"chunk_key_encoding", {{"name", "default"}, {"configuration", {{"separator", "/"}}}}},
              {"fill_value", fill},
              {"codecs", codecs},
              {"attributes", attrs.is_null() ? Json::object() : attrs},
              {"storage_transformers", Json::array()}};
    write_json(fs::path(dir) / "zarr.json", j);
    return;
  }
  Json j = {{"zarr_format", 2}, {"shape", shape},    {"chunks", chunks},   {"dtype", dtype},
            {"fill_value", fill}, {"order", "C"}, {"filters", filters}, {"compressor", v2_compressor_json(s, itemsize)}};
  write_json(fs::path(dir) / ".zarray", j);
  if (!attrs.is_null() && !attrs.empty()) write_json(fs::path(dir) / ".zattrs", attrs);
}

std::string write_key(const std::vector<int64_t>& idx, int format) {
  if (format == 3) {
    std::string k = "c";
    for (auto i : idx) k += "/" + std::to_string(i);
    return k;
  }
  if (idx.empty()) return "0";
  std::string k;
  for (size_t d = 0; d < idx.size(); ++d) k += (d ? "." : "") + std::to_string(idx[d]);
  return k;
}

// Calls fill(chunk_index, lo, hi, buffer_elements) for every chunk and writes the encoded bytes.
// `encode_chunk(idx, lo, hi)` returns the raw (uncompressed) bytes of the full-size chunk.
template <class Encode>
void write_chunks(const std::string& dir, const std::vector<int64_t>& shape, const std::vector<int64_t>& chunks,
                  const std::optional<Codec>& codec, const ArrayWriteSpec& s, Encode encode_chunk) {
  const size_t r = shape.size();
  std::vector<int64_t> grid(r);
  int64_t n = 1;
  for (size_t d = 0; d < r; ++d) {
    grid[d] = (shape[d] + chunks[d] - 1) / chunks[d];
    n *= grid[d];
  }
  parallel_for(std::max(s.threads, 1), n, [&](int64_t t) {
    std::vector<int64_t> idx(r);
    int64_t rest = t;
    for (size_t d = r; d-- > 0;) {
      idx[d] = rest % grid[d];
      rest /= grid[d];
    }
    Bytes raw = encode_chunk(idx);
    if (codec) raw = encode(*codec, raw);
    const fs::path p = fs::path(dir) / write_key(idx, s.format);
    if (s.format == 3) {
      std::error_code ec;
      fs::create_directories(p.parent_path(), ec);
    }
    write_file(p, raw.data(), raw.size());
  });
}

// Element offsets (into the C-order source) of chunk idx, padded positions = -1.
template <class F>
void for_chunk_elems(const std::vector<int64_t>& shape, const std::vector<int64_t>& chunks,
                     const std::vector<int64_t>& idx, F f) {
  const size_t r = shape.size();
  if (r == 0) {
    f(0, 0);
    return;
  }
  const int64_t n = product(chunks);
  std::vector<int64_t> pos(r, 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t src = 0;
    bool inside = true;
    for (size_t d = 0; d < r; ++d) {
      const int64_t g = idx[d] * chunks[d] + pos[d];
      inside = inside && g < shape[d];
      src = src * shape[d] + g;
    }
    f(e, inside ? src : -1);
    for (size_t d = r; d-- > 0;) {
      if (++pos[d] < chunks[d]) break;
      pos[d] = 0;
    }
  }
}

template <class D, class T>
void store_as(uint8_t* dst, T v) {
  const D x = static_cast<D>(v);
  std::memcpy(dst, &x, sizeof(D));
}

template <class T>
void put(uint8_t* dst, DType dt, T v) {
  switch (dt) {
    case DType::f32: store_as<float>(dst, v); break;
    case DType::f64: store_as<double>(dst, v); break;
    case DType::i8: store_as<int8_t>(dst, v); break;
    case DType::i16: store_as<int16_t>(dst, v); break;
    case DType::i32: store_as<int32_t>(dst, v); break;
    case DType::i64: store_as<int64_t>(dst, v); break;
    case DType::u8: store_as<uint8_t>(dst, v); break;
    case DType::u16: store_as<uint16_t>(dst, v); break;
    case DType::u32: store_as<uint32_t>(dst, v); break;
    case DType::u64: store_as<uint64_t>(dst, v); break;
    case DType::boolean: *dst = v != T(0) ? 1 : 0; break;
  }
}

}  // namespace

void write_group(const std::string& dir, int format, const Json& attrs) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail_write(dir, ec.value(), "cannot create directory", true);
  const Json a = attrs.is_null() ? Json::object() : attrs;
  if (format == 3) {
    write_json(fs::path(dir) / "zarr.json", {{"zarr_format", 3}, {"node_type", "group"}, {"attributes", a}});
    return;
  }
  write_json(fs::path(dir) / ".zgroup", {{"zarr_format", 2}});
  if (!a.empty()) write_json(fs::path(dir) / ".zattrs", a);
}

template <class T>
void write_numeric(const std::string& dir, const std::vector<int64_t>& shape, const T* values, DType dtype,
                   const Json& attrs, const ArrayWriteSpec& s) {
  const auto chunks = chunk_shape(shape, s);
  const int isz = dtype_size(dtype);
  Json fill = dtype == DType::boolean ? Json(false) : is_float(dtype) ? Json(0.0) : Json(0);
  write_meta(dir, shape, chunks, s.format == 3 ? Json(v3_dtype_string(dtype)) : Json(v2_dtype_string(dtype)), fill,
             nullptr, isz, false, attrs, s);
  write_chunks(dir, shape, chunks, codec_of(s, isz), s, [&](const std::vector<int64_t>& idx) {
    Bytes b(static_cast<size_t>(product(chunks)) * isz, 0);
    for_chunk_elems(shape, chunks, idx, [&](int64_t e, int64_t src) {
      if (src >= 0) put(b.data() + e * isz, dtype, values[src]);
    });
    return b;
  });
}

template void write_numeric<float>(const std::string&, const std::vector<int64_t>&, const float*, DType, const Json&,
                                   const ArrayWriteSpec&);
template void write_numeric<double>(const std::string&, const std::vector<int64_t>&, const double*, DType, const Json&,
                                    const ArrayWriteSpec&);
template void write_numeric<int32_t>(const std::string&, const std::vector<int64_t>&, const int32_t*, DType,
                                     const Json&, const ArrayWriteSpec&);
template void write_numeric<int64_t>(const std::string&, const std::vector<int64_t>&, const int64_t*, DType,
                                     const Json&, const ArrayWriteSpec&);
template void write_numeric<uint8_t>(const std::string&, const std::vector<int64_t>&, const uint8_t*, DType,
                                     const Json&, const ArrayWriteSpec&);

void write_strings(const std::string& dir, const std::vector<int64_t>& shape, const std::string* values,
                   const Json& attrs, const ArrayWriteSpec& s) {
  const auto chunks = chunk_shape(shape, s);
  if (s.format == 3)
    write_meta(dir, shape, chunks, "string", "", nullptr, 1, true, attrs, s);
  else
    write_meta(dir, shape, chunks, "|O", nullptr, Json::array({{{"id", "vlen-utf8"}}}), 1, true, attrs, s);
  write_chunks(dir, shape, chunks, codec_of(s, 1), s, [&](const std::vector<int64_t>& idx) {
    std::vector<std::string> items(static_cast<size_t>(product(chunks)));
    for_chunk_elems(shape, chunks, idx, [&](int64_t e, int64_t src) {
      if (src >= 0) items[e] = values[src];
    });
    return encode_vlen_utf8(items.data(), static_cast<int64_t>(items.size()));
  });
}

void write_records(const std::string& dir, const RecArray& a, const Json& attrs, const ArrayWriteSpec& s) {
  if (s.format == 3)
    fail_input(dir, ": zarr format 3 has no structured (record) arrays; write zarr format 2 or an .h5ad");
  if (a.fields.empty()) fail_input(dir, ": a record array needs at least one field");
  Json dt = Json::array();
  std::vector<int> width(a.fields.size()), off(a.fields.size());
  std::vector<std::vector<std::vector<uint32_t>>> cps(a.fields.size());
  int isz = 0;
  for (size_t f = 0; f < a.fields.size(); ++f) {
    const RecField& fl = a.fields[f];
    if ((fl.is_string ? fl.str.size() : fl.num.size()) != static_cast<size_t>(a.n))
      fail_input(dir, ": record field '", fl.name, "' does not hold ", a.n, " values");
    off[f] = isz;
    if (fl.is_string) {
      size_t n = 1;
      for (const auto& x : fl.str) {
        cps[f].push_back(utf8_to_utf32(x));
        n = std::max(n, cps[f].back().size());
      }
      width[f] = static_cast<int>(4 * n);
      dt.push_back({fl.name, "<U" + std::to_string(n)});
    } else {
      width[f] = dtype_size(fl.dtype);
      dt.push_back({fl.name, v2_dtype_string(fl.dtype)});
    }
    isz += width[f];
  }
  const std::vector<int64_t> shape{a.n};
  const auto chunks = chunk_shape(shape, s);
  write_meta(dir, shape, chunks, dt, nullptr, nullptr, isz, false, attrs, s);
  write_chunks(dir, shape, chunks, codec_of(s, isz), s, [&](const std::vector<int64_t>& idx) {
    Bytes b(static_cast<size_t>(product(chunks)) * isz, 0);
    for_chunk_elems(shape, chunks, idx, [&](int64_t e, int64_t src) {
      if (src < 0) return;
      for (size_t f = 0; f < a.fields.size(); ++f) {
        uint8_t* dst = b.data() + e * isz + off[f];
        if (a.fields[f].is_string) {
          const auto& c = cps[f][src];
          for (size_t i = 0; i < c.size(); ++i) std::memcpy(dst + 4 * i, &c[i], 4);
        } else {
          put(dst, a.fields[f].dtype, a.fields[f].num[src]);
        }
      }
    });
    return b;
  });
}

void write_string_scalar(const std::string& dir, const std::string& value, const Json& attrs,
                         const ArrayWriteSpec& s) {
  if (s.format == 3) {
    write_strings(dir, {}, &value, attrs, s);
    return;
  }
  const std::vector<uint32_t> cps = utf8_to_utf32(value);
  const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(cps.size()));
  ArrayWriteSpec plain = s;
  plain.codec = CodecChoice::none;  // as anndata: scalars are not compressed
  write_meta(dir, {}, {}, "<U" + std::to_string(n), "", nullptr, static_cast<int>(4 * n), false, attrs, plain);
  Bytes b(static_cast<size_t>(4 * n), 0);
  for (size_t i = 0; i < cps.size(); ++i) std::memcpy(b.data() + 4 * i, &cps[i], 4);
  write_file(fs::path(dir) / "0", b.data(), b.size());
}

}  // namespace scurry::zarr
