#include "io/zarr_codecs.hpp"

#include <blosc.h>
#include <zlib.h>
#include <zstd.h>

#include <array>
#include <cstring>
#include <limits>
#include <memory>

#include "core/error.hpp"

namespace scurry::zarr {

namespace {

// Bounds on what a compressed chunk may claim to decode to, checked before the output is allocated
// (a 30-byte chunk must not make the reader allocate gigabytes): exactly the chunk's bytes when the
// caller knows them (`expected`), else at most kMaxRatio x the compressed size. deflate's ratio
// cannot pass 1032:1 (zlib's technical notes: a 258-byte match costs at least 2 bits); zstd's and
// blosc's (whose inner codecs include zstd) cannot pass ~32768:1 (a 3-byte RLE block header stands
// for at most 128 KiB); 65536 leaves room for the frame overheads of tiny inputs.
constexpr size_t kMaxRatioDeflate = 1032;
constexpr size_t kMaxRatio = 65536;
constexpr size_t kSlackBytes = size_t(1) << 16;
size_t decoded_limit(size_t in_size, size_t expected, size_t ratio) {
  return expected ? expected : in_size * ratio + kSlackBytes;
}
// claim: the size a header states, or (streams without one) the bytes decoded so far + 1, "at least".
[[noreturn]] void fail_claim(const std::string& where, const char* codec, unsigned long long claim, size_t in_size,
                             size_t expected, bool at_least = false) {
  if (expected)
    fail_input(where, "corrupt ", codec, " data (it decodes to ", at_least ? "at least " : "", claim,
               " bytes, the chunk holds ", expected, ": wrong chunk size); the store is damaged, rewrite it");
  fail_input(where, "corrupt ", codec, " data (", in_size, " compressed bytes ", at_least ? "decode to at least " : "claim to decode to ", claim,
             "); the store is damaged, rewrite it");
}

Bytes blosc_decode(const Bytes& in, size_t expected, const std::string& where) {
  size_t nbytes = 0;
  if (in.size() < BLOSC_MIN_HEADER_LENGTH || blosc_cbuffer_validate(in.data(), in.size(), &nbytes) != 0)
    fail_input(where, "corrupt blosc data (invalid header); the store is damaged, rewrite it");
  if (expected ? nbytes != expected : nbytes > decoded_limit(in.size(), 0, kMaxRatio))
    fail_claim(where, "blosc", nbytes, in.size(), expected);
  Bytes out(nbytes);
  if (nbytes == 0) return out;
  const int r = blosc_decompress_ctx(in.data(), out.data(), out.size(), 1);
  if (r <= 0 || static_cast<size_t>(r) != nbytes)
    fail_input(where, "corrupt blosc data (decompression failed); the store is damaged, rewrite it");
  return out;
}

Bytes blosc_encode(const Codec& c, const Bytes& in) {
  if (in.size() > static_cast<size_t>(BLOSC_MAX_BUFFERSIZE))
    fail("blosc: chunk of ", in.size(), " bytes is too large (use smaller chunks)");
  Bytes out(in.size() + BLOSC_MAX_OVERHEAD);
  const int r = blosc_compress_ctx(c.level, c.shuffle, static_cast<size_t>(std::max(c.typesize, 1)), in.size(),
                                   in.data(), out.data(), out.size(), c.cname.c_str(), 0, 1);
  if (r <= 0) fail("blosc: compression with '", c.cname, "' failed (code ", r, ")");
  out.resize(static_cast<size_t>(r));
  return out;
}

Bytes zstd_decode(const Bytes& in, size_t expected, const std::string& where) {
  const unsigned long long known = ZSTD_getFrameContentSize(in.data(), in.size());
  if (known == ZSTD_CONTENTSIZE_ERROR) fail_input(where, "corrupt zstd data (not a zstd frame); rewrite the store");
  if (known != ZSTD_CONTENTSIZE_UNKNOWN) {
    if (expected ? known != expected : known > decoded_limit(in.size(), 0, kMaxRatio))
      fail_claim(where, "zstd", known, in.size(), expected);
    Bytes out(static_cast<size_t>(known));
    const size_t r = ZSTD_decompress(out.data(), out.size(), in.data(), in.size());
    if (ZSTD_isError(r) || r != out.size())
      fail_input(where, "corrupt zstd data (", ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short frame",
                 "); rewrite the store");
    return out;
  }
  // Streaming: the content size is not in the frame header.
  ZSTD_DStream* ds = ZSTD_createDStream();
  struct FreeDs {
    ZSTD_DStream* d;
    ~FreeDs() { ZSTD_freeDStream(d); }
  } free_ds{ds};
  Bytes out(expected ? expected : std::max<size_t>(in.size() * 4, 1024));
  ZSTD_inBuffer ib{in.data(), in.size(), 0};
  ZSTD_outBuffer ob{out.data(), out.size(), 0};
  size_t r = 0;
  while (true) {
    r = ZSTD_decompressStream(ds, &ob, &ib);
    if (ZSTD_isError(r)) break;
    if (r == 0 && ib.pos == ib.size) break;
    if (ob.pos == ob.size) {
      const size_t limit = decoded_limit(in.size(), expected, kMaxRatio);
      if (out.size() >= limit) fail_claim(where, "zstd", out.size() + 1, in.size(), expected, true);
      out.resize(std::min(out.size() * 2, limit));
      ob.dst = out.data();
      ob.size = out.size();
    } else if (ib.pos == ib.size) {
      r = 1;  // truncated input
      break;
    }
  }
  if (ZSTD_isError(r) || r != 0)
    fail_input(where, "corrupt zstd data (", ZSTD_isError(r) ? ZSTD_getErrorName(r) : "truncated frame",
               "); rewrite the store");
  out.resize(ob.pos);
  return out;
}

Bytes zstd_encode(const Codec& c, const Bytes& in) {
  ZSTD_CCtx* cc = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, c.level);
  ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, c.checksum ? 1 : 0);
  Bytes out(ZSTD_compressBound(in.size()));
  const size_t r = ZSTD_compress2(cc, out.data(), out.size(), in.data(), in.size());
  ZSTD_freeCCtx(cc);
  if (ZSTD_isError(r)) fail("zstd: compression failed: ", ZSTD_getErrorName(r));
  out.resize(r);
  return out;
}

