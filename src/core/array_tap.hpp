// scurry: watching a large array while a reader fills it. A GPU run copies X's CSR arrays to the
// device piece by piece as the reader's threads finish them (exec/device_tap.hpp), so the upload
// overlaps the read (issue 15: the read is bound by the disk or the decompression, the CPUs and the
// copy engine are idle meanwhile).
//
// Contract for readers: begin(n, elem_size) once, on the reading call's thread, before any piece;
// then piece(src, e0, e1) for every element range [e0, e1) of the output once its values are final
// (converted to the output type), from any reading thread, concurrently, in any order, every element
// exactly once; src points at element e0 of the output. piece may throw (the read then fails); when
// it returns, the tap no longer reads src. A reader that cannot tap a path (a conversion through the
// library, a gather) gives the whole array as one piece at the end.
#pragma once
#include <cstddef>

namespace scurry {

class ArrayTap {
 public:
  virtual ~ArrayTap() = default;
  virtual void begin(size_t n, size_t elem_size) = 0;
  virtual void piece(const void* src, size_t e0, size_t e1) = 0;
};

// The taps of a CSR matrix's three arrays (null: not watched). Readers tap only a CSR matrix read
// as it is stored (not a CSC one transposed after the read) with float32 values.
struct CsrTap {
  ArrayTap* indptr = nullptr;   // int64
  ArrayTap* indices = nullptr;  // int32
  ArrayTap* data = nullptr;     // float32
  explicit operator bool() const { return indptr || indices || data; }
};

// One whole array through a tap (the readers' fallback paths).
inline void tap_whole(ArrayTap* tap, const void* data, size_t n, size_t elem_size) {
  if (!tap) return;
  tap->begin(n, elem_size);
  if (n) tap->piece(data, 0, n);
}

}  // namespace scurry
