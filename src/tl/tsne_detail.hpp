// scurry: the host pieces of t-SNE (tsne.cpp) that the GPU path (tsne_gpu*.cu) shares, so that both
// validate, size the kNN, start and shape the FFT grid the same way. Internal: not a public API.
#pragma once
#include <cstdint>
#include <vector>

#include "core/matrix.hpp"
#include "graph/knn.hpp"
#include "tl/tsne.hpp"

namespace scurry::tsne_detail {

// InputError for options or sizes t-SNE does not take (n cells).
void check_options(const TsneOptions& opt, int64_t n);
// Whether the repulsion sums all pairs (method exact, or auto below exact_below cells).
bool exact_repulsion(const TsneOptions& opt, int64_t n);
// sklearn's n_neighbors = min(n - 1, int(3 * perplexity + 1)), the cell itself excluded.
int64_t n_neighbors(const TsneOptions& opt, int64_t n);
// The rows of a self-kNN (k + 1 a row) without the cell itself: nbr and squared distances (euclidean;
// cosine distances as they are), n x k. InputError when an approximate search left a row short.
void neighbours_without_self(const Knn& knn, int64_t k, KnnMetric metric, int threads, std::vector<int32_t>& nbr,
                             std::vector<double>& sq);

// The grid of one evaluation: `boxes` a side of width `bw`, p nodes a box, padded to M = 2 p boxes.
struct GridShape {
  int64_t boxes = 0, M = 0;
  double bw = 0;
};
// The grid for a layout whose coordinates span `span` (max - min over both dimensions).
GridShape grid_shape(double span, const TsneOptions& opt);
bool fft_friendly(int64_t m);  // m = 2^a 3^b 5^c

// sklearn's PCA start (init 'pca'): column means (in double, each column summed in row order), the
// covariance of the centred rows (d x d, both triangles), then the layout (n x 2, row-major) from the
// covariance: Jacobi, two leading components, svd_flip signs, column 0 scaled to std 1e-4.
std::vector<double> column_means(const DenseF& X, int threads);
std::vector<double> covariance(const DenseF& X, const std::vector<double>& mean);
std::vector<double> pca_layout(const DenseF& X, const std::vector<double>& mean, std::vector<double> C, int threads);
// init 'random': 1e-4 N(0, 1) from a mt19937_64 seeded with `seed`.
std::vector<double> random_layout(int64_t n, uint64_t seed);

}  // namespace scurry::tsne_detail
