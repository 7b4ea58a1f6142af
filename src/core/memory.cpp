#include "core/memory.hpp"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <omp.h>

namespace scurry {

void advise_huge_pages(void* p, size_t bytes) {
  constexpr size_t kMin = size_t(8) << 20;  // below this the faults do not matter
  if (!p || bytes < kMin) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_HUGEPAGE);
}

void touch_pages(void* p, size_t bytes) {
  constexpr size_t kMin = size_t(64) << 20;
  if (!p || bytes < kMin) return;
  char* c = static_cast<char*>(p);
  const int64_t pages = static_cast<int64_t>((bytes + 4095) / 4096);
  const int threads = std::min(8, omp_get_max_threads());
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < pages; ++i) c[std::min(bytes - 1, static_cast<size_t>(i) * 4096)] = 0;
}

void prefault_heap(size_t bytes, int threads) {
  constexpr size_t kPiece = size_t(24) << 20;  // below the 32 MiB mmap threshold main() sets
  std::vector<char*> pieces;
  for (size_t done = 0; done < bytes; done += kPiece) {
    char* p = static_cast<char*>(std::malloc(kPiece));
    if (!p) break;
    pieces.push_back(p);
  }
  const int64_t n = static_cast<int64_t>(pieces.size());
  const long page = sysconf(_SC_PAGESIZE);
#pragma omp parallel for schedule(static) num_threads(threads > 0 ? threads : omp_get_max_threads())
  for (int64_t i = 0; i < n; ++i)
    for (size_t off = 0; off < kPiece; off += static_cast<size_t>(page)) pieces[i][off] = 0;
  for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) std::free(*it);
}

void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace scurry
