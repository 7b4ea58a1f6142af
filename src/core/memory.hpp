// scurry: large host buffers. A multi-gigabyte std::vector is first touched page by page; with 4 KiB
// pages that is one page fault per 4 KiB, which dominates reading and copying on virtual machines.
// Asking for transparent huge pages (2 MiB) before the first touch cuts the faults 512-fold.
#pragma once
#include <cstddef>
#include <type_traits>
#include <vector>

namespace scurry {

// madvise(MADV_HUGEPAGE) on the whole pages inside [p, p + bytes), when bytes is large; never fails.
void advise_huge_pages(void* p, size_t bytes);

// Faults in the pages of [p, p + bytes) on several threads (one write per 4 KiB), so that a first
// pass over a fresh buffer (vector's zero fill, a read into it) finds them mapped; small buffers are
// left alone.
void touch_pages(void* p, size_t bytes);

// v.resize(n) for a large buffer about to be overwritten: reserves, advises huge pages, faults the
// pages in on several threads (the allocation's storage, before the elements exist: trivial types
// only), then resizes (the zero fill then runs at memory speed, not at the page-fault rate).
template <class T>
void resize_large(std::vector<T>& v, size_t n) {
  if (n > v.capacity()) {
    v.reserve(n);
    advise_huge_pages(v.data(), n * sizeof(T));
    if constexpr (std::is_trivially_default_constructible_v<T>)
      touch_pages(v.data() + v.size(), (n - v.size()) * sizeof(T));
  }
  v.resize(n);
}

// Touches `bytes` of the main thread's malloc heap (in pieces below the mmap threshold, on `threads`
// threads) and frees them again: later allocations of the process reuse those pages instead of
// faulting fresh ones one by one (a cold 1.3M-cell GPU run allocates ~1 GB of host vectors, ~0.1 s of
// page faults on one thread). Needs M_TRIM_THRESHOLD above `bytes` (main() sets 1 GiB). Call from the
// main thread.
void prefault_heap(size_t bytes, int threads);

// Large vectors come and go step after step: keeps freed memory in the heap for reuse rather than
// returning it to the kernel (mallopt: allocations below 32 MiB from the heap, up to 1 GiB of free
// memory kept at its top). The CLI's main() calls it first; the Python package on its first GPU
// upload (with prefault_heap), since a chain of resident steps allocates the same host vectors
// step after step.
void keep_freed_memory();

}  // namespace scurry
