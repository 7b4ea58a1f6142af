// Test helpers shared by the zarr and reader-coercion tests: reading and rewriting a store's JSON
// metadata and raw chunk files in place, to craft malformed stores.
#pragma once
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include <gtest/gtest.h>

namespace scurry::test {

inline nlohmann::json load_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  return nlohmann::json::parse(in);
}
inline void save_json(const std::filesystem::path& p, const nlohmann::json& j) {
  std::ofstream out(p);
  out << j.dump(2);
}
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
inline void spit(const std::filesystem::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(s.data(), static_cast<std::streamsize>(s.size()));
}

}  // namespace scurry::test
