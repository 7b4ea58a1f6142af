// scurry: batched non-negative matrix factorisation X (n x g) ~ W H, as sklearn's
// non_negative_factorization (sklearn/decomposition/_nmf.py) with cNMF's settings: R replicates
// (different random inits, possibly different seeds) factorised together, so that one read of X per
// half-iteration serves all of them (X Ht_cat with the replicates' H^T concatenated [g, R*k], and
// X^T W_cat with W concatenated [n, R*k]). Each replicate stops on its own.
//
// Solvers (l1 = l2 = 0, alpha_W = 0 as cNMF):
//  cd  sklearn's coordinate descent (HALS, `_update_cdnmf_fast`): for every row of W (then of H^T)
//      the components in order 0..k-1, grad = (W HHt - XHt)[i,t], W[i,t] = max(W[i,t] - grad/HHt[t,t],
//      0); stops when violation / violation_at_iteration_1 <= tol (sklearn's rule for cd: the sum of
//      the projected gradients, checked every iteration).
//  mu  multiplicative updates for Frobenius, Kullback-Leibler or Itakura-Saito (beta 0: sklearn's
//      general-beta rule with exponent 1/(2 - beta) = 1/2; X must have no zeros, as sklearn requires,
//      so X must store every entry; CPU only); denominators equal to 0 become
//      float32 eps (KL: W column sums equal to 0 become 1; H entries < float64 eps set to 0); checks
//      every 10 iterations (previous_error - error) / error_at_init < tol, error being
//      sklearn's _beta_divergence(..., square_root=True).
// The Frobenius error comes from the Gram identity ||X||^2 - 2<X Ht, W> + <W^T W, H H^T> (float64);
// no n x g temporary is ever formed; X stays CSR.
//
// Storage: float32 factors, float64 accumulation of every sum (products, Grams, violations,
// errors). The CPU path is deterministic: fixed row/gene blocks, per-block partials combined in
// block order, so any thread count gives bit-identical factors, and a batch of R replicates gives the
// same factors as R single-replicate runs.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

enum class NmfSolver { cd, mu };
enum class NmfLoss { frobenius, kullback_leibler, itakura_saito };  // itakura_saito: CPU only
// How the GPU holds X: CSR (gather kernels) or dense row-major (cuBLAS GEMMs over all replicates).
enum class NmfGpuLayout { automatic, sparse, dense };

// "cd" | "mu", "frobenius" | "kullback-leibler" | "itakura-saito" (InputError otherwise).
NmfSolver parse_nmf_solver(const std::string& s);
NmfLoss parse_nmf_loss(const std::string& s);
const char* nmf_solver_name(NmfSolver s);
const char* nmf_loss_name(NmfLoss l);

struct NmfOptions {
  NmfSolver solver = NmfSolver::cd;   // cNMF: 'cd' for frobenius, 'mu' for kullback-leibler
  NmfLoss loss = NmfLoss::frobenius;  // cNMF's default beta_loss
  double tol = 1e-4;                  // sklearn's tol; 0 = run max_iter iterations
  int max_iter = 1000;                // cNMF's max_iter
  bool update_h = true;               // false: H is fixed, only W is fitted (sklearn update_H=False)
  int64_t rows_per_block = 256;       // fixed partition of cells/genes for parallel work
  // GPU only. automatic: dense when the loss is frobenius, nnz / (n * g) >= gpu_dense_min_density
  // and the dense X (n * g * 4 bytes) plus the factors fit in the device's free memory; else CSR.
  NmfGpuLayout gpu_layout = NmfGpuLayout::automatic;
  double gpu_dense_min_density = 0.02;
  bool gpu_tf32 = false;  // dense layout: GEMMs on TF32 tensor cores (~8x the fp32 rate, ~1e-3 rounding)
};

// R factorisations of an n x g matrix with k components, replicate-interleaved:
// W[(i * R + r) * k + c] (cell i, replicate r, component c), Ht[(j * R + r) * k + c] (H transposed).
struct NmfBatch {
  int64_t n = 0, g = 0;
  int k = 0, R = 0;
  std::vector<float> W;   // n * R * k
  std::vector<float> Ht;  // g * R * k

