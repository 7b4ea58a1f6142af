#include "io/hdf5.hpp"

#include "core/fill_ahead.hpp"
#include "core/memory.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <cstring>
#include <filesystem>
#include <type_traits>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <chrono>
#include <thread>

#include "core/error.hpp"
#include "core/output.hpp"
#include "io/format.hpp"
#include "io/hdf5_guard.hpp"
#include "io/hdf5_vlen.hpp"

namespace scurry::h5 {

// HDF5's exit handler closes the files still open, and HDF5 1.10 crashes (SIGSEGV) closing one whose
// final flush failed (a full disk: its metadata cache is left inconsistent, and no later close can
// succeed). Every file scurry writes is closed, or abandoned by discard(), before the exit; at
// exit there is nothing to flush. Called before the library is first used (static initialisation).
[[maybe_unused]] const bool g_no_atexit = H5dont_atexit() >= 0;

void quiet() {
  thread_local bool done = false;
  if (!done) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    done = true;
  }
}

void Id::reset() {
  if (id_ >= 0) {
    // Objects of a file closed with H5F_CLOSE_STRONG are already gone: ignore the failure.
    if (H5Iis_valid(id_) > 0) H5Idec_ref(id_);
    id_ = H5I_INVALID_HID;
  }
}

void fail_h5(const std::string& file, const std::string& what, const std::string& object) {
  throw InputError(file + ": " + what + " (" + object + ")");
}

namespace {
// The errno of the system call under the last failed HDF5 call of this thread, from its error
// stack: the file drivers record "..., errno = N, error message = '...'" (HDF5 documents the format
// as stable); 0 when none is recorded.
int stack_errno() {
  int err = 0;
  auto cb = [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
    const char* p = e->desc ? std::strstr(e->desc, "errno = ") : nullptr;
    if (!p) return 0;
    *static_cast<int*>(out) = std::atoi(p + 8);
    return 1;  // stop the walk
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, cb, &err);
  return err;
}
}  // namespace

void fail_h5_write(const std::string& file, const std::string& what, const std::string& object) {
  if (const int err = stack_errno()) fail_write(file, err, object.empty() || object == "/" ? what : what + " at " + object);
  fail_h5(file, what, object);
}

namespace {

// Checks an identifier-returning call.
hid_t chk(hid_t id, const Node& n, const std::string& what, const std::string& obj = "") {
  if (id < 0) fail_h5(n.file(), what, obj.empty() ? n.path() : obj);
  return id;
}
void chk_status(herr_t st, const std::string& file, const std::string& what, const std::string& obj) {
  if (st < 0) fail_h5_write(file, what, obj);
}

template <class T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
  else if constexpr (std::is_same_v<T, int8_t>) return H5T_NATIVE_INT8;
  else if constexpr (std::is_same_v<T, uint8_t>) return H5T_NATIVE_UINT8;
  else if constexpr (std::is_same_v<T, int16_t>) return H5T_NATIVE_INT16;
  else if constexpr (std::is_same_v<T, uint16_t>) return H5T_NATIVE_UINT16;
  else if constexpr (std::is_same_v<T, int32_t>) return H5T_NATIVE_INT32;
  else if constexpr (std::is_same_v<T, uint32_t>) return H5T_NATIVE_UINT32;
  else if constexpr (std::is_same_v<T, int64_t>) return H5T_NATIVE_INT64;
  else if constexpr (std::is_same_v<T, uint64_t>) return H5T_NATIVE_UINT64;
  else static_assert(sizeof(T) == 0, "unsupported element type");
}

TypeInfo describe_type(hid_t t) {
  TypeInfo ti;
  ti.cls = H5Tget_class(t);
  ti.size = H5Tget_size(t);
  if (ti.cls == H5T_STRING) {
    ti.is_string = true;
    ti.is_vlen_string = H5Tis_variable_str(t) > 0;
  } else if (ti.cls == H5T_ENUM) {
    // h5py bools: enum over int8 with members FALSE=0, TRUE=1.
    if (H5Tget_nmembers(t) == 2 && ti.size == 1) ti.is_bool = true;
  } else if (ti.cls == H5T_REFERENCE) {
    ti.is_reference = true;
  }
  return ti;
}

DType dtype_of(hid_t t, const std::string& file, const std::string& obj) {
  TypeInfo ti = describe_type(t);
  if (ti.is_bool) return DType::boolean;
  if (ti.cls == H5T_FLOAT) {
    if (ti.size == 4) return DType::f32;
    if (ti.size == 8) return DType::f64;
    if (ti.size == 2) return DType::f32;  // float16: held and written back as float32
  }
  if (ti.cls == H5T_INTEGER) {
    const bool sgn = H5Tget_sign(t) == H5T_SGN_2;
    switch (ti.size) {
      case 1: return sgn ? DType::i8 : DType::u8;
      case 2: return sgn ? DType::i16 : DType::u16;
      case 4: return sgn ? DType::i32 : DType::u32;
      case 8: return sgn ? DType::i64 : DType::u64;
      default: break;
    }
  }
  fail_h5(file, ti.is_string ? "holds strings where numbers were expected" : "holds an unsupported element type", obj);
}

void check_number_type(hid_t t, const std::string& file, const std::string& path);  // below

// Reads `n` elements of an enum (or other integer-based type HDF5 cannot convert to T) through its
// native base integer type, then converts element-wise.
template <class T, class ReadFn>
std::vector<T> read_via_base(hid_t ftype, size_t n, ReadFn&& rd, const std::string& file, const std::string& obj) {
  Id base(H5Tget_super(ftype));
  if (!base.valid()) fail_h5(file, "cannot inspect the element type", obj);
  // H5Tget_native_type converts the members' values from the base type the file states: a base
  // whose bit fields lie outside its bytes, or an enum whose size is not its base's, makes libhdf5
  // 1.10.8 read past the values (H5T__bit_find from H5T__conv_i_i; found by fuzz_h5ad, session 21,
  // on an obs column's 'ordered' attribute). Checked first.
  if (H5Tget_class(base.get()) != H5T_INTEGER || H5Tget_size(base.get()) != H5Tget_size(ftype))
    fail_h5(file, "holds an enum whose base is not an integer of its size (file corrupt?)", obj);
  check_number_type(base.get(), file, obj);
  Id nat(H5Tget_native_type(ftype, H5T_DIR_ASCEND));
  if (!nat.valid()) fail_h5(file, "cannot inspect the element type", obj);
  // The buffer holds elements of the memory type read into (its size, not the base's: fuzz_h5ad found
  // an overflow when the two differed).
  const size_t sz = H5Tget_size(nat.get());
  const bool sgn = H5Tget_sign(base.get()) == H5T_SGN_2;
  if (sz != 1 && sz != 2 && sz != 4 && sz != 8) fail_h5(file, "unsupported enum base type", obj);
  std::vector<unsigned char> raw;
  resize_large(raw, n * sz);
  rd(nat.get(), raw.data());
  std::vector<T> out(n);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char* p = raw.data() + i * sz;
    int64_t v = 0;
    switch (sz) {
      case 1: v = sgn ? static_cast<int64_t>(*reinterpret_cast<const int8_t*>(p)) : *p; break;
      case 2: { int16_t a; uint16_t b; std::memcpy(&a, p, 2); std::memcpy(&b, p, 2); v = sgn ? a : b; break; }
      case 4: { int32_t a; uint32_t b; std::memcpy(&a, p, 4); std::memcpy(&b, p, 4); v = sgn ? a : b; break; }
      case 8: { std::memcpy(&v, p, 8); break; }
      default: fail_h5(file, "unsupported enum base type", obj);
    }
    out[i] = static_cast<T>(v);
  }
  return out;
}

// Integers from float storage: HDF5's float->integer conversion truncates 2.5 to 2 (and saturates
// out-of-range values) without a word. Integer reads of a float dataset or attribute go through
// double instead; a fractional or non-finite value is an InputError "FILE: X/indptr holds 2.5, not
// an integer". Out-of-range whole values saturate as HDF5 does (callers report them as out of range).
template <class T>
std::vector<T> integers_from(const std::vector<double>& v, const std::string& file, const std::string& element) {
  std::vector<T> out;
  resize_large(out, v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = v[i];
    if (!std::isfinite(x) || x != std::floor(x)) {
      std::ostringstream os;
      os.precision(17);
      os << x;
      fail_input(file, element, " holds ", os.str(), ", not an integer");
    }
    if (x <= static_cast<double>(std::numeric_limits<T>::min())) out[i] = std::numeric_limits<T>::min();
    else if (x >= static_cast<double>(std::numeric_limits<T>::max())) out[i] = std::numeric_limits<T>::max();
    else out[i] = static_cast<T>(x);
  }
  return out;
}
std::string element_name(const std::string& path) { return path.size() > 1 && path[0] == '/' ? path.substr(1) : path; }

// Every size read from a file is checked against what the file can hold before memory is allocated
// for it: a dataset or attribute whose dataspace claims n elements of b bytes each (the on-disk
// element: a variable-length string's is its heap reference) must fit in the file's bytes -- times
// deflate's maximum ratio, 1032:1, when the dataset is filtered (compressed), plus 64 MiB for
// fill values of unwritten chunks (h5py and anndata write every chunk). A 12 KB file whose
// matrix/indptr dataspace says 4e9 elements is refused here, not after a 34 GB allocation.
constexpr double kMaxFilterRatio = 1032;
constexpr double kFillSlackBytes = 64.0 * (1 << 20);
// The local heap of a group of a file opened read-only is checked before libhdf5 walks it
// (io/hdf5_vlen.hpp); a file being written is not read back from its bytes.
void check_heap_if_reading(hid_t group, const std::string& file, const std::string& path) {
  if (detail::opened_read_only(group)) detail::check_local_heap(group, file, path);
}