// gzip or zlib streams (windowBits 15+32 detects either header).
Bytes inflate_any(const Bytes& in, size_t expected, const std::string& where) {
  z_stream s{};
  if (inflateInit2(&s, 15 + 32) != Z_OK) fail("zlib: inflateInit2 failed");
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&s};
  Bytes out(expected ? expected : std::max<size_t>(in.size() * 4, 1024));
  s.next_in = const_cast<Bytef*>(in.data());
  s.avail_in = static_cast<uInt>(in.size());
  size_t have = 0;
  int r = Z_OK;
  while (true) {
    if (have == out.size()) {
      const size_t limit = decoded_limit(in.size(), expected, kMaxRatioDeflate);
      if (out.size() >= limit) fail_claim(where, "gzip/zlib", out.size() + 1, in.size(), expected, true);
      out.resize(std::min(out.size() * 2, limit));
    }
    s.next_out = out.data() + have;
    s.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - have, std::numeric_limits<uInt>::max()));
    const uInt before = s.avail_out;
    r = inflate(&s, Z_NO_FLUSH);
    have += before - s.avail_out;
    if (r == Z_STREAM_END) break;
    if (r != Z_OK && r != Z_BUF_ERROR) break;
    if (r == Z_BUF_ERROR && s.avail_in == 0) break;  // truncated
  }
  if (r != Z_STREAM_END)
    fail_input(where, "corrupt gzip/zlib data (", s.msg ? s.msg : "truncated stream", "); rewrite the store");
  out.resize(have);
  return out;
}

