// scurry: large host buffers. A multi-gigabyte std::vector is first touched page by page; with 4 KiB
// pages that is one page fault per 4 KiB, which dominates reading and copying on virtual machines.
// Asking for transparent huge pages (2 MiB) before the first touch cuts the faults 512-fold.
#pragma once
#include <cstddef>
#include <vector>

namespace scurry {

// madvise(MADV_HUGEPAGE) on the whole pages inside [p, p + bytes), when bytes is large; never fails.
void advise_huge_pages(void* p, size_t bytes);

// v.resize(n) for a large buffer about to be overwritten: reserves, advises huge pages, then resizes.
template <class T>
void resize_large(std::vector<T>& v, size_t n) {
  if (n > v.capacity()) {
    v.reserve(n);
    advise_huge_pages(v.data(), n * sizeof(T));
  }
  v.resize(n);
}

// Touches `bytes` of the main thread's malloc heap (in pieces below the mmap threshold, on `threads`
// threads) and frees them again: later allocations of the process reuse those pages instead of
// faulting fresh ones one by one (a cold 1.3M-cell GPU run allocates ~1 GB of host vectors, ~0.1 s of
// page faults on one thread). Needs M_TRIM_THRESHOLD above `bytes` (main() sets 1 GiB). Call from the
// main thread.
void prefault_heap(size_t bytes, int threads);

}  // namespace scurry