void check_claim(hid_t obj, bool filtered, size_t n, size_t elem_bytes, const std::string& file, const std::string& path) {
  Id fid(H5Iget_file_id(obj));
  hsize_t fsize = 0;
  if (!fid.valid() || H5Fget_filesize(fid.get(), &fsize) < 0) fail_h5(file, "cannot read the file size", path);
  const double claim = static_cast<double>(n) * static_cast<double>(std::max<size_t>(elem_bytes, 1));
  const double room = static_cast<double>(fsize) * (filtered ? kMaxFilterRatio : 1.0) + kFillSlackBytes;
  if (claim > room)
    fail_h5(file,
            "its dataspace claims " + std::to_string(n) + " elements (" + std::to_string(static_cast<int64_t>(claim)) +
                " bytes) but the file is only " + std::to_string(fsize) + " bytes (file corrupt?)",
            path);
}
// An integer or float type whose bit fields do not fit its size (precision + offset past the
// element's bits; a float's sign, exponent or mantissa outside them) makes libhdf5 1.10.8's
// conversions write past their stack buffers (H5T__bit_get_d from H5T__conv_i_f: "stack smashing
// detected", found by fuzz_tenx_h5). Checked before any numeric read converts.
void check_number_type(hid_t t, const std::string& file, const std::string& path) {
  const H5T_class_t cls = H5Tget_class(t);
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) return;
  const size_t bits = 8 * H5Tget_size(t);
  const size_t prec = H5Tget_precision(t);
  const int off = H5Tget_offset(t);
  bool ok = bits > 0 && bits <= 128 && prec > 0 && off >= 0 && prec + static_cast<size_t>(off) <= bits;
  if (ok && cls == H5T_FLOAT) {
    size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
    ok = H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) >= 0 && spos < bits && esize > 0 && msize > 0 &&
         epos + esize <= bits && mpos + msize <= bits && esize < 64 && msize <= 112;
  }
  if (!ok) fail_h5(file, "holds a malformed number type (bit fields outside its " + std::to_string(bits) + " bits; file corrupt?)", path);
}

constexpr double kMaxUnwrittenChunks = 1 << 18;

// An unfiltered chunk stored in fewer bytes than a whole chunk makes libhdf5 1.10.8 copy a whole
// chunk out of the shorter buffer it read it into (H5VM_memcpyvv from H5D__scatgath_read: a heap
// overflow, found by fuzz_h5ad in a 13-element indptr whose one chunk stores 50 bytes of 52). Each
// allocated chunk's stored size is looked up (H5Dget_chunk_info_by_coord, one chunk-index lookup
// each) before the first read; a grid of more than 2^20 chunks is checked by its total only
// (H5Dget_storage_size against the allocated chunks). Filtered chunks are decoded into whole-chunk
// buffers by the filter pipeline and are not concerned.
// A compact dataset (its data inside the object header) whose stored bytes are fewer than its
// dataspace's elements take is the same overflow (H5D__compact_readvv copies from the stored
// bytes by the dataspace's count; found by fuzz_tenx_h5): its storage size is compared first.
// Chunks never written, allowed up to kMaxUnwrittenChunks (below).
void check_chunk_storage(hid_t d, size_t elem_bytes, const std::string& file, const std::string& path) {
  Id pl(H5Dget_create_plist(d));
  if (!pl.valid()) return;
  if (H5Pget_layout(pl.get()) == H5D_COMPACT) {
    Id sp(H5Dget_space(d));
    const hssize_t np = sp.valid() ? H5Sget_simple_extent_npoints(sp.get()) : -1;
    if (np < 0) fail_h5(file, "cannot read the dataspace", path);
    const double need = static_cast<double>(np) * static_cast<double>(elem_bytes);
    const hsize_t stored = H5Dget_storage_size(d);
    if (static_cast<double>(stored) < need)
      fail_h5(file,
              "stores " + std::to_string(stored) + " bytes in its header where its " + std::to_string(np) +
                  " elements take " + std::to_string(static_cast<int64_t>(need)) + " (file corrupt?)",
              path);
    return;
  }
  if (H5Pget_layout(pl.get()) != H5D_CHUNKED) return;
  const bool filtered = H5Pget_nfilters(pl.get()) != 0;
  Id space(H5Dget_space(d));
  const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  if (rank < 1 || rank > H5S_MAX_RANK) fail_h5(file, "cannot read the dataspace", path);
  std::vector<hsize_t> dims(static_cast<size_t>(rank)), chunk(static_cast<size_t>(rank)), grid(static_cast<size_t>(rank));
  if (H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) != rank ||
      H5Pget_chunk(pl.get(), rank, chunk.data()) != rank)
    fail_h5(file, "cannot read the chunk layout (file corrupt?)", path);
  double chunk_bytes = static_cast<double>(std::max<size_t>(elem_bytes, 1)), cells = 1;
  for (int i = 0; i < rank; ++i) {
    if (chunk[i] == 0) fail_h5(file, "has a chunk dimension of 0 (file corrupt?)", path);
    grid[i] = dims[i] == 0 ? 0 : (dims[i] + chunk[i] - 1) / chunk[i];
    chunk_bytes *= static_cast<double>(chunk[i]);
    cells *= static_cast<double>(grid[i]);
  }
  if (cells == 0) return;
  // libhdf5 1.10.8's H5Dread keeps a record (a dataspace copy among it) for every chunk a selection
  // touches, written or not: a 43 KB h5ad whose indptr spanned 13.5M one-element chunks, none of
  // them stored, took 2.9 GB and 15 s there (fuzz_h5ad, session 19). Chunks never written (read as
  // the fill value; h5py and anndata write every chunk) are allowed up to kMaxUnwrittenChunks.
  if (cells > static_cast<double>(kMaxUnwrittenChunks)) {
    hsize_t stored = 0;
    if (H5Dget_num_chunks(d, space.get(), &stored) < 0) fail_h5(file, "cannot count the chunks (file corrupt?)", path);
    if (cells - static_cast<double>(stored) > static_cast<double>(kMaxUnwrittenChunks))
      fail_h5(file,
              "its dataspace spans " + std::to_string(static_cast<int64_t>(cells)) + " chunks, of which the file stores " +
                  std::to_string(stored) + " (file corrupt?)",
              path);
  }
  if (filtered) return;
  const auto short_chunk = [&](hsize_t got) {
    fail_h5(file,
            "stores a chunk in " + std::to_string(got) + " bytes where a whole chunk takes " +
                std::to_string(static_cast<int64_t>(chunk_bytes)) + " (file corrupt?)",
            path);
  };
  if (cells > static_cast<double>(1 << 20)) {
    hsize_t stored = 0;
    if (H5Dget_num_chunks(d, space.get(), &stored) < 0) fail_h5(file, "cannot count the chunks (file corrupt?)", path);
    const hsize_t total = H5Dget_storage_size(d);
    if (static_cast<double>(total) < static_cast<double>(stored) * chunk_bytes) short_chunk(stored ? total / stored : 0);
    return;
  }
  std::vector<hsize_t> at(static_cast<size_t>(rank), 0), idx(static_cast<size_t>(rank), 0);
  for (;;) {
    for (int i = 0; i < rank; ++i) at[i] = idx[i] * chunk[i];
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(d, at.data(), &mask, &addr, &size) < 0)
      fail_h5(file, "cannot look up a chunk (file corrupt?)", path);
    if (addr != HADDR_UNDEF && static_cast<double>(size) < chunk_bytes) short_chunk(size);
    int i = rank - 1;
    while (i >= 0 && ++idx[i] == grid[i]) idx[i--] = 0;
    if (i < 0) break;
  }
}

bool dataset_filtered(hid_t d) {
  Id pl(H5Dget_create_plist(d));
  return !pl.valid() || H5Pget_nfilters(pl.get()) != 0;
}

std::vector<int64_t> space_dims(hid_t space, const std::string& file, const std::string& obj) {
  const int nd = H5Sget_simple_extent_ndims(space);
  if (nd < 0) fail_h5(file, "cannot read the dataspace", obj);
  std::vector<hsize_t> d(static_cast<size_t>(nd));
  if (nd > 0 && H5Sget_simple_extent_dims(space, d.data(), nullptr) < 0)
    fail_h5(file, "cannot read the dataspace", obj);
  return std::vector<int64_t>(d.begin(), d.end());
}

// Variable-length strings: datasets are read, and attributes checked, by io/hdf5_vlen.cpp from the
// file's bytes before libhdf5's vlen conversion could follow a damaged heap reference.

// Reads strings through `rd(mem_type, buffer)` from an object of type `ftype` with `n` elements.
template <class ReadFn>
std::vector<std::string> read_strings_impl(hid_t ftype, hid_t space, size_t n, ReadFn&& rd, const std::string& file,
                                           const std::string& obj) {
  std::vector<std::string> out(n);
  if (n == 0) return out;
  if (H5Tis_variable_str(ftype) > 0) {
    Id mem(H5Tcopy(H5T_C_S1));
    if (!mem.valid() || H5Tset_size(mem.get(), H5T_VARIABLE) < 0 || H5Tset_cset(mem.get(), H5Tget_cset(ftype)) < 0)
      fail_h5(file, "cannot build a string type", obj);
    std::vector<char*> buf(n, nullptr);
    rd(mem.get(), buf.data());
    for (size_t i = 0; i < n; ++i)
      if (buf[i]) out[i] = buf[i];
    H5Dvlen_reclaim(mem.get(), space, H5P_DEFAULT, buf.data());
    return out;
  }
  const size_t sz = H5Tget_size(ftype);
  Id mem(H5Tcopy(ftype));
  if (!mem.valid()) fail_h5(file, "cannot build a string type", obj);
  const bool spacepad = H5Tget_strpad(ftype) == H5T_STR_SPACEPAD;
  std::vector<char> buf(n * sz);
  rd(mem.get(), buf.data());
  for (size_t i = 0; i < n; ++i) {
    const char* p = buf.data() + i * sz;
    size_t len = 0;
    while (len < sz && p[len] != '\0') ++len;
    if (spacepad)
      while (len > 0 && p[len - 1] == ' ') --len;
    out[i].assign(p, len);
  }
  return out;
}