Bytes deflate_as(const Bytes& in, int level, bool gzip) {
  z_stream s{};
  if (deflateInit2(&s, level, Z_DEFLATED, gzip ? 15 + 16 : 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    fail("zlib: deflateInit2 failed");
  Bytes out(deflateBound(&s, static_cast<uLong>(in.size())) + 32);
  s.next_in = const_cast<Bytef*>(in.data());
  s.avail_in = static_cast<uInt>(in.size());
  s.next_out = out.data();
  s.avail_out = static_cast<uInt>(out.size());
  const int r = deflate(&s, Z_FINISH);
  const size_t n = out.size() - s.avail_out;
  deflateEnd(&s);
  if (r != Z_STREAM_END) fail("zlib: deflate failed");
  out.resize(n);
  return out;
}

std::array<uint32_t, 256> crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}
void put_le32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

uint32_t crc32c(const uint8_t* p, size_t n) {
  static const std::array<uint32_t, 256> t = crc_table();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = t[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

Bytes decode(const Codec& c, const Bytes& in, size_t expected, const std::string& where) {
  switch (c.kind) {
    case Codec::Kind::blosc: return blosc_decode(in, expected, where);
    case Codec::Kind::zstd: return zstd_decode(in, expected, where);
    case Codec::Kind::gzip:
    case Codec::Kind::zlib: return inflate_any(in, expected, where);
    case Codec::Kind::crc32c: {
      if (in.size() < 4) fail_input(where, "chunk too short for its crc32c checksum; rewrite the store");
      const size_t n = in.size() - 4;
      if (crc32c(in.data(), n) != le32(in.data() + n))
        fail_input(where, "crc32c checksum mismatch (corrupt chunk); rewrite the store");
      return Bytes(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n));
    }
  }
  fail("zarr: unknown codec");
}

bool decode_into(const Codec& c, const Bytes& in, uint8_t* dst, size_t n, const std::string& where) {
  if (c.kind == Codec::Kind::zstd) {
    if (ZSTD_getFrameContentSize(in.data(), in.size()) != n || n == 0) return false;
    // one decompression context per thread, kept (ZSTD_decompress would make one per chunk)
    thread_local std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
    const size_t r = ZSTD_decompressDCtx(dctx.get(), dst, n, in.data(), in.size());
    if (ZSTD_isError(r) || r != n)
      fail_input(where, "corrupt zstd data (", ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short frame",
                 "); rewrite the store");
    return true;
  }
  if (c.kind == Codec::Kind::blosc) {
    size_t nbytes = 0;
    if (in.size() < BLOSC_MIN_HEADER_LENGTH || blosc_cbuffer_validate(in.data(), in.size(), &nbytes) != 0 ||
        nbytes != n || n == 0)
      return false;
    const int r = blosc_decompress_ctx(in.data(), dst, n, 1);
    if (r <= 0 || static_cast<size_t>(r) != n)
      fail_input(where, "corrupt blosc data (decompression failed); the store is damaged, rewrite it");
    return true;
  }
  return false;
}

Bytes encode(const Codec& c, const Bytes& in) {
  switch (c.kind) {
    case Codec::Kind::blosc: return blosc_encode(c, in);
    case Codec::Kind::zstd: return zstd_encode(c, in);
    case Codec::Kind::gzip: return deflate_as(in, c.level, true);
    case Codec::Kind::zlib: return deflate_as(in, c.level, false);
    case Codec::Kind::crc32c: {
      Bytes out = in;
      put_le32(out, crc32c(in.data(), in.size()));
      return out;
    }
  }
  fail("zarr: unknown codec");
}

std::vector<std::string> decode_vlen_utf8(const Bytes& in, int64_t count, const std::string& where) {
  if (in.size() < 4) fail_input(where, "vlen-utf8 chunk shorter than its 4-byte header");
  const int64_t n = le32(in.data());
  if (n != count)
    fail_input(where, "vlen-utf8 chunk holds ", n, " strings but the chunk shape needs ", count,
               " (wrong chunk size)");
  std::vector<std::string> out(static_cast<size_t>(n));
  size_t pos = 4;
  for (int64_t i = 0; i < n; ++i) {
    if (pos + 4 > in.size()) fail_input(where, "vlen-utf8 chunk is truncated at item ", i);
    const size_t len = le32(in.data() + pos);
    pos += 4;
    if (len > in.size() - pos) fail_input(where, "vlen-utf8 chunk is truncated at item ", i);
    out[i].assign(reinterpret_cast<const char*>(in.data() + pos), len);
    pos += len;
  }
  return out;
}

Bytes encode_vlen_utf8(const std::string* items, int64_t count) {
  size_t total = 4;
  for (int64_t i = 0; i < count; ++i) total += 4 + items[i].size();
  Bytes out;
  out.reserve(total);
  put_le32(out, static_cast<uint32_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    put_le32(out, static_cast<uint32_t>(items[i].size()));
    out.insert(out.end(), items[i].begin(), items[i].end());
  }
  return out;
}

}  // namespace scurry::zarr
