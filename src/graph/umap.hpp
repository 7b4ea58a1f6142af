// scurry: UMAP layout of the neighbourhood graph, scanpy 1.9.6's `sc.tl.umap` (umap-learn 0.5.3's
// simplicial_set_embedding with euclidean output).
//
// Steps as umap: a, b fitted by find_ab_params; graph edges below max_weight / n_epochs removed;
// initial layout spectral (spectral.hpp), scaled to max |x| = 10 plus Gaussian noise (sd 1e-4), or
// uniform in [-10, 10]; each column rescaled to [0, 10]; then n_epochs of SGD over the edges (both
// directions of every edge, row-major order) following umap's epochs_per_sample schedule:
// attraction 2ab d^(2(b-1)) / (1 + a d^(2b)), `negative_sample_rate` negative samples per positive
// one with repulsion 2 gamma b / ((0.001 + d^2)(1 + a d^(2b))), every gradient component clipped to
// [-4, 4], learning rate alpha (1 - epoch / n_epochs).
//
// Determinism: a seed gives the same embedding for any thread count (the batched SGD: fixed groups
// and orders, umap_sgd.hpp; the sequential one: one thread in umap's order). Random numbers (documented, not numpy's): the
// random initial layout comes from std::mt19937_64 (seed random_state) through 53-bit uniforms,
// the spectral layout's noise from counter-based normals (spectral::gaussian_at, one per entry, so
// that it is drawn on the threads); the sequential SGD's negative samples from umap's
// three-component Tausworthe generator (tau_rand_int, 32-bit) seeded from the mt19937_64 stream,
// the batched SGD's from a counter-based hash (umap_sgd.hpp). Results therefore differ from umap-learn's
// value by value but not in distribution.
//
// Differences from umap-learn: a disconnected graph is initialised at random (umap lays out each
// component spectrally and places the components by their centroids' spectral embedding).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"
#include "graph/umap_sgd.hpp"