// String arrays shorter than this stay variable-length (what h5py writes; nothing to gain).
constexpr size_t kFixedStringsMin = 1024;

Id vlen_utf8() {
  Id t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  H5Tset_strpad(t.get(), H5T_STR_NULLTERM);
  return t;
}

Id bool_enum() {
  Id t(H5Tenum_create(H5T_NATIVE_INT8));
  int8_t f = 0, tr = 1;
  H5Tenum_insert(t.get(), "FALSE", &f);
  H5Tenum_insert(t.get(), "TRUE", &tr);
  return t;
}

Id simple_space(const std::vector<int64_t>& dims) {
  if (dims.empty()) return Id(H5Screate(H5S_SCALAR));
  std::vector<hsize_t> d(dims.begin(), dims.end());
  return Id(H5Screate_simple(static_cast<int>(d.size()), d.data(), nullptr));
}

}  // namespace

void check_chunks_once(const Dataset& d, size_t elem_bytes) {
  if (d.chunks_checked_) return;
  check_chunk_storage(d.id(), elem_bytes, d.file(), d.path());
  d.chunks_checked_ = true;
}

Id file_type(DType t) {
  switch (t) {
    case DType::f32: return Id(H5Tcopy(H5T_IEEE_F32LE));
    case DType::f64: return Id(H5Tcopy(H5T_IEEE_F64LE));
    case DType::i8: return Id(H5Tcopy(H5T_STD_I8LE));
    case DType::i16: return Id(H5Tcopy(H5T_STD_I16LE));
    case DType::i32: return Id(H5Tcopy(H5T_STD_I32LE));
    case DType::i64: return Id(H5Tcopy(H5T_STD_I64LE));
    case DType::u8: return Id(H5Tcopy(H5T_STD_U8LE));
    case DType::u16: return Id(H5Tcopy(H5T_STD_U16LE));
    case DType::u32: return Id(H5Tcopy(H5T_STD_U32LE));
    case DType::u64: return Id(H5Tcopy(H5T_STD_U64LE));
    case DType::boolean: return bool_enum();
  }
  fail("file_type: unknown dtype");
}

// ---- Node -----------------------------------------------------------------------------------------

std::string Node::child_path(const std::string& name) const {
  if (path_.empty() || path_ == "/") return "/" + name;
  return path_ + "/" + name;
}

Kind Node::kind() const {
  switch (H5Iget_type(id())) {
    case H5I_GROUP:
    case H5I_FILE: return Kind::group;
    case H5I_DATASET: return Kind::dataset;
    default: return Kind::other;
  }
}

void Node::check_attributes_once() const {
  if (attrs_checked_) return;
  detail::check_attribute_messages(id(), file_, path_);
  attrs_checked_ = true;
}

bool Node::has_attr(const std::string& name) const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  check_attributes_once();
  const htri_t r = H5Aexists(id(), name.c_str());
  if (r < 0) fail_h5(file_, "cannot read attribute '" + name + "' (file corrupt?)", path_);
  return r > 0;
}

std::vector<std::string> Node::attr_names() const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  check_attributes_once();
  std::vector<std::string> out;
  auto cb = [](hid_t, const char* name, const H5A_info_t*, void* op) -> herr_t {
    static_cast<std::vector<std::string>*>(op)->push_back(name);
    return 0;
  };
  hsize_t idx = 0;
  if (H5Aiterate2(id(), H5_INDEX_NAME, H5_ITER_INC, &idx, cb, &out) < 0)
    fail_h5(file_, "cannot list attributes (file corrupt?)", path_);
  return out;
}

namespace {
struct AttrHandle {
  Id a, type, space;
  size_t n = 0;
};
AttrHandle open_attr(const Node& n, const std::string& name) {
  AttrHandle h;
  n.check_attributes_once();
  h.a = Id(H5Aopen(n.id(), name.c_str(), H5P_DEFAULT));
  if (!h.a.valid()) fail_h5(n.file(), "missing or unreadable attribute '" + name + "'", n.path());
  h.type = Id(H5Aget_type(h.a.get()));
  h.space = Id(H5Aget_space(h.a.get()));
  if (!h.type.valid() || !h.space.valid()) fail_h5(n.file(), "cannot inspect attribute '" + name + "'", n.path());
  const hssize_t np = H5Sget_simple_extent_npoints(h.space.get());
  if (np < 0) fail_h5(n.file(), "cannot inspect attribute '" + name + "'", n.path());
  // A null dataspace (h5py's Empty) holds nothing.
  h.n = H5Sget_simple_extent_type(h.space.get()) == H5S_NULL ? 0 : static_cast<size_t>(np);
  const size_t elem = H5Tget_size(h.type.get());
  check_claim(h.a.get(), false, h.n, elem, n.file(), n.path() + " attribute '" + name + "'");
  // The data libhdf5 decoded from the attribute message must hold the whole dataspace: H5Aread
  // copies n x the type's size from it without looking (a fuzzed file whose message is shorter
  // overflowed the heap inside H5A__read).
  // A variable-length element is stored as its length (4 bytes), the global heap collection's
  // address and the object's index (4 bytes), not as the H5Tget_size the type reports (a fuzzed
  // file's one-element string attribute of 8 stored bytes passed a check by H5Tget_size, and
  // overflowed the same way).
  size_t stored_elem = elem;
  const H5T_class_t cls = H5Tget_class(h.type.get());
  if (h.n > 0 && (cls == H5T_VLEN || (cls == H5T_STRING && H5Tis_variable_str(h.type.get()) > 0))) {
    size_t sizeof_addr = 8, sizeof_size = 8;
    Id fid(H5Iget_file_id(n.id()));
    Id fcpl(fid.valid() ? H5Fget_create_plist(fid.get()) : H5I_INVALID_HID);
    if (!fcpl.valid() || H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size) < 0)
      fail_h5(n.file(), "cannot inspect attribute '" + name + "'", n.path());
    stored_elem = std::max(elem, 8 + sizeof_addr);
  }
  const hsize_t stored = h.n > 0 ? H5Aget_storage_size(h.a.get()) : 0;
  if (h.n > 0 && stored < static_cast<hsize_t>(h.n) * stored_elem)
    fail_h5(n.file(),
            "attribute '" + name + "' stores " + std::to_string(stored) + " bytes for " +
                std::to_string(h.n) + " elements of " + std::to_string(stored_elem) + " bytes (file corrupt?)",
            n.path());
  return h;
}
template <class T>
std::vector<T> read_attr_numeric(const Node& n, const std::string& name) {
  AttrHandle h = open_attr(n, name);
  const TypeInfo ti = describe_type(h.type.get());
  const std::string what = "cannot read attribute '" + name + "'";
  auto rd = [&](hid_t mem, void* buf) {
    if (H5Aread(h.a.get(), mem, buf) < 0) fail_h5(n.file(), what, n.path());
  };
  if (h.n == 0) return {};
  check_number_type(h.type.get(), n.file(), n.path() + " attribute '" + name + "'");
  if (ti.cls == H5T_ENUM) return read_via_base<T>(h.type.get(), h.n, rd, n.file(), n.path());
  if (ti.cls != H5T_INTEGER && ti.cls != H5T_FLOAT)
    fail_h5(n.file(), "attribute '" + name + "' is not numeric", n.path());
  if constexpr (std::is_integral_v<T>) {
    if (ti.cls == H5T_FLOAT) {
      std::vector<double> d(h.n);
      rd(H5T_NATIVE_DOUBLE, d.data());
      const std::string owner = n.path() == "/" ? "" : element_name(n.path()) + " ";
      return integers_from<T>(d, n.file(), owner + "attribute '" + name + "'");
    }
  }
  std::vector<T> out(h.n);
  rd(native_type<T>(), out.data());
  return out;
}
}  // namespace

TypeInfo Node::attr_type(const std::string& name) const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  return describe_type(open_attr(*this, name).type.get());
}

std::vector<int64_t> Node::attr_shape(const std::string& name) const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  AttrHandle h = open_attr(*this, name);
  return space_dims(h.space.get(), file_, path_);
}

std::vector<std::string> Node::attr_strings(const std::string& name) const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  AttrHandle h = open_attr(*this, name);
  const TypeInfo ti = describe_type(h.type.get());
  if (h.n == 0) return {};
  if (!ti.is_string) fail_h5(file_, "attribute '" + name + "' should hold strings", path_);
  if (ti.is_vlen_string) detail::check_vlen_attribute(id(), name, h.n, file_, path_);
  auto rd = [&](hid_t mem, void* buf) {
    if (H5Aread(h.a.get(), mem, buf) < 0) fail_h5(file_, "cannot read attribute '" + name + "'", path_);
  };
  return read_strings_impl(h.type.get(), h.space.get(), h.n, rd, file_, path_);
}

std::string Node::attr_string(const std::string& name) const {
  auto v = attr_strings(name);
  if (v.size() != 1) fail_h5(file_, "attribute '" + name + "' should be a single string", path_);
  return v[0];
}

std::string Node::attr_string_or(const std::string& name, const std::string& fallback) const {
  if (!has_attr(name)) return fallback;
  if (!attr_type(name).is_string) return fallback;
  auto v = attr_strings(name);
  return v.size() == 1 ? v[0] : fallback;
}

std::vector<int64_t> Node::attr_ints(const std::string& name) const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  return read_attr_numeric<int64_t>(*this, name);
}
std::vector<double> Node::attr_doubles(const std::string& name) const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  return read_attr_numeric<double>(*this, name);
}

bool Node::attr_bool(const std::string& name) const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  auto v = read_attr_numeric<int64_t>(*this, name);
  if (v.size() != 1) fail_h5(file_, "attribute '" + name + "' should be a single boolean", path_);
  return v[0] != 0;
}

