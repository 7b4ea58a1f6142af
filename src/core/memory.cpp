#include "core/memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace scurry {

void advise_huge_pages(void* p, size_t bytes) {
  constexpr size_t kMin = size_t(8) << 20;  // below this the faults do not matter
  if (!p || bytes < kMin) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_HUGEPAGE);
}

}  // namespace scurry
