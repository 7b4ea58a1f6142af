// scurry: what stands between a corrupt HDF5 file and a bare SIGSEGV. Debian's libhdf5 1.10.8
// crashes (SIGSEGV, SIGBUS, SIGFPE; SIGABRT from glibc's stack protector) on some corrupt files -- variable-length strings through the
// global heap, chunk layouts in H5Dopen2, H5Dread's scatter -- inside calls that cannot be made
// safe from outside. The CLI arms a handler of those signals (install_hdf5_crash_guard, on an
// alternate stack, so that a stack overflow in the library is caught too). While a thread is inside
// libhdf5 for scurry's h5 wrappers (an InHdf5 scope: the file and the element being read, as two
// pointers), a crash there is reported as one line,
//   scurry: corrupt HDF5 file: the HDF5 library failed reading FILE (ELEMENT) [SIGSEGV]
// the registered temporary outputs are removed (core/output.hpp) and the process ends with exit 2
// (bad input). A crash outside libhdf5 keeps the action it had (the default, or a sanitizer's).
//
// Hangs: libhdf5 1.10.8 also loops forever on some corrupt files (a global heap collection whose
// free-space object has size 0, read for a variable-length string attribute; damaged B-trees). No
// HDF5 property bounds those loops. Calls that only read metadata (opening objects, looking up
// links, attributes, dataspaces and types: InHdf5 scopes with `metadata` set) take microseconds to
// milliseconds on any real file; the guard's watchdog thread ends a process that has spent more
// than kMetadataHangSeconds (60 s; SCURRY_HDF5_HANG_SECONDS overrides it) inside one of them with
//   scurry: corrupt HDF5 file: the HDF5 library hangs reading FILE (ELEMENT) [no progress in 60 s]
// exit 2 and the temporaries removed. Data reads (H5Dread of a dataset) are not bounded: they can
// legitimately take minutes on a large file, so a hang inside one remains (none is known that the
// checks before the read in io/hdf5.cpp do not refuse first).
//
// The fuzz targets do not arm it: the fuzzer has to see a crash in libhdf5 as a crash.
#pragma once

namespace scurry::h5 {

// Installs the handler (idempotent; the CLI's main calls it).
void install_hdf5_crash_guard();
bool hdf5_crash_guard_installed();
constexpr int kMetadataHangSeconds = 60;

// Marks the calling thread as inside libhdf5 reading `file` (`element`) for its lifetime. Both
// strings must outlive the scope. Nested scopes restore the outer one. Cheap: two pointers.
class InHdf5 {
 public:
  InHdf5(const char* file, const char* element, bool metadata = true) noexcept;
  ~InHdf5();
  InHdf5(const InHdf5&) = delete;
  InHdf5& operator=(const InHdf5&) = delete;

 private:
  const char* prev_file_;
  const char* prev_element_;
  bool timed_ = false;  // this scope started the watchdog's clock
};

}  // namespace scurry::h5