Node Node::attr_deref(const std::string& name) const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  AttrHandle h = open_attr(*this, name);
  if (!describe_type(h.type.get()).is_reference || h.n != 1)
    fail_h5(file_, "attribute '" + name + "' is not an object reference", path_);
  hobj_ref_t ref{};
  if (H5Aread(h.a.get(), H5T_STD_REF_OBJ, &ref) < 0) fail_h5(file_, "cannot read attribute '" + name + "'", path_);
  Id obj(H5Rdereference2(id(), H5P_DEFAULT, H5R_OBJECT, &ref));
  if (!obj.valid()) fail_h5(file_, "attribute '" + name + "' refers to a missing object", path_);
  std::string target = path_ + "@" + name;
  ssize_t len = H5Iget_name(obj.get(), nullptr, 0);
  if (len > 0) {
    std::string s(static_cast<size_t>(len) + 1, '\0');
    H5Iget_name(obj.get(), s.data(), s.size());
    s.resize(static_cast<size_t>(len));
    target = s;
  }
  return Node(std::move(obj), file_, target);
}

namespace {
void write_attr(const Node& n, const std::string& name, hid_t type, const std::vector<int64_t>& dims, const void* buf) {
  if (H5Aexists(n.id(), name.c_str()) > 0) H5Adelete(n.id(), name.c_str());
  Id space = simple_space(dims);
  Id a(H5Acreate2(n.id(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid()) fail_h5_write(n.file(), "cannot create attribute '" + name + "'", n.path());
  int64_t total = 1;
  for (auto d : dims) total *= d;
  if (total > 0 && H5Awrite(a.get(), type, buf) < 0)
    fail_h5_write(n.file(), "cannot write attribute '" + name + "'", n.path());
}
}  // namespace

void Node::set_attr(const std::string& name, const std::string& value) const {
  Id t = vlen_utf8();
  const char* p = value.c_str();
  write_attr(*this, name, t.get(), {}, &p);
}

void Node::set_attr(const std::string& name, const std::vector<std::string>& values) const {
  Id t = vlen_utf8();
  std::vector<const char*> p(values.size());
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i].c_str();
  write_attr(*this, name, t.get(), {static_cast<int64_t>(values.size())}, p.data());
}

void Node::set_attr(const std::string& name, const std::vector<int64_t>& values) const {
  if (H5Aexists(id(), name.c_str()) > 0) H5Adelete(id(), name.c_str());
  Id space = simple_space({static_cast<int64_t>(values.size())});
  Id a(H5Acreate2(id(), name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid()) fail_h5_write(file_, "cannot create attribute '" + name + "'", path_);
  if (!values.empty() && H5Awrite(a.get(), H5T_NATIVE_INT64, values.data()) < 0)
    fail_h5_write(file_, "cannot write attribute '" + name + "'", path_);
}

void Node::set_attr_bool(const std::string& name, bool value) const {
  Id t = bool_enum();
  int8_t v = value ? 1 : 0;
  write_attr(*this, name, t.get(), {}, &v);
}

Group Node::as_group() && {
  check_heap_if_reading(id_.get(), file_, path_);
  return Group(std::move(id_), std::move(file_), std::move(path_));
}
Dataset Node::as_dataset() && { return Dataset(std::move(id_), std::move(file_), std::move(path_)); }

// ---- Dataset --------------------------------------------------------------------------------------

TypeInfo Dataset::type() const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  Id t(chk(H5Dget_type(id()), *this, "cannot read the element type"));
  return describe_type(t.get());
}

std::vector<int64_t> Dataset::shape() const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  Id s(chk(H5Dget_space(id()), *this, "cannot read the dataspace"));
  return space_dims(s.get(), file_, path_);
}

int64_t Dataset::size() const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  Id s(chk(H5Dget_space(id()), *this, "cannot read the dataspace"));
  if (H5Sget_simple_extent_type(s.get()) == H5S_NULL) return 0;
  const hssize_t n = H5Sget_simple_extent_npoints(s.get());
  if (n < 0) fail_h5(file_, "cannot read the dataspace", path_);
  return static_cast<int64_t>(n);
}

DType Dataset::dtype() const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  Id t(chk(H5Dget_type(id()), *this, "cannot read the element type"));
  return dtype_of(t.get(), file_, path_);
}

namespace {
template <class T>
std::vector<T> read_selection(const Dataset& d, hid_t mspace, hid_t fspace, size_t n) {
  std::vector<T> out;
  if (n == 0) return out;
  Id ft(chk(H5Dget_type(d.id()), d, "cannot read the element type"));
  const TypeInfo ti = describe_type(ft.get());
  check_claim(d.id(), dataset_filtered(d.id()), n, ti.size, d.file(), d.path());
  check_chunks_once(d, ti.size);
  check_number_type(ft.get(), d.file(), d.path());
  const std::string what = "cannot read the data (file corrupt or truncated?)";
  auto rd = [&](hid_t mem, void* buf) {
    if (H5Dread(d.id(), mem, mspace, fspace, H5P_DEFAULT, buf) < 0) fail_h5(d.file(), what, d.path());
  };
  if (ti.cls == H5T_ENUM) return read_via_base<T>(ft.get(), n, rd, d.file(), d.path());
  if (ti.cls != H5T_INTEGER && ti.cls != H5T_FLOAT)
    fail_h5(d.file(), ti.is_string ? "holds strings where numbers were expected" : "holds a non-numeric element type",
            d.path());
  if constexpr (std::is_integral_v<T>) {
    if (ti.cls == H5T_FLOAT) {
      std::vector<double> v;
      resize_large(v, n);
      rd(H5T_NATIVE_DOUBLE, v.data());
      return integers_from<T>(v, d.file(), element_name(d.path()));
    }
  }
  resize_large(out, n);
  rd(native_type<T>(), out.data());
  return out;
}
}  // namespace

namespace {
// Whole reads of large contiguous datasets stored in exactly the memory type bypass H5Dread: their
// bytes are read with pread from several threads. HDF5 reads on one thread with one request in
// flight; the disk of the GPU machine gives more with several (bench/RESULTS.md section 0). Only the
// sec2 driver's single files, no external storage, the whole extent allocated and inside the file;
// anything else (chunked, compressed, converted types, file images) goes through H5Dread.
// SCURRY_H5_PREAD=0 turns it off; =force takes it for any size (the tests).
constexpr size_t kPreadMinBytes = size_t(64) << 20;
constexpr size_t kPreadPiece = size_t(16) << 20;
constexpr int kPreadThreads = 8;
// The mapped write's window (write_mapped), copied in pieces of kCopyPiece by kPreadThreads threads: 64
// such pieces a window keep every thread busy (a 64 MiB window of 16 MiB pieces kept 4 of the 8 busy:
// X's 10.4 GB write of a 1.3M-cell run took 3.6-4.1 s; 256 MiB windows of 4 MiB pieces, 1.8 s).
constexpr size_t kMapWindow = size_t(256) << 20;
constexpr size_t kCopyPiece = size_t(4) << 20;

struct ContiguousBytes {
  std::string file;  // the path HDF5 opened
  uint64_t offset = 0;
};
// The name of the single file of the sec2 driver that holds object d; none for other drivers.
std::optional<std::string> sec2_file_of(hid_t d) {
  Id file(H5Iget_file_id(d));
  if (!file.valid()) return std::nullopt;
  Id fapl(H5Fget_access_plist(file.get()));
  if (!fapl.valid() || H5Pget_driver(fapl.get()) != H5FD_SEC2) return std::nullopt;
  const ssize_t len = H5Fget_name(file.get(), nullptr, 0);
  if (len <= 0) return std::nullopt;
  std::string name(static_cast<size_t>(len), '\0');
  if (H5Fget_name(file.get(), name.data(), name.size() + 1) != len) return std::nullopt;
  return name;
}

// Where the `bytes` of dataset d lie in its file: a contiguous dataset without external storage,
// all of it allocated, in a single file of the sec2 driver (the file's name and the offset); else none.
std::optional<ContiguousBytes> sec2_extent(hid_t d, size_t bytes) {
  Id pl(H5Dget_create_plist(d));
  if (!pl.valid() || H5Pget_layout(pl.get()) != H5D_CONTIGUOUS || H5Pget_external_count(pl.get()) != 0)
    return std::nullopt;
  const haddr_t off = H5Dget_offset(d);
  if (off == HADDR_UNDEF || H5Dget_storage_size(d) != bytes) return std::nullopt;
  auto name = sec2_file_of(d);
  if (!name) return std::nullopt;
  return ContiguousBytes{std::move(*name), static_cast<uint64_t>(off)};
}

// Whether a whole read of the n elements of d may take a pread path: SCURRY_H5_PREAD, the size, and
// the file's element type equal to T's.
template <class T>
bool pread_wanted(const Dataset& d, size_t n) {
  const size_t bytes = n * sizeof(T);
  const char* e = std::getenv("SCURRY_H5_PREAD");
  if (e && std::strcmp(e, "0") == 0) return false;
  if (bytes == 0 || (bytes < kPreadMinBytes && !(e && std::strcmp(e, "force") == 0))) return false;
  Id ft(H5Dget_type(d.id()));
  return ft.valid() && H5Tequal(ft.get(), native_type<T>()) > 0;
}

// Where the n elements of d lie in its file when the fast path applies.
template <class T>
std::optional<ContiguousBytes> contiguous_bytes(const Dataset& d, size_t n) {
  if (!pread_wanted<T>(d, n)) return std::nullopt;
  const size_t bytes = n * sizeof(T);
  auto where = sec2_extent(d.id(), bytes);
  struct stat st {};
  if (!where || ::stat(where->file.c_str(), &st) != 0 ||
      static_cast<uint64_t>(st.st_size) < where->offset + bytes)
    return std::nullopt;  // H5Dread reports the truncation
  return where;
}

// Reads bytes [a, b) of the file (at off + a) into buf + a. Returns 0, or errno (EIO for a short
// read: the file ends early).
int pread_range(int fd, char* buf, size_t a, size_t b, uint64_t off) {
  for (size_t p = a; p < b;) {
    const ssize_t got = ::pread(fd, buf + p, b - p, static_cast<off_t>(off + p));
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      return got < 0 ? errno : EIO;
    }
    p += static_cast<size_t>(got);
  }
  return 0;
}

