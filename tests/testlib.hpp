// scurry test helpers: paths to the real data in the repository, temporary directories, seeded random inputs.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"
#include "graph/knn.hpp"

namespace scurry::test {

// The repository's root: the checkout the tests were built from, or SCURRY_SOURCE_DIR from the
// environment where it is set (test binaries run on another machine).
std::string source_dir();
// tests/data/<rel> inside the repository (the pbmc3k subset as h5ad, scanpy's golden outputs on it;
// see tests/data/README.md).
std::string test_data(const std::string& rel);
// data/<rel> inside the repository.
std::string repo_data(const std::string& rel);
// The built `scurry` executable (SCURRY_BINARY in the environment overrides it).
std::string scurry_binary();

// A fresh empty directory, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

// A seed that differs run to run unless SCURRY_TEST_SEED is set; printed so a failure can be replayed.
uint64_t fresh_seed();

// A random CSR count matrix: each entry nonzero with probability `density`, values 1..max_count
// (integers stored as float), sorted column indices.
CsrF random_counts(int64_t rows, int64_t cols, double density, uint64_t seed, int max_count = 20);

// True if a CUDA device is usable; GPU tests call GTEST_SKIP() with a message otherwise.
bool have_gpu();

// A seeded synthetic count matrix with cluster structure (scurry simulate's model, simulated on the
// CPU) with a fresh_seed(): the preprocessing tests' input.
Dataset simulated_counts(int64_t cells, int64_t genes, double nnz_per_cell);

// Seeded clustered points: `clusters` Gaussian blobs (centres sd 5 around `offset`, points sd 1) in d
// dims; the offset makes norms large against neighbour distances (it stresses a float32 GEMM).
DenseF clustered_points(int64_t n, int64_t d, int clusters, uint64_t seed, float offset = 20.0f);

// The kNN oracle for one row: float64 distances (euclidean, or cosine 1 - cos with 1 for a zero
// row) to every other row, sorted by (distance, index), the first `keep` kept.
std::vector<std::pair<double, int32_t>> knn_oracle_row(const DenseF& x, int64_t i, KnnMetric metric, size_t keep);

// An n_rows x n_cols CSR from per-row (column, weight) lists: columns sorted, a repeated column's
// weights summed (sorts `rows` in place).
CsrF csr_from_rows(std::vector<std::vector<std::pair<int32_t, float>>>& rows, int64_t n_cols);

// A planted partition (the Leiden tests' graph): `blocks` groups of equal size; each node draws
// `intra` partners in its group and `inter` anywhere, weights U(0.1, 1); the first `hubs` nodes of
// each group draw 300-3,000 more partners in their group; symmetric, duplicates summed, sorted
// columns. truth_out (optional): each node's group.
CsrF planted_partition(int64_t n, int64_t blocks, int intra, int inter, uint64_t seed, int hubs = 0,
                       std::vector<int32_t>* truth_out = nullptr);

// Three GPU contexts: devices 0, 1, 0 (round robin) when there are two or more, else all on device 0
// (several contexts on one GPU run the same multi-GPU code).
std::vector<Context> three_gpu_contexts();

// A context on the first GPU.
Context gpu_context();

// Embedding quality, for the UMAP tests: the mean share of each row's k nearest neighbours in `ref`
// found among its k nearest in `emb` (self excluded; exact searches on ctx), and the leave-one-out
// k-nearest-neighbour majority-vote accuracy of `labels` in `emb`.
double knn_preservation(const Context& ctx, const DenseF& ref, const DenseF& emb, int64_t k);
double knn_accuracy(const Context& ctx, const DenseF& emb, const std::vector<int32_t>& labels, int64_t k);

}  // namespace scurry::test

#define SCURRY_REQUIRE_GPU()                                                   \
  do {                                                                         \
    if (!::scurry::test::have_gpu()) GTEST_SKIP() << "no CUDA device visible"; \
  } while (0)