  int64_t rk() const { return static_cast<int64_t>(R) * k; }
  float& w(int r, int64_t i, int c) { return W[static_cast<size_t>((i * R + r)) * k + c]; }
  float w(int r, int64_t i, int c) const { return W[static_cast<size_t>((i * R + r)) * k + c]; }
  float& h(int r, int c, int64_t j) { return Ht[static_cast<size_t>((j * R + r)) * k + c]; }
  float h(int r, int c, int64_t j) const { return Ht[static_cast<size_t>((j * R + r)) * k + c]; }
  // One replicate's factors: W (n x k) and H (k x g), row-major.
  DenseF w_of(int r) const;
  DenseF h_of(int r) const;
  // A batch of R = 1 from W (n x k) and H (k x g).
  static NmfBatch from(const DenseF& W, const DenseF& H);
};

struct NmfResult {
  NmfBatch f;
  std::vector<int> n_iter;     // per replicate: iterations run
  std::vector<double> error;   // per replicate: sklearn's reconstruction_err_ (sqrt(2 * beta-divergence))
};

// cNMF's replicate seeds: np.random.seed(seed); np.random.randint(1, 2**31 - 1, size=n), the same
// numbers as cNMF's (numpy's legacy MT19937 stream, nmf/numpy_random.hpp) for seeds 0 .. 2^32 - 1
// (numpy's range; wider seeds are folded to 32 bits, here and in nmf_random_init).
std::vector<uint64_t> nmf_replicate_seeds(uint64_t seed, int64_t n);

// sklearn's init='random' for each seed: avg = sqrt(mean(X) / k) over all n*g entries;
// H = avg * |N(0,1)| (k x g, drawn first), then W = avg * |N(0,1)| (n x k), row-major draw order,
// the normals from numpy's RandomState(seed).standard_normal: the same values as sklearn's
// (up to X's float32 mean and the float32 storage).
// threads: the draws' threads (each replicate from its own stream, the work within a stream split
// between its sequential part and the rest: the same numbers for any count).
// x_sum: the sum of X's values when the caller has it (< 0: summed here).
// w_storage: a buffer (say the previous batch's W, done with) whose storage W takes over where its
// capacity suffices (no allocation, page faults or zero fill of its size); its contents are
// overwritten, and it is left empty either way.
NmfBatch nmf_random_init(const CsrF& X, int k, const std::vector<uint64_t>& seeds, int threads = 1,
                         double x_sum = -1, std::vector<float>* w_storage = nullptr);

// sklearn's init='nndsvd' (what cNMF's --init nndsvd asks for; not nndsvda/nndsvdar): the top-k
// singular triplets of X by randomised SVD (seeded with seeds[0]), then Boutsidis & Gallopoulos'
// NNDSVD (zeros stay zeros: entries < eps = 1e-6 set to 0). All replicates get the same factors.
NmfBatch nmf_nndsvd_init(const Context& ctx, const CsrF& X, int k, const std::vector<uint64_t>& seeds,
                         double eps = 1e-6);

// Fits all replicates of `init` on X (n x g, non-negative). With opt.update_h = false, H stays fixed
// and W starts from init.W (sklearn starts cd from zeros and mu from sqrt(mean(X)/k): see
// nmf_fit_w_fixed_h). Throws InputError on negative or non-finite values of X.
NmfResult nmf_fit(const Context& ctx, const CsrF& X, NmfBatch init, const NmfOptions& opt);

// sklearn's non_negative_factorization(X, H=H, update_H=False): W (n x k) with H (k x g) fixed,
// W initialised as sklearn does (zeros for cd, sqrt(mean(X)/k) for mu). on_gpu: fitted by
// nmf_fit_gpu on ctx's device (ctx must be a CUDA context).
DenseF nmf_fit_w_fixed_h(const Context& ctx, const CsrF& X, const DenseF& H, NmfOptions opt,
                         int* n_iter = nullptr, bool on_gpu = false);