// Reads the n elements of d into out, which it sizes (its zero fill runs on this thread a step ahead
// of the reads: core/fill_ahead.hpp), as `pieces` pieces on several threads: piece i holds the
// elements [begin(i), begin(i + 1)) (begin(pieces) == n), read with pread at the file offset at(i);
// false if the file cannot be opened.
template <class T, class Begin, class At>
bool read_pieces_parallel(const Dataset& d, const std::string& file, size_t n, int64_t pieces, Begin begin, At at,
                          std::vector<T>& out, ArrayTap* tap) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  fill_ahead_for(
      out, n, kPreadThreads, pieces, [&](int64_t i) { return begin(i + 1); },
      [&](int64_t i) {
        const size_t e0 = begin(i), e1 = begin(i + 1);
        if (pread_range(fd, reinterpret_cast<char*>(out.data() + e0), 0, (e1 - e0) * sizeof(T), at(i)))
          fail_h5(d.file(), "cannot read the data (file corrupt or truncated?)", d.path());
        if (tap && e1 > e0) tap->piece(out.data() + e0, e0, e1);
      });
  return true;
}

// The contiguous dataset's n elements at `where`, in pieces of kPreadPiece bytes.
template <class T>
bool read_contiguous_parallel(const Dataset& d, const ContiguousBytes& where, size_t n, std::vector<T>& out,
                              ArrayTap* tap) {
  const size_t per = kPreadPiece / sizeof(T);
  const int64_t pieces = static_cast<int64_t>((n + per - 1) / per);
  return read_pieces_parallel(
      d, where.file, n, pieces, [&](int64_t i) { return std::min(n, static_cast<size_t>(i) * per); },
      [&](int64_t i) { return where.offset + static_cast<uint64_t>(i) * per * sizeof(T); }, out, tap);
}
}  // namespace

namespace {
// The same for a chunked dataset without filters (h5py's and anndata's `chunks=True` files, e.g. the
// shared synthetic data: 1 MiB chunks, uncompressed): each chunk's bytes lie as they are at their own
// address, so the chunks are read with pread on several threads, each once its elements exist.
// Chunks must split the first axis only (a chunk is a run of whole rows: contiguous in the buffer),
// every chunk must be allocated, whole and unfiltered; else none (H5Dread). H5Dget_chunk_info_by_coord
// (HDF5 1.10.5) looks each chunk up in the chunk index.
struct ChunkedBytes {
  std::string file;
  size_t chunk_elems = 0;          // elements of a whole chunk
  std::vector<uint64_t> address;   // chunk i's file offset, i along the first axis
};
template <class T>
std::optional<ChunkedBytes> chunked_bytes(const Dataset& d, size_t n) {
  if (!pread_wanted<T>(d, n)) return std::nullopt;
  Id pl(H5Dget_create_plist(d.id()));
  if (!pl.valid() || H5Pget_layout(pl.get()) != H5D_CHUNKED || H5Pget_nfilters(pl.get()) != 0 ||
      H5Pget_external_count(pl.get()) != 0)
    return std::nullopt;
  Id space(H5Dget_space(d.id()));
  const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  if (rank < 1 || rank > 8) return std::nullopt;
  hsize_t dims[8], chunk[8];
  if (H5Sget_simple_extent_dims(space.get(), dims, nullptr) != rank || H5Pget_chunk(pl.get(), rank, chunk) != rank)
    return std::nullopt;
  size_t row = 1;
  for (int i = 1; i < rank; ++i) {
    if (chunk[i] != dims[i]) return std::nullopt;  // chunks across the other axes: not runs of rows
    row *= static_cast<size_t>(dims[i]);
  }
  if (chunk[0] == 0 || row * static_cast<size_t>(dims[0]) != n) return std::nullopt;
  ChunkedBytes out;
  out.chunk_elems = row * static_cast<size_t>(chunk[0]);
  const size_t n_chunks = static_cast<size_t>((dims[0] + chunk[0] - 1) / chunk[0]);
  hsize_t stored = 0;
  if (H5Dget_num_chunks(d.id(), space.get(), &stored) < 0 || stored != n_chunks) return std::nullopt;  // some unallocated
  // (HDF5 1.10 takes no H5S_ALL there: the dataset's own dataspace, all selected)
  out.address.resize(n_chunks);
  for (size_t i = 0; i < n_chunks; ++i) {
    hsize_t at[8] = {};
    at[0] = static_cast<hsize_t>(i) * chunk[0];
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(d.id(), at, &mask, &addr, &size) < 0 || addr == HADDR_UNDEF || mask != 0 ||
        size != out.chunk_elems * sizeof(T))
      return std::nullopt;
    out.address[i] = static_cast<uint64_t>(addr);
  }
  // The file: sec2, one file (as for contiguous datasets), each chunk inside it.
  auto name = sec2_file_of(d.id());
  if (!name) return std::nullopt;
  out.file = std::move(*name);
  struct stat st {};
  if (::stat(out.file.c_str(), &st) != 0) return std::nullopt;
  for (size_t i = 0; i < n_chunks; ++i) {
    const size_t elems = std::min(out.chunk_elems, n - i * out.chunk_elems);
    if (static_cast<uint64_t>(st.st_size) < out.address[i] + elems * sizeof(T)) return std::nullopt;  // truncated
  }
  return out;
}

template <class T>
bool read_chunked_parallel(const Dataset& d, const ChunkedBytes& where, size_t n, std::vector<T>& out, ArrayTap* tap) {
  const size_t ce = where.chunk_elems;
  return read_pieces_parallel(
      d, where.file, n, static_cast<int64_t>(where.address.size()),
      [&](int64_t i) { return std::min(n, static_cast<size_t>(i) * ce); },
      [&](int64_t i) { return where.address[static_cast<size_t>(i)]; }, out, tap);
}
}  // namespace

template <class T>
std::vector<T> Dataset::read(ArrayTap* tap) const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str(), /*metadata=*/false);
  const size_t n = static_cast<size_t>(size());
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (auto where = chunked_bytes<T>(*this, n)) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<T> out;
      if (tap) tap->begin(n, sizeof(T));
      if (read_chunked_parallel(*this, *where, n, out, tap)) {
        if (std::getenv("SCURRY_H5_TIMES"))
          std::fprintf(stderr, "[h5] %s: %zu bytes in %zu chunks, buffer + pread %.3f s\n", path_.c_str(), n * sizeof(T),
                       where->address.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        return out;
      }
    }
    if (auto where = contiguous_bytes<T>(*this, n)) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<T> out;
      if (tap) tap->begin(n, sizeof(T));
      if (read_contiguous_parallel(*this, *where, n, out, tap)) {
        if (std::getenv("SCURRY_H5_TIMES"))  // the buffer (filled beside the reads) and the reads, on stderr
          std::fprintf(stderr, "[h5] %s: %zu bytes, buffer + pread %.3f s\n", path_.c_str(), n * sizeof(T),
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        return out;
      }
    }
  }
  std::vector<T> out = read_selection<T>(*this, H5S_ALL, H5S_ALL, n);
  tap_whole(tap, out.data(), out.size(), sizeof(T));
  return out;
}

template <class T>
std::vector<T> Dataset::read_range(int64_t begin, int64_t count) const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str(), /*metadata=*/false);
  auto sh = shape();
  if (sh.size() != 1) fail_h5(file_, "expected a 1-D dataset", path_);
  if (begin < 0 || count < 0 || begin + count > sh[0])
    fail_h5(file_, "range [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                       ") is out of bounds of a dataset of length " + std::to_string(sh[0]),
            path_);
  if (count == 0) return {};
  Id fs(chk(H5Dget_space(id()), *this, "cannot read the dataspace"));
  hsize_t st = static_cast<hsize_t>(begin), cnt = static_cast<hsize_t>(count);
  if (H5Sselect_hyperslab(fs.get(), H5S_SELECT_SET, &st, nullptr, &cnt, nullptr) < 0)
    fail_h5(file_, "cannot select a range", path_);
  Id ms(H5Screate_simple(1, &cnt, nullptr));
  return read_selection<T>(*this, ms.get(), fs.get(), static_cast<size_t>(count));
}

template <class T>
std::vector<T> Dataset::read_rows(int64_t begin, int64_t count) const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str(), /*metadata=*/false);
  auto sh = shape();
  if (sh.size() != 2) fail_h5(file_, "expected a 2-D dataset", path_);
  if (begin < 0 || count < 0 || begin + count > sh[0])
    fail_h5(file_, "rows [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                       ") are out of bounds of a dataset of " + std::to_string(sh[0]) + " rows",
            path_);
  if (count == 0 || sh[1] == 0) return {};
  Id fs(chk(H5Dget_space(id()), *this, "cannot read the dataspace"));
  hsize_t st[2] = {static_cast<hsize_t>(begin), 0}, cnt[2] = {static_cast<hsize_t>(count), static_cast<hsize_t>(sh[1])};
  if (H5Sselect_hyperslab(fs.get(), H5S_SELECT_SET, st, nullptr, cnt, nullptr) < 0)
    fail_h5(file_, "cannot select rows", path_);
  Id ms(H5Screate_simple(2, cnt, nullptr));
  return read_selection<T>(*this, ms.get(), fs.get(), static_cast<size_t>(count * sh[1]));
}

