// scurry: element types as stored on disk (h5ad/zarr/10x). In memory, matrices hold float or double
// values; the on-disk type is kept so that a file written back has the dtype it was read with.
#pragma once
#include <cstdint>
#include <string>

namespace scurry {

enum class DType : uint8_t { f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, boolean };

inline bool is_integer(DType t) { return t != DType::f32 && t != DType::f64 && t != DType::boolean; }
inline bool is_float(DType t) { return t == DType::f32 || t == DType::f64; }
// numpy's name for the type ("float32", "int64", "bool", ...).
const char* dtype_name(DType t);
// Bytes per element.
int dtype_size(DType t);

}  // namespace scurry
