// scurry: the byte codecs of zarr stores (v2 compressors, v3 bytes->bytes codecs): blosc (lz4, zstd,
// blosclz, zlib inside blosc; shuffle/bitshuffle), zstd, gzip, zlib, crc32c; and vlen-utf8, the
// encoding of variable-length strings (numcodecs VLenUTF8, zarr v3 `vlen-utf8`). Every decoding
// failure throws InputError "<where>: ..." (where = "STORE: ARRAY chunk KEY").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace scurry::zarr {

using Bytes = std::vector<uint8_t>;

struct Codec {
  enum class Kind { blosc, zstd, gzip, zlib, crc32c };
  Kind kind = Kind::zstd;
  int level = 0;              // blosc clevel, zstd level, gzip/zlib level
  std::string cname = "lz4";  // blosc inner compressor
  int shuffle = 1;            // blosc: 0 none, 1 byte shuffle, 2 bit shuffle
  int typesize = 1;           // blosc: element size for shuffling
  bool checksum = false;      // zstd: frame checksum
};

// Decodes `in` (one codec). `expected` is the decoded size when known (0 = unknown).
Bytes decode(const Codec& c, const Bytes& in, size_t expected, const std::string& where);
Bytes encode(const Codec& c, const Bytes& in);
// Decodes `in` straight into dst when the codec (blosc, zstd with the size in its frame) states a
// decoded size of exactly n bytes; returns false, dst untouched, where it cannot (another codec, or
// another size: the caller decodes with decode(), which reports the problem).
bool decode_into(const Codec& c, const Bytes& in, uint8_t* dst, size_t n, const std::string& where);

// vlen-utf8: u32le count, then per item u32le byte length and the UTF-8 bytes.
std::vector<std::string> decode_vlen_utf8(const Bytes& in, int64_t count, const std::string& where);
Bytes encode_vlen_utf8(const std::string* items, int64_t count);

uint32_t crc32c(const uint8_t* p, size_t n);

}  // namespace scurry::zarr