std::vector<std::string> Dataset::read_strings() const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str(), /*metadata=*/false);
  Id ft(chk(H5Dget_type(id()), *this, "cannot read the element type"));
  if (H5Tget_class(ft.get()) != H5T_STRING) fail_h5(file_, "holds numbers where strings were expected", path_);
  Id space(chk(H5Dget_space(id()), *this, "cannot read the dataspace"));
  const size_t n = static_cast<size_t>(size());
  check_claim(id(), dataset_filtered(id()), n, H5Tget_size(ft.get()), file_, path_);
  check_chunks_once(*this, H5Tget_size(ft.get()));
  if (H5Tis_variable_str(ft.get()) > 0 && n > 0)
    if (auto s = detail::read_vlen_strings(id(), n, file_, path_)) return std::move(*s);
  auto rd = [&](hid_t mem, void* buf) {
    if (H5Dread(id(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
      fail_h5(file_, "cannot read strings (file corrupt or truncated?)", path_);
  };
  return read_strings_impl(ft.get(), space.get(), n, rd, file_, path_);
}

std::string Dataset::read_string() const {
  auto v = read_strings();
  if (v.size() != 1) fail_h5(file_, "expected a single string", path_);
  return v[0];
}

double Dataset::read_scalar_double() const {
  auto v = read<double>();
  if (v.size() != 1) fail_h5(file_, "expected a scalar", path_);
  return v[0];
}

int64_t Dataset::read_scalar_int() const {
  auto v = read<int64_t>();
  if (v.size() != 1) fail_h5(file_, "expected a scalar", path_);
  return v[0];
}

#define SCURRY_H5_READ(T)                                                   \
  template std::vector<T> Dataset::read<T>(ArrayTap*) const;                \
  template std::vector<T> Dataset::read_range<T>(int64_t, int64_t) const;   \
  template std::vector<T> Dataset::read_rows<T>(int64_t, int64_t) const;
SCURRY_H5_READ(float)
SCURRY_H5_READ(double)
SCURRY_H5_READ(int8_t)
SCURRY_H5_READ(uint8_t)
SCURRY_H5_READ(int16_t)
SCURRY_H5_READ(int32_t)
SCURRY_H5_READ(int64_t)
SCURRY_H5_READ(uint64_t)
#undef SCURRY_H5_READ

// ---- Group ----------------------------------------------------------------------------------------

Kind Group::child_kind(const std::string& name) const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  // Follow the path component by component (H5Lexists fails on a missing intermediate).
  std::string sofar;
  size_t pos = 0;
  while (true) {
    const size_t slash = name.find('/', pos);
    sofar = name.substr(0, slash);
    const htri_t e = H5Lexists(id(), sofar.c_str(), H5P_DEFAULT);
    if (e < 0) fail_h5(file_, "cannot look up '" + sofar + "' (file corrupt?)", path_);
    if (e == 0) return Kind::missing;
    if (slash == std::string::npos) break;
    // An intermediate group: its header, local heap and B-tree checked before libhdf5 looks the next
    // component up in them (a fuzzed h5ad's f.has("c/barcodes") sent H5HL_protect into a memcpy of
    // size -1 under H5Lexists, in a heap nobody had opened).
    detail::check_header_extent(id(), sofar, file_, child_path(sofar));
    Id sub(H5Gopen2(id(), sofar.c_str(), H5P_DEFAULT));
    if (sub.valid()) check_heap_if_reading(sub.get(), file_, child_path(sofar));
    pos = slash + 1;
  }
  detail::check_header_extent(id(), name, file_, child_path(name));
  H5O_info_t info;
  if (H5Oget_info_by_name2(id(), name.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
    return Kind::missing;  // e.g. a dangling soft link
  switch (info.type) {
    case H5O_TYPE_GROUP: return Kind::group;
    case H5O_TYPE_DATASET: return Kind::dataset;
    default: return Kind::other;
  }
}

std::vector<std::string> Group::children() const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  std::vector<std::string> out;
  auto cb = [](hid_t, const char* name, const H5L_info_t*, void* op) -> herr_t {
    static_cast<std::vector<std::string>*>(op)->push_back(name);
    return 0;
  };
  hsize_t idx = 0;
  if (H5Literate(id(), H5_INDEX_NAME, H5_ITER_INC, &idx, cb, &out) < 0)
    fail_h5(file_, "cannot list the group's members (file corrupt?)", path_);
  return out;
}

// Groups nested deeper than this are refused: a hard link to an ancestor makes a cycle, and the
// readers that walk a tree (summarize_h5ad, uns) would recurse until the stack ran out (fuzz_h5ad).
namespace {
constexpr int kMaxGroupDepth = 64;
void check_depth(const std::string& file, const std::string& path) {
  if (std::count(path.begin(), path.end(), '/') > kMaxGroupDepth)
    fail_h5(file, "groups nested more than " + std::to_string(kMaxGroupDepth) + " deep (a cycle of links?)", path);
}
}  // namespace

Node Group::open_child(const std::string& name) const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  check_depth(file_, child_path(name));
  if (name.find('/') != std::string::npos) child_kind(name);  // the groups on the way checked
  detail::check_object_header(id(), name, file_, child_path(name));
  Id o(H5Oopen(id(), name.c_str(), H5P_DEFAULT));
  if (!o.valid()) fail_h5(file_, "cannot open '" + name + "' (missing, or file corrupt)", child_path(name));
  return Node(std::move(o), file_, child_path(name));
}

Group Group::group(const std::string& name) const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  check_depth(file_, child_path(name));
  const Kind k = child_kind(name);
  if (k == Kind::missing) fail_h5(file_, "missing group '" + name + "'", child_path(name));
  if (k != Kind::group) fail_h5(file_, "'" + name + "' should be a group", child_path(name));
  Id g(H5Gopen2(id(), name.c_str(), H5P_DEFAULT));
  if (!g.valid()) fail_h5(file_, "cannot open group '" + name + "' (file corrupt?)", child_path(name));
  check_heap_if_reading(g.get(), file_, child_path(name));
  return Group(std::move(g), file_, child_path(name));
}

Dataset Group::dataset(const std::string& name) const {
  InHdf5 in_hdf5(file_.c_str(), path_.c_str());
  const Kind k = child_kind(name);
  if (k == Kind::missing) fail_h5(file_, "missing dataset '" + name + "'", child_path(name));
  if (k != Kind::dataset) fail_h5(file_, "'" + name + "' should be a dataset", child_path(name));
  detail::check_object_header(id(), name, file_, child_path(name));
  Id d(H5Dopen2(id(), name.c_str(), H5P_DEFAULT));
  if (!d.valid()) fail_h5(file_, "cannot open dataset '" + name + "' (file corrupt?)", child_path(name));
  return Dataset(std::move(d), file_, child_path(name));
}

Group Group::create_group(const std::string& name) const {
  Id g(H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!g.valid()) fail_h5_write(file_, "cannot create group '" + name + "'", child_path(name));
  return Group(std::move(g), file_, child_path(name));
}

namespace {
Id dataset_create_plist(const std::vector<int64_t>& dims, size_t elem_size, int gzip) {
  Id pl(H5Pcreate(H5P_DATASET_CREATE));
  int64_t total = 1;
  for (auto d : dims) total *= d;
  if (gzip > 0 && !dims.empty() && total > 0) {
    // Chunks of about 1 MiB along the first axis.
    std::vector<hsize_t> ch(dims.begin(), dims.end());
    int64_t row = 1;
    for (size_t i = 1; i < dims.size(); ++i) row *= dims[i];
    const int64_t target = std::max<int64_t>(1, (int64_t{1} << 20) / static_cast<int64_t>(std::max<size_t>(elem_size, 1)));
    ch[0] = static_cast<hsize_t>(std::clamp<int64_t>(target / std::max<int64_t>(row, 1), 1, dims[0]));
    H5Pset_chunk(pl.get(), static_cast<int>(ch.size()), ch.data());
    H5Pset_deflate(pl.get(), static_cast<unsigned>(std::min(gzip, 9)));
  }
  return pl;
}
}  // namespace

namespace {
// Large contiguous datasets written in the memory's own type bypass H5Dwrite. One thread's write()
// into the page cache runs at ~3 GB/s, and parallel write()s to one file do not scale (the inode's
// lock): a 10 GB scaled X took 3.6 s. Instead the dataset's space is allocated when it is created
// (never filled), reserved on the disk with fallocate (so that a full disk is an ENOSPC here, never
// a SIGBUS in the copy), mapped, and copied into on several threads. Only sec2 files; wherever
// something is not as expected (no fallocate on this file system...), H5Dwrite.
// SCURRY_H5_MMAP_WRITE=0 turns it off; =force takes it for any size (the tests).
bool mapped_write_wanted(size_t bytes, int gzip, DType disk, hid_t file_type, hid_t mem_type) {
  const char* e = std::getenv("SCURRY_H5_MMAP_WRITE");
  if (e && std::strcmp(e, "0") == 0) return false;
  if (bytes == 0 || gzip > 0 || disk == DType::boolean) return false;
  if (bytes < kPreadMinBytes && !(e && std::strcmp(e, "force") == 0)) return false;
  return H5Tequal(file_type, mem_type) > 0;
}

}  // namespace

// [0, len) of src into dst on kPreadThreads threads.
void parallel_copy(char* dst, const char* src, size_t len) {
  // SCURRY_H5_COPY_PIECE=BYTES sets the piece (with SCURRY_H5_MMAP_WINDOW: the A/B of section 43).
  static const size_t piece = [] {
    const char* e = std::getenv("SCURRY_H5_COPY_PIECE");
    return e ? std::max<size_t>(4096, std::strtoull(e, nullptr, 10)) : kCopyPiece;
  }();
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t a; (a = next.fetch_add(piece)) < len;) std::memcpy(dst + a, src + a, std::min(len, a + piece) - a);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < kPreadThreads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

