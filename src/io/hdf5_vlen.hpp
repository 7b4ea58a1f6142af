// scurry: variable-length strings read without libhdf5's vlen conversion (issue 16 point 4).
//
// A variable-length string is stored as a heap reference -- a u32 length, the address of a global
// heap collection (sizeof_offsets bytes) and a u32 object index -- and its bytes as an object of
// that collection (HDF5 File Format Specification 3.0, section III.E "Global Heap", and section
// IV.A.2.d, the variable-length datatype). libhdf5 1.10.8 follows the references without checking
// them (H5T__conv_vlen -> H5HG_read): a collection whose object sizes run past its end, an object
// longer than the string, or a free-space object of size 0 crashes it or makes it loop forever.
// Here the references are read from the file's bytes (pread; chunks found with H5Dget_chunk_info
// and decoded by our own inflate and unshuffle), every collection they name is parsed and checked
// (the walk libhdf5's H5HG__cache_heap_deserialize makes), and each string is copied from its
// object: H5Dread never follows a heap reference. Internal to the h5 wrappers (io/hdf5.cpp).
#pragma once
#include <hdf5.h>

#include <optional>
#include <string>
#include <vector>

namespace scurry::h5::detail {

// The n variable-length strings of dataset `dset` (1-D or scalar, contiguous or chunked with
// deflate/shuffle filters), read from the file's bytes. Throws InputError "FILE: corrupt
// variable-length string storage (...) (OBJ)" for a damaged reference, collection or chunk.
// Returns nullopt when the layout is one it does not read (compact storage, other filters, a
// userblock with chunks, an unusual address size): the caller reads through libhdf5.
std::optional<std::vector<std::string>> read_vlen_strings(hid_t dset, size_t n, const std::string& file,
                                                          const std::string& obj);

// Checks the heap references of the variable-length string attribute `name` of object `obj_id`
// (n elements) before H5Aread follows them: the attribute message is found in the object's header
// (versions 1 and 2, continuation blocks followed; section IV.A of the specification) and its
// references checked as above. Throws InputError naming the attribute when one is damaged; does
// nothing when the message cannot be located (dense attribute storage): libhdf5 reads it then.
void check_vlen_attribute(hid_t obj_id, const std::string& name, size_t n, const std::string& file,
                          const std::string& where);

// Whether the file of `obj` is open read-only. The checks below read the file's bytes, which a
// file being written has not all flushed, so they run on such files only.
bool opened_read_only(hid_t obj);

// Checks every attribute message in the object header of `obj_id` (a file opened read-only) before
// libhdf5 decodes them (H5Aexists, H5Aopen, H5Aiterate decode each message they pass): libhdf5
// 1.10.8 copies an attribute's name with strdup and its data by the size its datatype and
// dataspace claim, with no check against the message's own size (a heap overflow in
// H5O__msg_iterate_real's decoder, found by fuzz_h5ad). Each message's name must be NUL-terminated
// at its stated length, and its name, datatype, dataspace and data must fit the message.
// InputError "FILE: corrupt attribute message: ... (OBJ)"; nothing for attributes in dense storage
// (a fractal heap) or a header it cannot read.
void check_attribute_messages(hid_t obj_id, const std::string& file, const std::string& where);

// Checks the object header of `loc`'s member `name` (a file opened read-only) before libhdf5 opens
// it: its dataspace, datatype and fill value messages must fit their message sizes (libhdf5
// 1.10.8's H5D_open decodes them unbounded: a heap overflow in H5O_msg_read_oh, found by
// fuzz_h5ad). InputError "FILE: corrupt datatype message: ... (OBJ)"; nothing for a header it
// cannot read.
void check_object_header(hid_t loc, const std::string& name, const std::string& file, const std::string& where);
// The chunks of the object header that link `name` of `loc` points to (a hard link; others are not
// looked at) lie inside the file: libhdf5 allocates each chunk's stated size before it reads it (a
// fuzzed h5ad's header claimed 20 GB under H5Oget_info). The link is looked up without opening the
// object. InputError when not; nothing for a file opened for writing.
void check_header_extent(hid_t loc, const std::string& name, const std::string& file, const std::string& where);

// Checks the local heap of an old-style group (one with a symbol table message: h5py's default)
// before libhdf5 reads it: its free list must stay inside the heap's data and end (libhdf5 1.10.8
// follows a looping list, allocating until memory runs out). InputError "FILE: corrupt group ...
// (GROUP)"; nothing for new-style groups or a header it cannot read.
void check_local_heap(hid_t group, const std::string& file, const std::string& where);
// Before H5Fopen (read-only): the superblock's root group object header, every chunk of it inside
// the file (libhdf5 allocates each by its stated length while opening). InputError otherwise.
void check_root_header(const std::string& file);

}  // namespace scurry::h5::detail
