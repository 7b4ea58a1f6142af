// Checks shared by the Leiden tests of the CPU and GPU paths.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "graph/leiden.hpp"

namespace scurry::test {

// Labels numbered 0..n_clusters-1 by decreasing size, every label used.
inline void expect_numbered_by_size(const LeidenResult& r) {
  std::vector<int64_t> size(static_cast<size_t>(r.n_clusters), 0);
  for (int32_t l : r.labels) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, r.n_clusters);
    ++size[l];
  }
  for (int64_t x : size) EXPECT_GT(x, 0);
  EXPECT_TRUE(std::is_sorted(size.rbegin(), size.rend()));
}

}  // namespace scurry::test