namespace {
// Fills the `bytes` bytes of the (allocated, contiguous) dataset d through a shared mapping of its
// file, a window at a time: fill(dst, offset, len) writes the dataset's bytes [offset, offset + len)
// to dst, windows in order. False where that does not apply (nothing written then). Throws for a
// full disk.
bool write_mapped(hid_t d, const ByteSource& fill, size_t bytes, const std::string& file, const std::string& obj) {
  const auto where = sec2_extent(d, bytes);
  if (!where) return false;
  const uint64_t off = where->offset;
  const int fd = ::open(where->file.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  if (const int err = ::posix_fallocate(fd, static_cast<off_t>(off), static_cast<off_t>(bytes))) {
    if (err == ENOSPC || err == EDQUOT || err == EFBIG) fail_write(file, err, "cannot write dataset at " + obj);
    return false;  // (EOPNOTSUPP, EINVAL: this file system cannot reserve space; H5Dwrite instead)
  }
  // The mapping's pages count in the process's resident set while mapped: the dataset is mapped a
  // window of kMapWindow bytes at a time (unmapped, its pages stay in the page cache, out of the
  // process's RSS), so a write adds at most one window to the peak, not the dataset's size.
  // SCURRY_H5_MMAP_WINDOW=BYTES sets the window (rounded up to whole pages; the tests use one page).
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t window = kMapWindow;
  if (const char* w = std::getenv("SCURRY_H5_MMAP_WINDOW"))
    window = std::max<size_t>(page, (std::strtoull(w, nullptr, 10) + page - 1) / page * page);
  for (size_t w0 = 0; w0 < bytes; w0 += window) {
    const size_t w1 = std::min(bytes, w0 + window), len = w1 - w0;
    const uint64_t at = off + w0;
    const size_t lead = static_cast<size_t>(at % page);
    void* map = ::mmap(nullptr, len + lead, PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(at - lead));
    if (map == MAP_FAILED) {
      if (w0 == 0) return false;  // nothing written yet: H5Dwrite instead
      fail_write(file, errno, "cannot map dataset at " + obj);
    }
    char* dst = static_cast<char*>(map) + lead;
    try {
      fill(dst, w0, len);
    } catch (...) {
      ::munmap(map, len + lead);
      throw;
    }
    if (::munmap(map, len + lead) != 0) fail_write(file, errno, "cannot write dataset at " + obj);
  }
  return true;
}
}  // namespace

template <class T>
Dataset Group::write(const std::string& name, const T* data, const std::vector<int64_t>& dims, DType disk,
                     int gzip) const {
  Id ft = file_type(disk);
  Id space = simple_space(dims);
  Id pl = dataset_create_plist(dims, H5Tget_size(ft.get()), gzip);
  int64_t total = 1;
  for (auto x : dims) total *= x;
  const size_t bytes = total > 0 ? static_cast<size_t>(total) * sizeof(T) : 0;
  const bool mapped = mapped_write_wanted(bytes, gzip, disk, ft.get(), native_type<T>());
  if (mapped && (H5Pset_alloc_time(pl.get(), H5D_ALLOC_TIME_EARLY) < 0 ||
                 H5Pset_fill_time(pl.get(), H5D_FILL_TIME_NEVER) < 0))
    fail_h5_write(file_, "cannot set up dataset '" + name + "'", child_path(name));
  Id d(H5Dcreate2(id(), name.c_str(), ft.get(), space.get(), H5P_DEFAULT, pl.get(), H5P_DEFAULT));
  if (!d.valid()) fail_h5_write(file_, "cannot create dataset '" + name + "'", child_path(name));
  const char* src = reinterpret_cast<const char*>(data);
  if (mapped && write_mapped(d.get(), [src](char* dst, size_t off, size_t len) { parallel_copy(dst, src + off, len); },
                             bytes, file_, child_path(name)))
    return Dataset(std::move(d), file_, child_path(name));
  if (total > 0) {
    herr_t st;
    if (disk == DType::boolean) {
      std::vector<int8_t> b(static_cast<size_t>(total));
      for (size_t i = 0; i < b.size(); ++i) b[i] = data[i] != T(0) ? 1 : 0;
      st = H5Dwrite(d.get(), ft.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, b.data());
    } else {
      st = H5Dwrite(d.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    }
    chk_status(st, file_, "cannot write dataset '" + name + "'", child_path(name));
  }
  return Dataset(std::move(d), file_, child_path(name));
}

template <class T>
Dataset Group::write_from(const std::string& name, const std::vector<int64_t>& dims, DType disk, const ByteSource& fill) const {
  Id ft = file_type(disk);
  Id space = simple_space(dims);
  Id pl = dataset_create_plist(dims, H5Tget_size(ft.get()), 0);
  int64_t total = 1;
  for (auto x : dims) total *= x;
  const size_t bytes = total > 0 ? static_cast<size_t>(total) * sizeof(T) : 0;
  const bool mapped = mapped_write_wanted(bytes, 0, disk, ft.get(), native_type<T>());
  if (mapped && (H5Pset_alloc_time(pl.get(), H5D_ALLOC_TIME_EARLY) < 0 ||
                 H5Pset_fill_time(pl.get(), H5D_FILL_TIME_NEVER) < 0))
    fail_h5_write(file_, "cannot set up dataset '" + name + "'", child_path(name));
  Id d(H5Dcreate2(id(), name.c_str(), ft.get(), space.get(), H5P_DEFAULT, pl.get(), H5P_DEFAULT));
  if (!d.valid()) fail_h5_write(file_, "cannot create dataset '" + name + "'", child_path(name));
  if (mapped && write_mapped(d.get(), fill, bytes, file_, child_path(name)))
    return Dataset(std::move(d), file_, child_path(name));
  if (total > 0) {  // (no mapping here: the whole array gathered first, then H5Dwrite)
    std::vector<T> all;
    resize_large(all, static_cast<size_t>(total));
    fill(reinterpret_cast<char*>(all.data()), 0, bytes);
    chk_status(H5Dwrite(d.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data()), file_,
               "cannot write dataset '" + name + "'", child_path(name));
  }
  return Dataset(std::move(d), file_, child_path(name));
}
template Dataset Group::write_from<float>(const std::string&, const std::vector<int64_t>&, DType, const ByteSource&) const;

#define SCURRY_H5_WRITE(T)                                                                                  \
  template Dataset Group::write<T>(const std::string&, const T*, const std::vector<int64_t>&, DType, int) \
      const;
SCURRY_H5_WRITE(float)
SCURRY_H5_WRITE(double)
SCURRY_H5_WRITE(int8_t)
SCURRY_H5_WRITE(uint8_t)
SCURRY_H5_WRITE(int16_t)
SCURRY_H5_WRITE(int32_t)
SCURRY_H5_WRITE(int64_t)
#undef SCURRY_H5_WRITE

// Long string arrays of near-equal lengths (cell barcodes, gene names) are written as fixed-length
// null-padded UTF-8: one contiguous buffer. Variable-length strings cost HDF5 a global-heap object
// each (1.3M cell names: ~0.7 s against a few ms). h5py and anndata read both kinds as str. The
// fixed width must not waste much (n x width <= 2 x the bytes + 8 n) and no string may hold a NUL.
Dataset Group::write_strings(const std::string& name, const std::vector<std::string>& values, int gzip) const {
  size_t width = 0, bytes = 0;
  bool nul = false;
  for (const auto& v : values) {
    width = std::max(width, v.size());
    bytes += v.size();
    nul = nul || v.find('\0') != std::string::npos;
  }
  const size_t n = values.size();
  const bool fixed = n >= kFixedStringsMin && !nul && width > 0 && n * width <= 2 * bytes + 8 * n;
  Id t = vlen_utf8();
  if (fixed) {
    t = Id(H5Tcopy(H5T_C_S1));
    if (!t.valid() || H5Tset_size(t.get(), width) < 0 || H5Tset_cset(t.get(), H5T_CSET_UTF8) < 0 ||
        H5Tset_strpad(t.get(), H5T_STR_NULLPAD) < 0)
      fail_h5(file_, "cannot build a string type for '" + name + "'", child_path(name));
  }
  const std::vector<int64_t> dims{static_cast<int64_t>(n)};
  Id space = simple_space(dims);
  Id pl = dataset_create_plist(dims, fixed ? width : 16, gzip);
  Id d(H5Dcreate2(id(), name.c_str(), t.get(), space.get(), H5P_DEFAULT, pl.get(), H5P_DEFAULT));
  if (!d.valid()) fail_h5_write(file_, "cannot create dataset '" + name + "'", child_path(name));
  if (fixed) {
    std::vector<char> buf(n * width, '\0');
    for (size_t i = 0; i < n; ++i) std::memcpy(buf.data() + i * width, values[i].data(), values[i].size());
    chk_status(H5Dwrite(d.get(), t.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), file_,
               "cannot write dataset '" + name + "'", child_path(name));
  } else if (n > 0) {
    std::vector<const char*> p(n);
    for (size_t i = 0; i < n; ++i) p[i] = values[i].c_str();
    chk_status(H5Dwrite(d.get(), t.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, p.data()), file_,
               "cannot write dataset '" + name + "'", child_path(name));
  }
  return Dataset(std::move(d), file_, child_path(name));
}

Dataset Group::write_compound(const std::string& name, const RecArray& a, int gzip) const {
  const size_t n = static_cast<size_t>(a.n);
  // Packed record layout: a char* per string field, the dtype's width per numeric field.
  std::vector<size_t> offset(a.fields.size());
  size_t rec = 0;
  for (size_t f = 0; f < a.fields.size(); ++f) {
    const RecField& fl = a.fields[f];
    if ((fl.is_string ? fl.str.size() : fl.num.size()) != n)
      fail_input(file_, element_name(child_path(name)), ": record field '", fl.name, "' has ",
                 fl.is_string ? fl.str.size() : fl.num.size(), " values, expected ", n);
    offset[f] = rec;
    rec += fl.is_string ? sizeof(char*) : static_cast<size_t>(dtype_size(fl.dtype));
  }
  if (a.fields.empty()) fail_input(file_, element_name(child_path(name)), ": a record array needs at least one field");
  Id mt(H5Tcreate(H5T_COMPOUND, rec));
  std::vector<Id> members;
  for (size_t f = 0; f < a.fields.size(); ++f) {
    const RecField& fl = a.fields[f];
    members.push_back(fl.is_string ? vlen_utf8() : file_type(fl.dtype));
    if (H5Tinsert(mt.get(), fl.name.c_str(), offset[f], members.back().get()) < 0)
      fail_h5(file_, "cannot build the record type (field '" + fl.name + "')", child_path(name));
  }
  std::vector<unsigned char> buf(n * rec);
  for (size_t f = 0; f < a.fields.size(); ++f) {
    const RecField& fl = a.fields[f];
    for (size_t i = 0; i < n; ++i) {
      unsigned char* dst = buf.data() + i * rec + offset[f];
      if (fl.is_string) {
        const char* p = fl.str[i].c_str();
        std::memcpy(dst, &p, sizeof p);
        continue;
      }
      const double v = fl.num[i];
      switch (fl.dtype) {
        case DType::f32: { const float x = static_cast<float>(v); std::memcpy(dst, &x, 4); break; }
        case DType::f64: std::memcpy(dst, &v, 8); break;
        case DType::i8: case DType::boolean: { const int8_t x = static_cast<int8_t>(v); std::memcpy(dst, &x, 1); break; }
        case DType::u8: { const uint8_t x = static_cast<uint8_t>(v); std::memcpy(dst, &x, 1); break; }
        case DType::i16: { const int16_t x = static_cast<int16_t>(v); std::memcpy(dst, &x, 2); break; }
        case DType::u16: { const uint16_t x = static_cast<uint16_t>(v); std::memcpy(dst, &x, 2); break; }
        case DType::i32: { const int32_t x = static_cast<int32_t>(v); std::memcpy(dst, &x, 4); break; }
        case DType::u32: { const uint32_t x = static_cast<uint32_t>(v); std::memcpy(dst, &x, 4); break; }
        case DType::i64: { const int64_t x = static_cast<int64_t>(v); std::memcpy(dst, &x, 8); break; }
        case DType::u64: { const uint64_t x = static_cast<uint64_t>(v); std::memcpy(dst, &x, 8); break; }
      }
    }
  }
  const std::vector<int64_t> dims{static_cast<int64_t>(n)};
  Id space = simple_space(dims);
  Id pl = dataset_create_plist(dims, rec, gzip);
  Id d(H5Dcreate2(id(), name.c_str(), mt.get(), space.get(), H5P_DEFAULT, pl.get(), H5P_DEFAULT));
  if (!d.valid()) fail_h5_write(file_, "cannot create dataset '" + name + "'", child_path(name));
  if (n > 0)
    chk_status(H5Dwrite(d.get(), mt.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), file_,
               "cannot write dataset '" + name + "'", child_path(name));
  return Dataset(std::move(d), file_, child_path(name));
}

RecArray Dataset::read_compound() const {
  Id ft(H5Dget_type(id()));
  if (!ft.valid() || H5Tget_class(ft.get()) != H5T_COMPOUND) fail_h5(file_, "is not a compound (record) dataset", path_);
  const auto sh = shape();
  if (sh.size() != 1) fail_input(file_, element_name(path_), ": record arrays must be 1-D, found ", sh.size(), " dimensions");
  RecArray a;
  a.n = sh[0];
  const int nm = H5Tget_nmembers(ft.get());
  for (int m = 0; m < nm; ++m) {
    char* cname = H5Tget_member_name(ft.get(), static_cast<unsigned>(m));
    RecField fl;
    fl.name = cname ? cname : "";
    H5free_memory(cname);
    Id mt_file(H5Tget_member_type(ft.get(), static_cast<unsigned>(m)));
    const TypeInfo ti = describe_type(mt_file.get());
    if (ti.is_string) {
      // One-member memory compound: HDF5 converts that member only (fixed or vlen to vlen UTF-8).
      Id st = vlen_utf8();
      Id mt(H5Tcreate(H5T_COMPOUND, sizeof(char*)));
      H5Tinsert(mt.get(), fl.name.c_str(), 0, st.get());
      std::vector<char*> p(static_cast<size_t>(a.n), nullptr);
      if (a.n > 0 && H5Dread(id(), mt.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, p.data()) < 0)
        fail_h5(file_, "cannot read record field '" + fl.name + "'", path_);
      fl.is_string = true;
      fl.str.resize(p.size());
      for (size_t i = 0; i < p.size(); ++i) fl.str[i] = p[i] ? p[i] : "";
      if (a.n > 0) {
        Id space(H5Dget_space(id()));
        H5Dvlen_reclaim(mt.get(), space.get(), H5P_DEFAULT, p.data());
      }
    } else if (ti.cls == H5T_INTEGER || ti.cls == H5T_FLOAT || ti.is_bool) {
      fl.dtype = dtype_of(mt_file.get(), file_, path_ + "." + fl.name);
      Id mt(H5Tcreate(H5T_COMPOUND, sizeof(double)));
      Id base(H5Tcopy(ti.is_bool ? H5T_NATIVE_INT8 : H5T_NATIVE_DOUBLE));
      if (ti.is_bool) {
        // h5py's bool enum member: read its int8 values.
        Id mt8(H5Tcreate(H5T_COMPOUND, 1));
        H5Tinsert(mt8.get(), fl.name.c_str(), 0, mt_file.get());
        std::vector<int8_t> b(static_cast<size_t>(a.n));
        if (a.n > 0 && H5Dread(id(), mt8.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, b.data()) < 0)
          fail_h5(file_, "cannot read record field '" + fl.name + "'", path_);
        fl.num.assign(b.begin(), b.end());
      } else {
        H5Tinsert(mt.get(), fl.name.c_str(), 0, base.get());
        fl.num.resize(static_cast<size_t>(a.n));
        if (a.n > 0 && H5Dread(id(), mt.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, fl.num.data()) < 0)
          fail_h5(file_, "cannot read record field '" + fl.name + "'", path_);
      }
    } else {
      fail_input(file_, element_name(path_), ": record field '", fl.name, "' has an unsupported type (nested or opaque)");
    }
    a.fields.push_back(std::move(fl));
  }
  return a;
}

Dataset Group::write_string(const std::string& name, const std::string& value) const {
  Id t = vlen_utf8();
  Id space(H5Screate(H5S_SCALAR));
  Id d(H5Dcreate2(id(), name.c_str(), t.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!d.valid()) fail_h5_write(file_, "cannot create dataset '" + name + "'", child_path(name));
  const char* p = value.c_str();
  chk_status(H5Dwrite(d.get(), t.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p), file_,
             "cannot write dataset '" + name + "'", child_path(name));
  return Dataset(std::move(d), file_, child_path(name));
}

// ---- File -----------------------------------------------------------------------------------------

File File::open(const std::string& path, bool write) {
  quiet();
  InHdf5 in_hdf5(path.c_str(), "/");
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail_h5(path, "no such file", path);
  if (std::filesystem::is_directory(path, ec)) fail_h5(path, "is a directory, not an HDF5 file", path);
  refuse_special_file(path);  // H5Fis_hdf5 would block forever on a FIFO
  const htri_t is = H5Fis_hdf5(path.c_str());
  if (is == 0) fail_h5(path, "not an HDF5 file (no HDF5 signature)", path);
  if (!write && is > 0) detail::check_root_header(path);
  Id fapl(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG);
  Id f(H5Fopen(path.c_str(), write ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl.get()));
  if (!f.valid()) {
    if (is < 0) fail_h5(path, "cannot be opened for reading (permissions?)", path);
    fail_h5(path, "cannot open the HDF5 file: it is truncated or corrupt", path);
  }
  if (!write) detail::check_local_heap(f.get(), path, "/");
  return File(std::move(f), path);
}

File File::create(const std::string& path) {
  quiet();
  Id fapl(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG);
  Id f(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get()));
  if (!f.valid()) {
    if (const int err = stack_errno()) fail_write(path, err, "cannot create the file", true);
    fail_h5(path, "cannot create the file (does the directory exist and is it writable?)", path);
  }
  return File(std::move(f), path);
}

void File::close() {
  if (!id_.valid()) return;
  // Flush first: a flush that fails (a full disk) leaves the file open, and discard() then frees the
  // space it holds (HDF5 1.10 can close such a file no more: see g_no_atexit).
  unsigned intent = 0;
  if (H5Fget_intent(id_.get(), &intent) >= 0 && (intent & H5F_ACC_RDWR) && H5Fflush(id_.get(), H5F_SCOPE_LOCAL) < 0)
    fail_h5_write(file_, "cannot finish writing the file", "/");
  const herr_t st = H5Fclose(id_.get());
  // H5Fclose consumed the identifier, or failed (its final flush) and left the file half torn down:
  // HDF5 1.10 crashes when such a file is closed again. Forget it either way.
  id_.release();
  if (st < 0) fail_h5_write(file_, "cannot finish writing the file", "/");
}

void File::discard() noexcept {
  if (!id_.valid()) return;
  Id fapl(H5Fget_access_plist(id_.get()));
  void* handle = nullptr;
  if (fapl.valid() && H5Pget_driver(fapl.get()) == H5FD_SEC2 && H5Fget_vfd_handle(id_.get(), fapl.get(), &handle) >= 0 &&
      handle) {
    [[maybe_unused]] const int r = ftruncate(*static_cast<int*>(handle), 0);  // the sec2 driver's descriptor
  }
  H5Fclose(id_.get());  // fails again after a failed flush: forgotten, never retried
  id_.release();
}

File::~File() {
  if (!id_.valid()) return;
  InHdf5 in_hdf5(file_.c_str(), "/");
  H5Fclose(id_.get());
  id_.release();
}

}  // namespace scurry::h5