namespace scurry {

struct UmapOptions {
  double min_dist = 0.5;        // minimum distance between embedded points (with spread: a, b)
  double spread = 1.0;          // scale of embedded points
  int64_t n_components = 2;     // embedding dimensions
  // SGD epochs. Unset: 500 for up to 10,000 cells, 200 above (scanpy's default).
  std::optional<int64_t> maxiter;
  double alpha = 1.0;           // initial learning rate
  double gamma = 1.0;           // repulsion strength
  double negative_sample_rate = 5;  // negative samples per positive sample
  // "spectral" | "random" | (Dataset level) an obsm key whose first n_components columns are the
  // initial positions.
  std::string init_pos = "spectral";
  uint64_t random_state = 0;
  // Curve parameters; unset: fitted to (min_dist, spread) by find_ab_params.
  std::optional<double> a, b;
  // The SGD: "batched" (every vertex moved once per epoch by the sum of its edges' moves from the
  // epoch's start positions, umap_sgd.hpp: parallel, the same bits for any thread count and on the
  // GPU run to run) or "sequential" (umap-learn's order, edge after edge, one thread; CPU only).
  std::string sgd = "batched";
  // Dataset level: the neighbours to use (uns[neighbors_key]['connectivities_key'] in obsp).
  std::string neighbors_key = "neighbors";
};

struct UmapResult {
  DenseF embedding;  // n x n_components (obsm['X_umap'])
  double a = 0, b = 0;
  int64_t n_epochs = 0;
  std::string init;  // the initialisation used: "spectral", "random" or the obsm key
  float max_weight = 0;  // the graph's largest weight (every weight checked finite and >= 0)
  double init_seconds = 0, epochs_seconds = 0;  // wall time of the start layout and of the epochs
};

// The spectral start layout's finish (the CPU path and the GPU's device start, umap_gpu.cu): the
// layout scaled to max |x| = kUmapInitScale, plus normals of sd kUmapInitNoise drawn by
// spectral::gaussian_at(umap_noise_seed(random_state), entry); then every column to [0, kUmapInitScale].
constexpr double kUmapInitNoise = 1e-4;
constexpr double kUmapInitScale = 10.0;
inline uint64_t umap_noise_seed(uint64_t random_state) { return umap_sgd::mix64(random_state ^ 0x6e6f697365ULL); }

// The graph without the entries below threshold (and explicit zeros), rows in parallel.
CsrF prune_graph(const Context& ctx, const CsrF& graph, float threshold);
// The largest edge weight, on the context's threads; throws InputError (as umap reports it) for a
// negative or non-finite weight.
float checked_max_weight(const Context& ctx, const CsrF& graph);
// SCURRY_UMAP_TIMES=1: the layout's phases (wall seconds since the last mark) on stderr.
void umap_mark(const char* what);
// InputError for an unknown sgd or an n_components it does not take.
void check_sgd(const UmapOptions& opt);
// The checks of the options alone (no data): sgd, n_components, maxiter, negative_sample_rate,
// spread/min_dist. `scurry run` calls it before its first step.
void validate_umap_options(const UmapOptions& opt);
// The batched epochs' constants from the options and res.a, res.b (the CPU and GPU paths).
umap_sgd::EpochParams epoch_params(const UmapOptions& opt, const UmapResult& res, int64_t n);
// The batched epochs 1 .. n_epochs - 1 on the CPU threads, from and into res.embedding (the
// start layout), with res.a, res.b, res.n_epochs set; g is the pruned graph. 2-D layouts run in
// lanes (umap.cpp), the same bits as umap_sgd::vertex_epoch, which `reference` uses instead (tests).
void umap_batched_epochs(const Context& ctx, const CsrF& g, const UmapOptions& opt, UmapResult& res,
                         bool reference = false);

// umap's find_ab_params: least-squares fit of 1 / (1 + a x^(2b)) to 1 for x < min_dist and
// exp(-(x - min_dist) / spread) above, on 300 points of [0, 3 spread] (Levenberg-Marquardt from
// a = b = 1, as scipy's curve_fit).
std::pair<double, double> find_ab_params(double spread, double min_dist);

// The representation a graph was built from (cells x dims), asked for only when a spectral start
// meets more than 2 n_components components (spectral.hpp multi_component_layout); empty: none.
using RepresentationFn = std::function<DenseF()>;

// Low level: layout of a symmetric weighted graph (n x n CSR; obsp['connectivities']).
// `init`: initial positions (n x n_components) used when init_pos is neither spectral nor random.
// A spectral start on a graph of several components is umap-learn's multi-component layout.
UmapResult umap(const Context& ctx, const CsrF& graph, const UmapOptions& opt, const DenseF* init = nullptr,
                const RepresentationFn& rep = {});
// The representation scanpy's umap hands umap-learn: _choose_representation with the use_rep and
// n_pcs of uns[neighbors_key]['params']; read when called (d must outlive it).
RepresentationFn umap_representation(const Dataset& d, const std::string& neighbors_key);
// Dataset level: reads obsp[connectivities_key of uns[neighbors_key]] (InputError when missing:
// run neighbors first); writes obsm['X_umap'] (float32) and uns['umap'] = {params: {a, b}}.
UmapResult umap(const Context& ctx, Dataset& d, const UmapOptions& opt);
void write_umap(Dataset& d, const UmapResult& res, const UmapOptions& opt);

// The connectivities matrix a step on uns[neighbors_key] uses, as float32 CSR (InputError when
// absent, naming `step`).
CsrF neighbors_graph(const Dataset& d, const std::string& neighbors_key, const std::string& step);
// The same without a copy where obsp holds a float CSR (else converted into storage); valid while
// d's obsp is unchanged.
const CsrF& neighbors_graph(const Dataset& d, const std::string& neighbors_key,
                            const std::string& step, CsrF& storage);

}  // namespace scurry