// Usage refits as nmf_fit_w_fixed_h(..., on_gpu = true), several H against one X that is checked,
// uploaded and laid out once on the device of a CUDA context (cNMF's k_selection_plot refits every k
// over all cells; at 2.4M cells each upload, check and layout took seconds), each refit's squared
// Frobenius error computed on the device. max_k: the most components any refit will have (the
// layout's memory plan). The refits are those nmf_fit_gpu gives on the same layout.
class NmfGpuRefits {
 public:
  NmfGpuRefits(const Context& ctx, const CsrF& X, NmfOptions opt, int max_k);
  ~NmfGpuRefits();
  NmfGpuRefits(const NmfGpuRefits&) = delete;
  NmfGpuRefits& operator=(const NmfGpuRefits&) = delete;
  // W (n x k) for H (k x g, k <= max_k); frob_err_sq: ||X - W H||_F^2, if asked for.
  DenseF refit(const DenseF& H, double* frob_err_sq = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Per replicate: sklearn's _beta_divergence(X, W, H, loss, square_root=True).
std::vector<double> nmf_objective(const Context& ctx, const CsrF& X, const NmfBatch& f, NmfLoss loss,
                                  int64_t rows_per_block = 256);
// ||X - W H||_F^2 (not square-rooted) of one factorisation, by the Gram identity (float64).
double frobenius_error_sq(const Context& ctx, const CsrF& X, const DenseF& W, const DenseF& H);

// GPU: the same batched fit with cuBLAS/cuSPARSE (src/nmf/nmf_gpu.cu; a stub throws without CUDA).
// Float32 products (cuBLAS/cuSPARSE accumulate in float32), so results match the CPU up to float32
// rounding, not bit for bit.
//
// Layouts: sparse (default below the density threshold): per (row, replicate) gathers in float64,
// every replicate's arithmetic independent of its batch mates (Grams, violations and objectives are
// reduced over fixed row chunks in a fixed order, never with atomics), so a replicate's factors are
// bit-identical whatever R or the number of GPUs. Dense: X.Ht_cat and X^T.W_cat as single cuBLAS
// GEMMs over all replicates of the batch (float32 or TF32 accumulation); cuBLAS picks its kernel by
// shape, so the factors depend on the batch size at float32 rounding level (~1e-6 relative per
// iteration), not bit for bit.
NmfResult nmf_fit_gpu(const Context& ctx, const CsrF& X, NmfBatch init, const NmfOptions& opt);

// The same fit on given device resources (the group runner of nmf_fit_gpus).
NmfResult nmf_fit_gpu_on(CudaResources& res, const CsrF& X, NmfBatch init, const NmfOptions& opt);

// Replicates spread over GPUs: the R replicates of `init` split into contiguous groups (sizes differ
// by at most one, the first groups larger), one host thread per entry of `devices`, each with its own
// CudaResources (from `base`, device replaced) and its own copy of X; results concatenated in
// replicate order. A device may appear twice (two groups on one GPU: what the tests do). Fewer
// replicates than devices: the extra devices stay idle.
NmfResult nmf_fit_gpus(const CsrF& X, NmfBatch init, const NmfOptions& opt, const std::vector<int>& devices,
                       const CudaOptions& base = {});

// Batches of replicates on the one device of ctx (a CUDA context), fitted in order: X checked,
// uploaded and laid out once (for batches of up to max_rk = R * k components); make(b, spare)
// returns batch b's initialisation (called on another thread while batch b - 1 fits), spare holding
// batch b - 1's host W, uploaded and done with (empty for b = 0), for make to reuse
// (nmf_random_init's w_storage) or leave (freed when make returns); done(b, result) receives its
// factors, H always, W only when want_w (W is empty otherwise), on the calling thread. Each batch's
// factors are those nmf_fit_gpu gives for it on the same layout.
void nmf_fit_gpu_batches(const Context& ctx, const CsrF& X, int n_batches, int64_t max_rk,
                         const std::function<NmfBatch(int, std::vector<float>&)>& make, const NmfOptions& opt,
                         const std::function<void(int, NmfResult&)>& done, bool want_w = false);

// --gpus: "all" (every visible device), "N" (the first N), "0,2,3" (these ordinals; a comma makes
// a list, so "1," is device 1 alone). InputError when a device is missing or the list is empty.
std::vector<int> parse_gpus(const std::string& spec, int available);

// Replicates [r0, r1) of a batch, and batches (same n, g, k) joined in order.
NmfBatch nmf_batch_slice(const NmfBatch& b, int r0, int r1);
NmfBatch nmf_batch_concat(const std::vector<NmfBatch>& parts);

}  // namespace scurry
