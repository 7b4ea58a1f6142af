// scurry: variable-length strings without libhdf5's vlen conversion. See io/hdf5_vlen.hpp.
#include "io/hdf5_vlen.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_map>

#include "core/error.hpp"
#include "io/hdf5.hpp"

namespace scurry::h5::detail {
namespace {

uint64_t le_uint(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

// The file's bytes, read with pread, and the geometry of its superblock.
class RawFile {
 public:
  RawFile(hid_t obj, const std::string& file, const std::string& what) : file_(file), what_(what) {
    Id fid(H5Iget_file_id(obj));
    if (!fid.valid()) return;
    Id fcpl(H5Fget_create_plist(fid.get()));
    hsize_t fsize = 0;
    unsigned sohm_indexes = 0;
    if (!fcpl.valid() || H5Pget_sizes(fcpl.get(), &sa_, &ss_) < 0 || H5Pget_userblock(fcpl.get(), &userblock_) < 0 ||
        H5Fget_filesize(fid.get(), &fsize) < 0 || H5Pget_shared_mesg_nindexes(fcpl.get(), &sohm_indexes) < 0)
      return;
    sohm_ = sohm_indexes > 0;
    if (H5Pget_sym_k(fcpl.get(), &sym_ik_, &sym_lk_) < 0) return;
    fsize_ = fsize;
    if ((sa_ != 2 && sa_ != 4 && sa_ != 8) || (ss_ != 2 && ss_ != 4 && ss_ != 8)) return;
    fd_ = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  }
  // Before H5Fopen: the sizes as the superblock states them (check_root_header).
  RawFile(int fd, const std::string& file, const std::string& what, size_t sa, size_t ss, uint64_t userblock,
          uint64_t fsize)
      : file_(file), what_(what), sa_(sa), ss_(ss), userblock_(userblock), fsize_(fsize) {
    fd_ = ::dup(fd);
  }
  ~RawFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;

  bool ok() const { return fd_ >= 0; }
  size_t sizeof_addr() const { return sa_; }
  size_t sizeof_size() const { return ss_; }
  uint64_t userblock() const { return userblock_; }
  uint64_t size() const { return fsize_; }
  bool has_shared_messages() const { return sohm_; }  // a shared-message table (h5py never writes one)
  // The superblock's group B-tree K (internal nodes) and symbol table node K (leaves).
  unsigned group_internal_k() const { return sym_ik_; }
  unsigned group_leaf_k() const { return sym_lk_; }

  // A damaged object header (not the strings' storage).
  [[noreturn]] void corrupt_header(const std::string& why, const char* hint = "file corrupt?") const {
    fail_h5(file_, "corrupt object header: " + why + " (" + hint + ")", what_);
  }
  [[noreturn]] void bad(const std::string& why) const {
    fail_h5(file_, "corrupt variable-length string storage (" + why + "; file corrupt?)", what_);
  }
  // n bytes at absolute offset `at`, which must lie inside the file.
  std::vector<unsigned char> read(uint64_t at, uint64_t n, const char* what) const {
    if (at > fsize_ || n > fsize_ - at) bad(std::string(what) + " lies outside the file");
    std::vector<unsigned char> buf(static_cast<size_t>(n));
    auto* p = buf.data();
    size_t left = buf.size();
    uint64_t off = at;
    while (left > 0) {
      const ssize_t r = ::pread(fd_, p, left, static_cast<off_t>(off));
      if (r <= 0) bad(std::string(what) + " cannot be read");
      p += r, left -= static_cast<size_t>(r), off += static_cast<uint64_t>(r);
    }
    return buf;
  }

 private:
  std::string file_, what_;
  int fd_ = -1;
  size_t sa_ = 0, ss_ = 0;
  hsize_t userblock_ = 0;
  uint64_t fsize_ = 0;
  bool sohm_ = false;
  unsigned sym_ik_ = 0, sym_lk_ = 0;
};

// The global heap collections the references name, each read and checked once.
// The checks below start from an object's header address. When libhdf5 cannot even give that
// (H5Oget_info fails: the header is damaged), the object is refused rather than read unchecked
// (a fuzzed h5ad whose vlen attribute then overflowed the heap in H5HG_read).
[[noreturn]] void unreadable_header(const std::string& file, const std::string& where) {
  fail_h5(file, "corrupt object header: it cannot be read (file corrupt?)", where);
}

// A header message flagged as shared (IV.A.1, flag bit 1) holds only where the message lives (IV.A.2.?,
// "Shared Message": version 1-3, a type, then an address or a heap ID), and libhdf5 decodes the
// message from there. Files without a shared-message table (every file h5py writes) can hold only
// committed datatypes this way: a datatype message pointing at another object header in the file.
// Anything else sends libhdf5 after garbage: a fuzzed h5ad whose vlen attribute claimed to be shared
// hung it in H5C_protect, and a 10x .h5's dataset header led H5SM_get_fheap_addr to a memcpy from NULL.
void check_shared_message(const RawFile& f, unsigned type, const unsigned char* m, size_t msize,
                          const std::string& file, const std::string& where) {
  auto bad = [&](const std::string& why) {
    fail_h5(file, "corrupt shared header message (type " + std::to_string(type) + "): " + why + " (file corrupt?)",
            where);
  };
  if (msize < 2) bad("shorter than its header");
  const unsigned ver = m[0], kind = m[1];
  if (ver < 1 || ver > 3) bad("unknown version " + std::to_string(ver));
  const bool in_heap = ver == 3 && (kind == 1 || kind == 3);
  if (in_heap) {
    if (!f.has_shared_messages()) bad("it is in the shared-message heap, but the file has none");
    return;
  }
  if ((ver < 3 && kind != 0) || (ver == 3 && kind != 2)) bad("unknown sharing " + std::to_string(kind));
  if (type != 0x03) bad("only datatypes are shared through another object header");
  const size_t at = ver == 1 ? 8 : 2, sa = f.sizeof_addr();
  if (at + sa > msize) bad("its address runs past the message");
  const uint64_t addr = le_uint(m + at, sa);
  if (addr >= f.size() || f.userblock() + 16 > f.size() - addr) bad("it points outside the file");
}

class GlobalHeaps {
 public:
  explicit GlobalHeaps(const RawFile& f) : f_(f) {}

  // The bytes of string reference `r` (length, collection address, object index). `exact`: the
  // object must be exactly the string's length (libhdf5's H5HG_read copies the whole object into a
  // buffer of the string's length); otherwise it must hold at least that many bytes.
  std::string resolve(const unsigned char* r, bool exact) {
    const size_t sa = f_.sizeof_addr();
    const uint64_t len = le_uint(r, 4), addr = le_uint(r + 4, sa), idx = le_uint(r + 4 + sa, 4);
    if (addr == 0 && len == 0) return {};  // an empty (or NULL) string
    if (addr == 0) f_.bad("a string has no heap object");
    const Collection& c = load(addr);
    const auto it = std::lower_bound(c.objects.begin(), c.objects.end(), Object{idx, 0, 0},
                                     [](const Object& a, const Object& b) { return a.index < b.index; });
    if (it == c.objects.end() || it->index != idx) f_.bad("a string refers to a missing global heap object");
    if (it->size < len || (exact && it->size != len)) f_.bad("a string's length differs from its global heap object's");
    const char* p = reinterpret_cast<const char*>(c.bytes.data() + it->offset);
    // As libhdf5 hands it over: a C string, ending at the first NUL.
    return std::string(p, strnlen(p, static_cast<size_t>(len)));
  }

 private:
  struct Object {
    uint64_t index;
    size_t offset;  // of its data in the collection
    uint64_t size;
  };
  struct Collection {
    std::vector<unsigned char> bytes;
    std::vector<Object> objects;  // by index (a sorted vector: cheaper than a hash map for the few
                                  // objects of an attribute's collection, and for many)
  };

  const Collection& load(uint64_t addr) {
    auto it = heaps_.find(addr);
    if (it != heaps_.end()) return it->second;
    const size_t ss = f_.sizeof_size();
    if (addr > f_.size()) f_.bad("a global heap collection lies outside the file");
    const uint64_t at = addr + f_.userblock();
    // Header: "GCOL", version 1, 3 reserved bytes, the collection's size.
    const size_t head = 8 + ss;
    const auto h = f_.read(at, head, "a global heap collection");
    if (std::memcmp(h.data(), "GCOL", 4) != 0 || h[4] != 1) f_.bad("a global heap collection has no GCOL signature");
    const uint64_t csize = le_uint(h.data() + 8, ss);
    if (csize < head) f_.bad("a global heap collection's size is too small");
    Collection c;
    c.bytes = f_.read(at, csize, "a global heap collection");
    // The walk libhdf5's H5HG__cache_heap_deserialize makes, refusing what would make it loop
    // forever (a free-space object, index 0, of size 0 moves it nowhere) or read past the
    // collection (an object's size running past its end). Objects: index u16, refcount u16,
    // reserved u32, size, then the data padded to 8 bytes.
    const size_t ohead = 8 + ss;
    for (size_t p = head; p + ohead <= c.bytes.size();) {
      const uint64_t idx = le_uint(c.bytes.data() + p, 2);
      const uint64_t osize = le_uint(c.bytes.data() + p + 8, ss);
      const size_t left = c.bytes.size() - p;
      if (idx == 0) {  // free space: its size counts its header
        if (osize < ohead || osize > left) f_.bad("a global heap collection's free space is damaged");
        p += static_cast<size_t>(osize);
        continue;
      }
      if (osize > left - ohead || ohead + ((osize + 7) / 8) * 8 > left) f_.bad("a global heap object runs past its collection");
      c.objects.push_back({idx, p + ohead, osize});
      p += ohead + static_cast<size_t>((osize + 7) / 8) * 8;
    }
    // libhdf5 writes the objects in index order; a damaged collection may not. A repeated index is
    // refused (libhdf5 would take either).
    auto by_index = [](const Object& a, const Object& b) { return a.index < b.index; };
    if (!std::is_sorted(c.objects.begin(), c.objects.end(), by_index))
      std::sort(c.objects.begin(), c.objects.end(), by_index);
    for (size_t i = 1; i < c.objects.size(); ++i)
      if (c.objects[i].index == c.objects[i - 1].index) f_.bad("a global heap collection holds an object index twice");
    return heaps_.emplace(addr, std::move(c)).first->second;
  }

  const RawFile& f_;
  std::unordered_map<uint64_t, Collection> heaps_;
};

// Inflates a deflate (zlib) stream to exactly `want` bytes; false when the stream is damaged or
// its size differs.
bool inflate_exact(const std::vector<unsigned char>& in, size_t want, std::vector<unsigned char>& out) {
  out.assign(want, 0);
  z_stream z{};
  if (inflateInit(&z) != Z_OK) return false;
  z.next_in = const_cast<unsigned char*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(want);
  int rc = inflate(&z, Z_FINISH);
  if (rc == Z_BUF_ERROR && z.avail_out == 0 && want == 0) rc = Z_STREAM_END;
  const bool ok = rc == Z_STREAM_END && z.avail_out == 0;
  inflateEnd(&z);
  return ok;
}

// HDF5's shuffle filter (H5Zshuffle.c) undone: byte b of element i was stored at b * n + i.
std::vector<unsigned char> unshuffle(const std::vector<unsigned char>& in, size_t elem) {
  if (elem <= 1) return in;
  std::vector<unsigned char> out(in.size());
  const size_t n = in.size() / elem;
  for (size_t b = 0; b < elem; ++b)
    for (size_t i = 0; i < n; ++i) out[i * elem + b] = in[b * n + i];
  std::copy(in.begin() + static_cast<std::ptrdiff_t>(n * elem), in.end(), out.begin() + static_cast<std::ptrdiff_t>(n * elem));
  return out;
}

}  // namespace

namespace {
// The raw data of a compact dataset's layout message (defined below, after walk_header).
bool find_compact_data(const RawFile& f, uint64_t addr, std::vector<unsigned char>& block, size_t& at, size_t& len);
}  // namespace

std::optional<std::vector<std::string>> read_vlen_strings(hid_t dset, size_t n, const std::string& file,
                                                          const std::string& obj) {
  RawFile f(dset, file, obj);
  if (!f.ok()) return std::nullopt;
  const size_t elem = 4 + f.sizeof_addr() + 4;
  Id dcpl(H5Dget_create_plist(dset));
  if (!dcpl.valid()) return std::nullopt;
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  std::vector<std::string> out(n);
  GlobalHeaps heaps(f);

  if (layout == H5D_CONTIGUOUS) {
    const haddr_t off = H5Dget_offset(dset);  // absolute (the userblock included)
    if (off == HADDR_UNDEF || H5Pget_external_count(dcpl.get()) != 0) return std::nullopt;  // not allocated, external
    if (static_cast<double>(off) + static_cast<double>(n) * elem > static_cast<double>(f.size()))
      f.bad("its references run past the end of the file");
    const auto refs = f.read(off, n * elem, "its references");
    for (size_t i = 0; i < n; ++i) out[i] = heaps.resolve(refs.data() + i * elem, false);
    return out;
  }
  if (layout == H5D_COMPACT) {
    // The references in the object header's layout message. Through libhdf5, a compact scalar string
    // whose reference claimed 1.27 GB had H5T__conv_vlen allocate and clear that much before looking
    // at the heap (a fuzzed h5ad's uns/params/name: session 19's local piece, 1.5-2.9 GB resident).
    H5O_info_t info;
    if (H5Oget_info2(dset, &info, H5O_INFO_BASIC) < 0) unreadable_header(file, obj);
    std::vector<unsigned char> block;
    size_t at = 0, len = 0;
    if (!find_compact_data(f, info.addr, block, at, len)) return std::nullopt;
    if (len / elem < n) f.bad("its compact data hold fewer bytes than its references");
    for (size_t i = 0; i < n; ++i) out[i] = heaps.resolve(block.data() + at + i * elem, false);
    return out;
  }
  if (layout != H5D_CHUNKED || f.userblock() != 0) return std::nullopt;
  // Chunked, 1-D: each stored chunk's bytes (H5Dget_chunk_info: address, size, filters skipped)
  // decoded here. Filters other than deflate and shuffle go through libhdf5.
  hsize_t cdim = 0;
  if (H5Pget_chunk(dcpl.get(), 1, &cdim) != 1 || cdim == 0) return std::nullopt;
  unsigned opts = 0;  // partial edge chunks stored unfiltered: their filter mask does not say so
  if (H5Pget_chunk_opts(dcpl.get(), &opts) < 0 || (opts & H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS)) return std::nullopt;
  const int nf = H5Pget_nfilters(dcpl.get());
  if (nf < 0 || nf > 8) return std::nullopt;
  std::vector<H5Z_filter_t> filters;
  for (int i = 0; i < nf; ++i) {
    unsigned flags = 0;
    size_t nvals = 0;
    unsigned cfg = 0;
    char name[16];
    const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &nvals, nullptr, sizeof name, name, &cfg);
    if (id != H5Z_FILTER_DEFLATE && id != H5Z_FILTER_SHUFFLE) return std::nullopt;
    filters.push_back(id);
  }
  // A chunk decodes to cdim references: bounded as check_claim bounds a dataspace (deflate's
  // maximum ratio, 1032:1, over the file's bytes, plus 64 MiB).
  const double chunk_bytes = static_cast<double>(cdim) * static_cast<double>(elem);
  if (chunk_bytes > static_cast<double>(f.size()) * 1032 + 64.0 * (1 << 20)) f.bad("its chunk size is larger than the file can hold");
  Id space(H5Dget_space(dset));
  hsize_t nchunks = 0;
  if (!space.valid() || H5Dget_num_chunks(dset, space.get(), &nchunks) < 0)
    fail_h5(file, "cannot read the chunk index (file corrupt?)", obj);
  if (nchunks > f.size()) f.bad("it claims more chunks than the file can hold");
  const size_t want = static_cast<size_t>(cdim) * elem;
  std::vector<unsigned char> raw, dec;
  for (hsize_t c = 0; c < nchunks; ++c) {
    hsize_t coff = 0, csize = 0;
    unsigned mask = 0;
    haddr_t caddr = HADDR_UNDEF;
    if (H5Dget_chunk_info(dset, space.get(), c, &coff, &mask, &caddr, &csize) < 0)
      fail_h5(file, "cannot read the chunk index (file corrupt?)", obj);
    if (caddr == HADDR_UNDEF) continue;  // not written: the fill value, empty strings
    if (coff % cdim != 0 || coff >= n) f.bad("a chunk lies outside the dataset");
    raw = f.read(caddr, csize, "a chunk");
    for (size_t i = filters.size(); i-- > 0;) {  // undone in reverse order of the pipeline
      if (mask & (1u << i)) continue;           // this filter was skipped for this chunk
      if (filters[i] == H5Z_FILTER_DEFLATE) {
        if (!inflate_exact(raw, want, dec)) f.bad("a compressed chunk does not inflate to its size");
        raw.swap(dec);
      } else {
        raw = unshuffle(raw, elem);
      }
    }
    if (raw.size() != want) f.bad("a chunk's size differs from its shape");
    const size_t first = static_cast<size_t>(coff);
    const size_t count = std::min<size_t>(static_cast<size_t>(cdim), n - first);
    for (size_t j = 0; j < count; ++j) out[first + j] = heaps.resolve(raw.data() + j * elem, false);
  }
  return out;
}

namespace {

// Walks the messages of the object header at `addr` (HDF5 File Format Specification 3.0,
// IV.A.1.a/b: version 1 and version 2 headers, continuation messages 0x10 followed), calling
// fn(type, flags, block, body, size) for each message until it returns true. Returns whether it
// did; false when the header is not one it reads, or no message made fn return true.
template <class Fn>
bool walk_header(const RawFile& f, uint64_t addr, std::vector<unsigned char>& block, Fn&& fn) {
  const size_t sa = f.sizeof_addr(), ss = f.sizeof_size();
  const uint64_t ub = f.userblock();
  if (addr > f.size() || ub + 16 > f.size() - addr) return false;
  const auto pre = f.read(addr + ub, std::min<uint64_t>(64, f.size() - addr - ub), "an object header");
  struct Chunk {
    uint64_t at, len;
  };
  std::vector<Chunk> todo;
  bool v2 = false;
  if (pre.size() >= 16 && pre[0] == 1) {
    todo.push_back({addr + ub + 16, le_uint(pre.data() + 8, 4)});
  } else if (pre.size() >= 8 && std::memcmp(pre.data(), "OHDR", 4) == 0 && pre[4] == 2) {
    v2 = true;
    const unsigned flags = pre[5];
    size_t p = 6 + ((flags & 0x20) ? 16 : 0) + ((flags & 0x10) ? 4 : 0);
    const size_t w = size_t(1) << (flags & 3);
    if (p + w > pre.size()) return false;
    todo.push_back({addr + ub + p + w, le_uint(pre.data() + p, w)});
  } else {
    return false;
  }
  bool crt_order = v2 && (pre[5] & 0x04);
  for (size_t k = 0; k < todo.size() && k < 256; ++k) {
    uint64_t at = todo[k].at, len = todo[k].len;
    if (v2 && k > 0) {  // continuation chunk: "OCHK", messages, checksum
      if (len < 8) return false;
      at += 4, len -= 8;
    }
    // libhdf5 allocates a chunk's stated length before reading it: one past the file's end is refused.
    if (at > f.size() || len > f.size() - at) f.corrupt_header("a header chunk runs past the end of the file", "file truncated or corrupt?");
    if (len > (uint64_t(1) << 26)) return false;
    block = f.read(at, len, "an object header");
    const size_t mh = v2 ? 4 + (crt_order ? 2 : 0) : 8;
    for (size_t p = 0; p + mh <= block.size();) {
      const unsigned type = v2 ? block[p] : static_cast<unsigned>(le_uint(block.data() + p, 2));
      const size_t msize = static_cast<size_t>(v2 ? le_uint(block.data() + p + 1, 2) : le_uint(block.data() + p + 2, 2));
      const unsigned mflags = v2 ? block[p + 3] : block[p + 4];
      const size_t body = p + mh;
      if (msize > block.size() - body) break;
      if (type == 0x10) {
        // libhdf5 decodes a continuation's address and length whatever size the message states,
        // from the bytes that follow: a shorter message sends it to a chunk this walk would miss.
        if (msize < sa + ss) f.corrupt_header("a continuation message is shorter than its address and length");
        const uint64_t next = le_uint(block.data() + body, sa) + ub;
        for (const Chunk& c : todo)
          if (c.at == next) f.corrupt_header("its continuation messages form a cycle");
        todo.push_back({next, le_uint(block.data() + body + sa, ss)});
      } else if (fn(type, mflags, block, body, msize)) {
        return true;
      }
      p = body + (v2 ? msize : (msize + 7) / 8 * 8);
    }
  }
  return false;
}

bool find_compact_data(const RawFile& f, uint64_t addr, std::vector<unsigned char>& block, size_t& at, size_t& len) {
  // The data layout message (0x08, IV.A.2.i), versions 3 and 4, class 0 (compact): a u16 size, the data.
  return walk_header(f, addr, block, [&](unsigned type, unsigned mflags, const std::vector<unsigned char>& b,
                                         size_t body, size_t msize) {
    if (type != 0x08 || (mflags & 0x02) || msize < 4) return false;
    const unsigned char* m = b.data() + body;
    if ((m[0] != 3 && m[0] != 4) || m[1] != 0) return false;
    len = static_cast<size_t>(le_uint(m + 2, 2));
    if (len > msize - 4) f.bad("its compact data run past the layout message");
    at = body + 4;
    return true;
  });
}

// Finds attribute `name`'s stored data in the object header at `addr` (IV.A.2.m: the attribute
// message, versions 1-3). Returns the header bytes holding it and the data's offset in them, or
// false when it is not found there. Throws (f.bad) when the message holds fewer than `data_bytes`.
bool find_attribute_data(const RawFile& f, uint64_t addr, const std::string& name, size_t data_bytes,
                         std::vector<unsigned char>& block, size_t& data_at) {
  return walk_header(f, addr, block, [&](unsigned type, unsigned mflags, const std::vector<unsigned char>& b,
                                         size_t body, size_t msize) {
    if (type != 0x0C || (mflags & 0x02) || msize < 8) return false;  // an attribute, not shared
    const unsigned char* m = b.data() + body;
    const unsigned ver = m[0];
    const size_t nsize = static_cast<size_t>(le_uint(m + 2, 2)), tsize = static_cast<size_t>(le_uint(m + 4, 2)),
                 dsize = static_cast<size_t>(le_uint(m + 6, 2));
    auto pad = [&](size_t x) { return ver == 1 ? (x + 7) / 8 * 8 : x; };
    const size_t name_at = ver == 3 ? 9 : 8;
    if (!((ver == 1 || ver == 2 || ver == 3) && nsize == name.size() + 1 && name_at + nsize <= msize &&
          std::memcmp(m + name_at, name.c_str(), nsize) == 0))
      return false;
    const size_t d = name_at + pad(nsize) + pad(tsize) + pad(dsize);
    if (d > msize || data_bytes > msize - d) f.bad("the attribute's message is shorter than its data");
    data_at = body + d;
    return true;
  });
}

}  // namespace

void check_vlen_attribute(hid_t obj_id, const std::string& name, size_t n, const std::string& file,
                          const std::string& where) {
  if (n == 0) return;
  RawFile f(obj_id, file, where + " attribute '" + name + "'");
  if (!f.ok()) return;
  H5O_info_t info;
  if (H5Oget_info2(obj_id, &info, H5O_INFO_BASIC) < 0) unreadable_header(file, where);
  const size_t elem = 4 + f.sizeof_addr() + 4;
  if (static_cast<double>(n) * elem > static_cast<double>(f.size())) f.bad("its references run past the end of the file");
  std::vector<unsigned char> block;
  size_t at = 0;
  if (!find_attribute_data(f, info.addr, name, n * elem, block, at)) return;  // (dense attribute storage)
  GlobalHeaps heaps(f);
  for (size_t i = 0; i < n; ++i) heaps.resolve(block.data() + at + i * elem, true);
}

namespace {
// The length of the datatype message at p[0, n) (Format Specification 3.0, IV.A.2.d), walking
// compound members, enum names and the base types of enums, variable-length and array types, or
// 0 when a part runs past n, a name is not NUL-terminated inside it, or the class or version is
// unknown: libhdf5 1.10.8 decodes those parts with strdup and fixed offsets, unbounded.
size_t datatype_extent(const unsigned char* p, size_t n, int depth = 0) {
  if (n < 8 || depth > 8) return 0;
  const unsigned cls = p[0] & 0x0F, ver = p[0] >> 4;
  const uint32_t bits = static_cast<uint32_t>(le_uint(p + 1, 3));
  const uint64_t size = le_uint(p + 4, 4);
  if (ver < 1 || ver > 4) return 0;
  size_t at = 8;
  auto need = [&](size_t k) { return k <= n - at; };
  // A NUL-terminated name at `at`, padded to a multiple of 8 bytes when `padded`.
  auto name = [&](bool padded) -> bool {
    const void* z = std::memchr(p + at, 0, n - at);
    if (!z) return false;
    size_t len = static_cast<const unsigned char*>(z) - (p + at) + 1;
    if (padded) len = (len + 7) / 8 * 8;
    if (!need(len)) return false;
    at += len;
    return true;
  };
  switch (cls) {
    case 0: case 4: return need(4) ? at + 4 : 0;  // fixed-point, bitfield: offset, precision
    case 1: return need(12) ? at + 12 : 0;         // floating-point
    case 2: return need(2) ? at + 2 : 0;           // time
    case 3: case 7: return at;                     // string, reference
    case 5: {                                      // opaque: an ASCII tag, its padded length in bits 0-7
      const size_t len = bits & 0xFF;
      return need(len) ? at + len : 0;
    }
    case 6: {  // compound
      const size_t members = bits & 0xFFFF;
      const size_t off_bytes = size < 256 ? 1 : size < 65536 ? 2 : size < (1u << 24) ? 3 : 4;
      for (size_t i = 0; i < members; ++i) {
        if (!name(ver < 3)) return 0;
        const size_t fixed = ver == 1 ? 4 + 1 + 3 + 4 + 4 + 16 : ver == 2 ? 4 : off_bytes;
        if (!need(fixed)) return 0;
        at += fixed;
        const size_t t = datatype_extent(p + at, n - at, depth + 1);
        if (t == 0) return 0;
        at += t;
      }
      return at;
    }
    case 8: {  // enumeration: the base type, the names, then the values
      const size_t members = bits & 0xFFFF;
      const size_t t = datatype_extent(p + at, n - at, depth + 1);
      if (t == 0) return 0;
      const uint64_t base = le_uint(p + at + 4, 4);
      // libhdf5 decodes the values by the base type's size but copies them (H5T_copy, under
      // H5Aget_type) by the enum's own: the two must agree.
      if (base != size) return 0;
      at += t;
      for (size_t i = 0; i < members; ++i)
        if (!name(ver < 3)) return 0;
      if (base != 0 && members > (n - at) / base) return 0;
      return at + members * base;
    }
    case 9: {  // variable-length: the base type; a string's characters are one byte (libhdf5
               // allocates length x base size: a 5-byte "character" asked malloc for 20 GB)
      const size_t t = datatype_extent(p + at, n - at, depth + 1);
      if (t == 0) return 0;
      if ((bits & 0x0F) == 1 && ((p[at] & 0x0F) != 0 || le_uint(p + at + 4, 4) != 1)) return 0;
      return at + t;
    }
    case 10: {  // array: rank, (v2: 3 reserved,) dimensions, (v2: permutation,) the base type
      if (ver < 2 || !need(1)) return 0;
      const size_t rank = p[at];
      const size_t fixed = ver == 2 ? 4 + 8 * rank : 1 + 4 * rank;
      if (!need(fixed)) return 0;
      at += fixed;
      const size_t t = datatype_extent(p + at, n - at, depth + 1);
      return t ? at + t : 0;
    }
    default: return 0;
  }
}
}  // namespace

bool opened_read_only(hid_t obj) {
  Id fid(H5Iget_file_id(obj));
  unsigned intent = 0;
  return fid.valid() && H5Fget_intent(fid.get(), &intent) >= 0 && !(intent & H5F_ACC_RDWR);
}

void check_attribute_messages(hid_t obj_id, const std::string& file, const std::string& where) {
  if (!opened_read_only(obj_id)) return;
  RawFile f(obj_id, file, where);
  if (!f.ok()) return;
  H5O_info_t info;
  if (H5Oget_info2(obj_id, &info, H5O_INFO_BASIC | H5O_INFO_NUM_ATTRS) < 0) unreadable_header(file, where);
  if (info.num_attrs == 0) return;
  const size_t sa = f.sizeof_addr(), ss = f.sizeof_size();
  std::vector<unsigned char> block;
  walk_header(f, info.addr, block, [&](unsigned type, unsigned mflags, const std::vector<unsigned char>& b, size_t body,
                                       size_t msize) {
    if (mflags & 0x02) {  // shared: only where it lives
      check_shared_message(f, type, b.data() + body, msize, file, where);
      return false;
    }
    if (type != 0x0C) return false;  // an attribute message
    auto bad = [&](const std::string& why) {
      fail_h5(file, "corrupt attribute message: " + why + " (file corrupt?)", where);
    };
    const unsigned char* m = b.data() + body;
    if (msize < 8) bad("shorter than its header");
    const unsigned ver = m[0], aflags = ver >= 2 ? m[1] : 0;
    if (ver < 1 || ver > 3) bad("unknown version " + std::to_string(ver));
    const size_t nsize = static_cast<size_t>(le_uint(m + 2, 2)), tsize = static_cast<size_t>(le_uint(m + 4, 2)),
                 dsize = static_cast<size_t>(le_uint(m + 6, 2));
    auto pad = [&](size_t x) { return ver == 1 ? (x + 7) / 8 * 8 : x; };
    const size_t name_at = ver == 3 ? 9 : 8;
    if (nsize == 0 || name_at + nsize > msize) bad("its name runs past the message");
    if (m[name_at + nsize - 1] != 0 || std::memchr(m + name_at, 0, nsize) != m + name_at + nsize - 1)
      bad("its name is not one NUL-terminated string of its stated length");
    const size_t t_at = name_at + pad(nsize), s_at = t_at + pad(tsize), d_at = s_at + pad(dsize);
    if (d_at > msize) bad("its datatype and dataspace run past the message");
    if ((aflags & 0x03) != 0) return false;  // a shared datatype or dataspace: its size is elsewhere
    // The datatype message (IV.A.2.d): class and version, 3 bytes of class bits, a u32 size, which
    // libhdf5 copies the data by (a variable-length type's too); its data are disk references then
    // (u32 length, heap address, u32 index), which the size must not be below either.
    if (datatype_extent(m + t_at, tsize) == 0) bad("its datatype runs past its stated size or is malformed");
    const unsigned cls = m[t_at] & 0x0F;
    const double stated = static_cast<double>(le_uint(m + t_at + 4, 4));
    const double esize = cls == 9 ? std::max(stated, static_cast<double>(4 + sa + 4)) : stated;
    // The dataspace message (IV.A.2.b): version, rank, flags, then (v1: 5 reserved bytes; v2: the
    // space's type, 2 = null) the dimensions, sizeof_size bytes each.
    if (dsize < 4) bad("its dataspace is shorter than a dataspace's header");
    const unsigned sver = m[s_at], rank = m[s_at + 1];
    if (sver != 1 && sver != 2) bad("its dataspace has unknown version " + std::to_string(sver));
    if (rank > H5S_MAX_RANK) bad("its dataspace has rank " + std::to_string(rank));
    const size_t dims_at = sver == 1 ? 8 : 4;
    if (sver == 2 && m[s_at + 3] == 2) return false;  // a null dataspace: no data
    if (dims_at + rank * ss > dsize) bad("its dataspace's dimensions run past it");
    double elems = 1;
    for (unsigned i = 0; i < rank; ++i) elems *= static_cast<double>(le_uint(m + s_at + dims_at + i * ss, ss));
    if (elems * esize > static_cast<double>(msize - d_at))
      bad("it stores " + std::to_string(msize - d_at) + " bytes of data where its " +
          std::to_string(static_cast<int64_t>(elems)) + " elements take " +
          std::to_string(static_cast<int64_t>(elems * esize)));
    return false;
  });
}

namespace {
// The object header address a hard link `name` under loc names (read from the link, without loading
// the header), refused when outside the file; HADDR_UNDEF for a soft or external link or none.
haddr_t hard_link_address(hid_t loc, const std::string& name, const RawFile& f) {
  H5L_info_t li;
  if (H5Lget_info(loc, name.c_str(), &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_HARD) return HADDR_UNDEF;
  if (li.u.address >= f.size()) f.corrupt_header("it lies outside the file");
  return li.u.address;
}
}  // namespace

void check_object_header(hid_t loc, const std::string& name, const std::string& file, const std::string& where) {
  if (!opened_read_only(loc)) return;
  RawFile f(loc, file, where);
  if (!f.ok()) return;
  // The header's address from the link (a hard link names it), not from H5Oget_info: that loads
  // the header into libhdf5's cache first, allocating its first chunk's stated size (a fuzzed h5ad
  // stated 40-400 GB; on a machine with the memory to map it, the sanitized build's resident set
  // grew past 3 GB before the read failed: the device-only OOMs of bench/RESULTS.md section 51).
  // walk_header refuses a chunk running past the end of the file before anything is allocated.
  haddr_t addr = hard_link_address(loc, name, f);
  if (addr == HADDR_UNDEF) {  // a soft or external link, or none: libhdf5 resolves it
    H5O_info_t info;
    if (H5Oget_info_by_name2(loc, name.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0) {
      if (H5Lexists(loc, name.c_str(), H5P_DEFAULT) <= 0) return;  // missing: the caller says so
      unreadable_header(file, where);
    }
    addr = info.addr;
  }
  const size_t ss = f.sizeof_size();
  std::vector<unsigned char> block;
  walk_header(f, addr, block, [&](unsigned type, unsigned mflags, const std::vector<unsigned char>& b, size_t body,
                                       size_t msize) {
    if (mflags & 0x02) {  // a shared message: stored elsewhere
      check_shared_message(f, type, b.data() + body, msize, file, where);
      return false;
    }
    const unsigned char* m = b.data() + body;
    auto bad = [&](const char* what, const std::string& why) {
      fail_h5(file, std::string("corrupt ") + what + " message: " + why + " (file corrupt?)", where);
    };
    switch (type) {
      case 0x01: {  // dataspace: version, rank, flags, (v1: 5 reserved; v2: type,) dims (and maxima)
        if (msize < 4) bad("dataspace", "shorter than its header");
        const unsigned ver = m[0], rank = m[1], fl = m[2];
        if (ver != 1 && ver != 2) bad("dataspace", "unknown version " + std::to_string(ver));
        if (rank > H5S_MAX_RANK) bad("dataspace", "rank " + std::to_string(rank));
        const size_t need = (ver == 1 ? 8 : 4) + rank * ss * ((fl & 1) ? 2 : 1);
        if (need > msize) bad("dataspace", "its dimensions run past it");
        break;
      }
      case 0x03:  // datatype
        if (datatype_extent(m, msize) == 0) bad("datatype", "it runs past its message or is malformed");
        break;
      case 0x04: {  // old fill value: size, value
        if (msize < 4 || le_uint(m, 4) > msize - 4) bad("fill value", "its value runs past the message");
        break;
      }
      case 0x05: {  // fill value: v1/v2 three property bytes, defined, then size and value; v3 flags
        if (msize < 2) bad("fill value", "shorter than its header");
        const unsigned ver = m[0];
        size_t at = 0;
        bool has = false;
        if (ver == 1 || ver == 2) {
          if (msize < 4) bad("fill value", "shorter than its header");
          has = ver == 1 || m[3] != 0;
          at = 4;
        } else if (ver == 3) {
          has = (m[1] & 0x20) != 0;
          at = 2;
        } else {
          bad("fill value", "unknown version " + std::to_string(ver));
        }
        if (has && (at + 4 > msize || le_uint(m + at, 4) > msize - at - 4))
          bad("fill value", "its value runs past the message");
        break;
      }
      case 0x08: {  // data layout (IV.A.2.i): compact data within the message, chunk dimensions
                    // not 0 (libhdf5 divides by them: SIGFPE in H5D__chunk_set_info)
        if (msize < 2) bad("data layout", "shorter than its header");
        const unsigned ver = m[0];
        const size_t sa = f.sizeof_addr();
        if (ver == 1 || ver == 2) {  // version, dimensionality, class, 5 reserved, address, dims
          if (msize < 8) bad("data layout", "shorter than its header");
          const size_t rank = m[1], at = 8 + (m[2] != 0 ? sa : 0);
          if (at + rank * 4 > msize) bad("data layout", "its dimensions run past the message");
          if (m[2] == 2)
            for (size_t i = 0; i < rank; ++i)
              if (le_uint(m + at + i * 4, 4) == 0) bad("data layout", "a chunk dimension is 0");
          break;
        }
        const unsigned cls = m[1];
        if (ver != 3 && ver != 4) break;
        if (cls == 0) {
          if (msize < 4 || le_uint(m + 2, 2) > msize - 4) bad("data layout", "its compact data run past the message");
        } else if (cls == 2) {
          const size_t rank = ver == 3 ? m[2] : (msize >= 5 ? m[3] : 0);
          const size_t enc = ver == 3 ? 4 : (msize >= 5 ? m[4] : 0), at = ver == 3 ? 3 + sa : 5;
          if (rank == 0 || enc == 0 || enc > 8 || at + rank * enc > msize)
            bad("data layout", "its chunk dimensions run past the message");
          for (size_t i = 0; i < rank; ++i)
            if (le_uint(m + at + i * enc, enc) == 0) bad("data layout", "a chunk dimension is 0");
        }
        break;
      }
      default: break;
    }
    return false;
  });
}

void check_header_extent(hid_t loc, const std::string& name, const std::string& file, const std::string& where) {
  if (!opened_read_only(loc)) return;
  RawFile f(loc, file, where);
  if (!f.ok()) return;
  const haddr_t addr = hard_link_address(loc, name, f);
  if (addr == HADDR_UNDEF) return;
  std::vector<unsigned char> block;
  walk_header(f, addr, block, [](unsigned, unsigned, const std::vector<unsigned char>&, size_t, size_t) {
    return false;
  });
}

namespace {
// An old-style group's B-tree (III.A.1, version 1, node type 0) and its symbol table nodes (III.C),
// walked before libhdf5 looks a name up in them. libhdf5 reads each node by the size the
// superblock's K values give (H5B__cache_get_initial_load_size, H5G_NODE_SIZE) and trusts the node's
// level, entry count and child addresses: a fuzzed h5ad whose root B-tree pointed at garbage sent
// H5B_find -> H5C_protect into a memcpy from NULL (session 19's device piece, under H5Lexists).
// Each node must lie inside the file, carry its signature, a level one below its parent's (leaves:
// 0), at most 2K entries, and appear once; every symbol table node likewise ("SNOD", version 1, at
// most 2 x leaf K symbols).
void check_group_btree(const RawFile& f, uint64_t root, const std::string& file, const std::string& where) {
  auto bad = [&](const std::string& why) {
    fail_h5(file, "corrupt group: its B-tree " + why + " (file corrupt?)", where);
  };
  const uint64_t sa = f.sizeof_addr(), ss = f.sizeof_size(), ub = f.userblock();
  const uint64_t ik = f.group_internal_k(), lk = f.group_leaf_k();
  if (ik == 0 || lk == 0) bad("has a K of 0 in the superblock");
  const uint64_t node_bytes = 8 + 2 * sa + 2 * ik * sa + (2 * ik + 1) * ss;
  const uint64_t snod_bytes = 8 + 2 * lk * (ss + sa + 4 + 4 + 16);
  auto inside = [&](uint64_t addr, uint64_t n) { return addr < f.size() && ub <= f.size() - addr && n <= f.size() - addr - ub; };
  struct Node {
    uint64_t addr;
    int level;  // expected; -1: the root, any
  };
  std::vector<Node> todo{{root, -1}};
  std::vector<uint64_t> seen;
  const size_t max_nodes = 1 << 20;
  while (!todo.empty()) {
    const Node nd = todo.back();
    todo.pop_back();
    if (std::find(seen.begin(), seen.end(), nd.addr) != seen.end()) bad("reaches a node twice");
    if (seen.size() >= max_nodes) bad("has too many nodes");
    seen.push_back(nd.addr);
    if (!inside(nd.addr, node_bytes)) bad("has a node outside the file");
    const auto b = f.read(nd.addr + ub, node_bytes, "a group B-tree node");
    if (std::memcmp(b.data(), "TREE", 4) != 0 || b[4] != 0) bad("has a node without its signature or of another type");
    const int level = b[5];
    if ((nd.level >= 0 && level != nd.level) || level > 64) bad("has a node at the wrong level");
    const uint64_t entries = le_uint(b.data() + 6, 2);
    if (entries > 2 * ik) bad("has a node with more entries than its K allows");
    for (uint64_t i = 0; i < entries; ++i) {
      const uint64_t child = le_uint(b.data() + 8 + 2 * sa + ss + i * (ss + sa), sa);
      if (level > 0) {
        todo.push_back({child, level - 1});
        continue;
      }
      if (!inside(child, snod_bytes)) bad("has a symbol table node outside the file");
      const auto sn = f.read(child + ub, 8, "a symbol table node");
      if (std::memcmp(sn.data(), "SNOD", 4) != 0 || sn[4] != 1) bad("has a symbol table node without its signature");
      if (le_uint(sn.data() + 6, 2) > 2 * lk) bad("has a symbol table node with more symbols than its K allows");
    }
  }
}

// A symbol table's local heap (III.D), before libhdf5 reads it.
void check_heap(const RawFile& f, uint64_t heap, const std::string& file, const std::string& where) {
  const size_t sa = f.sizeof_addr(), ss = f.sizeof_size();
  auto bad = [&](const std::string& why) {
    fail_h5(file, "corrupt group: its local heap " + why + " (file corrupt?)", where);
  };
  // Local heap (III.D): "HEAP", version 0, 3 reserved bytes, data segment size, offset of the
  // free list's head (1: none), data segment address.
  const uint64_t ub = f.userblock();
  if (heap > f.size() || ub + 8 + 2 * ss + sa > f.size() - heap) bad("lies outside the file");
  const auto h = f.read(heap + ub, 8 + 2 * ss + sa, "a local heap");
  if (std::memcmp(h.data(), "HEAP", 4) != 0 || h[4] != 0) bad("has a bad signature or version");
  const uint64_t dsize = le_uint(h.data() + 8, ss), head = le_uint(h.data() + 8 + ss, ss);
  const uint64_t data = le_uint(h.data() + 8 + 2 * ss, sa);
  const uint64_t kNone = 1;  // H5HL_FREE_NULL
  // The data segment must lie inside the file, with or without a free list (libhdf5 refuses one past
  // the end too, as "actual len exceeds EOA" from deep in its cache; the message here names it).
  if (data > f.size() || dsize > f.size() - data || ub > f.size() - data - dsize)
    bad("data segment lies outside the file");
  if (head == kNone) return;
  // libhdf5 1.10.8 walks the free list with no end but the list's (H5HL__fl_deserialize): a list
  // that loops allocates a block per step until memory runs out.
  const auto seg = f.read(data + ub, dsize, "a local heap's data");
  uint64_t at = head, steps = 0;
  const uint64_t max_steps = dsize / (2 * ss) + 1;
  while (at != kNone) {
    if (at >= dsize || 2 * ss > dsize - at) bad("has a free block outside its data");
    if (++steps > max_steps) bad("has a free list that loops");
    const uint64_t next = le_uint(seg.data() + at, ss), size = le_uint(seg.data() + at + ss, ss);
    if (size > dsize - at) bad("has a free block past its data");
    at = next;
  }
}

}  // namespace

void check_root_header(const std::string& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // H5Fopen reports it
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return;
  const uint64_t fsize = static_cast<uint64_t>(st.st_size);
  auto bad = [&](const std::string& why) { fail_h5(file, "corrupt superblock: " + why + " (file corrupt?)", "/"); };
  // The superblock (II.A) at 0, 512, 1024, ...: its signature, version, and the sizes of addresses and lengths.
  static const unsigned char kSig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  unsigned char sb[128];
  uint64_t at = 0;
  for (;; at = at == 0 ? 512 : at * 2) {
    if (at >= fsize) return;  // no signature: H5Fis_hdf5 said otherwise; libhdf5 reports it
    const ssize_t got = ::pread(fd, sb, sizeof sb, static_cast<off_t>(at));
    if (got >= 8 && std::memcmp(sb, kSig, 8) == 0) {
      std::memset(sb + got, 0, sizeof sb - static_cast<size_t>(got));
      break;
    }
  }
  const unsigned ver = sb[8];
  size_t sa = 0, ss = 0, root_at = 0;
  if (ver == 0 || ver == 1) {
    sa = sb[13], ss = sb[14];
    // ... K values, flags, (v1: indexed storage K, reserved,) four addresses, then the root's symbol
    // table entry: its name's heap offset, then its object header's address.
    root_at = 24 + (ver == 1 ? 4 : 0) + 4 * sa + ss;
  } else if (ver == 2 || ver == 3) {
    sa = sb[9], ss = sb[10];
    root_at = 12 + 3 * sa;  // base, extension and end-of-file addresses, then the root's header
  } else {
    return;  // libhdf5 refuses it
  }
  if ((sa != 2 && sa != 4 && sa != 8) || (ss != 2 && ss != 4 && ss != 8)) bad("it states an impossible address or length size");
  if (root_at + sa > sizeof sb) return;
  const uint64_t root = le_uint(sb + root_at, sa);
  RawFile f(fd, file, "/", sa, ss, at, fsize);
  if (!f.ok()) return;
  if (root >= fsize) f.corrupt_header("the root group's lies outside the file");
  // Every chunk of the root's header inside the file: H5Fopen loads them all (H5G_mkroot ->
  // H5O_protect) by their stated lengths; a fuzzed h5ad's root said 8 GB (session 19).
  std::vector<unsigned char> block;
  walk_header(f, root, block, [](unsigned, unsigned, const std::vector<unsigned char>&, size_t, size_t) { return false; });
}

void check_local_heap(hid_t group, const std::string& file, const std::string& where) {
  RawFile f(group, file, where);
  if (!f.ok()) return;
  H5O_info_t info;
  if (H5Oget_info2(group, &info, H5O_INFO_BASIC) < 0) unreadable_header(file, where);
  const size_t sa = f.sizeof_addr();
  uint64_t heap = 0, btree = 0;
  std::vector<unsigned char> block;
  // The symbol table message (0x11, IV.A.2.r): the B-tree's address, then the local heap's.
  if (!walk_header(f, info.addr, block, [&](unsigned type, unsigned, const std::vector<unsigned char>& b, size_t body,
                                            size_t msize) {
        if (type != 0x11) return false;
        // libhdf5 decodes the two addresses whatever size the message states, from the bytes that
        // follow (a fuzzed h5ad's root stated 0 and so named a heap whose free list loops).
        if (msize < 2 * sa) f.corrupt_header("its symbol table message is shorter than its two addresses");
        btree = le_uint(b.data() + body, sa);
        heap = le_uint(b.data() + body + sa, sa);
        return true;
      }))
    return;  // a new-style group (link messages or dense links): no local heap
  check_heap(f, heap, file, where);
  check_group_btree(f, btree, file, where);
}

}  // namespace scurry::h5::detail
