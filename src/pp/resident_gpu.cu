// The preprocessing steps over a matrix resident on one GPU (pp/resident.hpp): the device computes
// per-cell and per-gene statistics, the CPU steps' host math turns them into decisions and slots.
#include <algorithm>
#include <cmath>
#include <future>
#include <limits>
#include <type_traits>

#include "core/dataset.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "exec/comm.hpp"
#include "exec/context.hpp"
#include "io/bad_count.hpp"
#include "pp/chain_steps.hpp"
#include "pp/filter.hpp"
#include "pp/hvg.hpp"
#include "pp/kernels.cuh"
#include "pp/log1p.hpp"
#include "pp/normalize.hpp"
#include "pp/pca.hpp"
#include "pp/qc.hpp"
#include "pp/resident_state.cuh"
#include "pp/scale.hpp"

namespace scurry {

ResidentX::ResidentX(std::unique_ptr<State> s) : s_(std::move(s)) {}
ResidentX::~ResidentX() = default;
int64_t ResidentX::n_rows() const { return s_->is_dense ? s_->dense_rows : s_->m.n_rows; }
int64_t ResidentX::n_cols() const { return s_->is_dense ? s_->dense_cols : s_->m.n_cols; }
bool ResidentX::dense() const { return s_->is_dense; }
int64_t ResidentX::nnz() const { return s_->is_dense ? s_->dense_rows * s_->dense_cols : s_->m.nnz; }
int ResidentX::device() const { return s_->r->device; }

namespace resident {

namespace {

template <class T>
DeviceArray<T> to_device(CudaResources& r, const std::vector<T>& h, const char* what) {
  DeviceArray<T> d(r, h.size(), what);
  if (!h.empty())
    SCURRY_CUDA(cudaMemcpyAsync(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, r.stream));
  return d;
}

CudaResources& res(Context& ctx, const char* step) {
  if (!ctx.cuda()) throw InputError(std::string(step) + ": the GPU step needs a CUDA context");
  return *ctx.cuda();
}

DeviceCsr& csr(ResidentX& x, const char* step) {
  if (x.state().is_dense)
    throw InputError(std::string(step) + ": X on the GPU is dense (scaled with zero_center); this step needs the "
                     "sparse matrix before scale");
  return x.state().m;
}

// What filter_cells decides on, from a row pass: per cell the stored entries and the total as the
// float32 obs column holds it.
void keep_row_stats(ResidentX::State& s, const gpu::RowQc& rq) {
  chain::CellStats c = chain::cell_stats(rq.n_genes, rq.total);
  s.row_n_genes = std::move(c.n_genes);
  s.row_total_f32 = std::move(c.total_f32);
  s.have_row_stats = true;
}

// Per gene, QC's counts of stored entries over every rank's cells (the identity pass of gene_sums).
gpu::GeneSums gene_counts(Context& ctx, CudaResources& r, const DeviceCsr& m) {
  gpu::GeneSums gs = gpu::gene_sums(r, m, gpu::GeneTransform::identity, nullptr, gpu::SecondStat::count);
  sum_ranks(ctx.comm(), gs.sum);
  sum_ranks(ctx.comm(), gs.nnz);
  return gs;
}

__global__ void log1p_kernel(float* v, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    v[i] = log1pf(v[i]);
}

__global__ void clip_below_kernel(float* v, int64_t n, float lo) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    v[i] = fmaxf(v[i], lo);
}

// Counts the column indices outside [0, n_cols) into *bad.
__global__ void bad_indices_kernel(const int32_t* idx, int64_t n, int64_t n_cols, unsigned long long* bad) {
  unsigned long long c = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    c += (idx[i] < 0 || idx[i] >= n_cols);
  if (c) atomicAdd(bad, c);
}

// n elements of type S at src into the device array dst of type D, converted on the host one chunk at
// a time (S == D: one staged copy). Returns how many integer values fell outside [0, limit) on the way
// (int64 column indices, which must not wrap into range as int32; limit 0: no check).
template <class D, class S>
int64_t upload_converted(CudaResources& r, D* dst, const S* src, int64_t n, int64_t limit = 0) {
  if constexpr (std::is_same_v<D, S>) {
    copy_to_device(r, dst, src, static_cast<size_t>(n) * sizeof(D));
    return 0;
  } else {
    constexpr int64_t kChunk = int64_t{1} << 26;  // 64M elements
    std::vector<D> buf(static_cast<size_t>(std::min(n, kChunk)));
    int64_t bad = 0;
    for (int64_t a = 0; a < n; a += kChunk) {
      const int64_t m = std::min(kChunk, n - a);
      int64_t b = 0;
#pragma omp parallel for reduction(+ : b) schedule(static)
      for (int64_t i = 0; i < m; ++i) {
        if constexpr (std::is_integral_v<S>)
          if (limit > 0) b += (src[a + i] < 0 || src[a + i] >= limit);
        buf[i] = static_cast<D>(src[a + i]);
      }
      bad += b;
      if (bad == 0) copy_to_device(r, dst + a, buf.data(), static_cast<size_t>(m) * sizeof(D));
    }
    return bad;
  }
}

// The first position p (in [0, n)) whose value is NaN, infinite or negative, into *first (atomicMin;
// n when none).
__global__ void first_bad_count_kernel(const float* v, int64_t n, unsigned long long* first) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (!(v[i] >= 0.f && v[i] <= 3.402823466e38f)) {
      atomicMin(first, static_cast<unsigned long long>(i));
      return;  // (this thread's later entries come after i)
    }
}

// The first stored position whose value is NaN, infinite or negative (nnz when none).
int64_t first_bad_count(CudaResources& r, DeviceCsr& m) {
  if (m.nnz == 0) return 0;
  DeviceArray<unsigned long long> first(r, 1, "first bad count");
  const unsigned long long none = static_cast<unsigned long long>(m.nnz);
  SCURRY_CUDA(cudaMemcpyAsync(first.data(), &none, 8, cudaMemcpyHostToDevice, r.stream));
  const int64_t blocks = std::min<int64_t>((m.nnz + 255) / 256, 4096);
  first_bad_count_kernel<<<static_cast<unsigned>(blocks), 256, 0, r.stream>>>(m.data.data(), m.nnz, first.data());
  SCURRY_CUDA_LAUNCH();
  unsigned long long h = none;
  SCURRY_CUDA(cudaMemcpyAsync(&h, first.data(), 8, cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return static_cast<int64_t>(h);
}

}  // namespace

void check_counts(Context& ctx, ResidentX& x, const std::string& where) {
  CudaResources& r = res(ctx, "check counts");
  auto& s = x.state();
  if (s.counts_checked) return;
  DeviceCsr& m = csr(x, where.c_str());
  const int64_t p = first_bad_count(r, m);
  if (p < m.nnz) {  // the host check's error (io/bad_count.hpp): the value, its row and column
    float v = 0;
    int32_t col = 0;
    SCURRY_CUDA(cudaMemcpy(&v, m.data.data() + p, 4, cudaMemcpyDeviceToHost));
    SCURRY_CUDA(cudaMemcpy(&col, m.indices.data() + p, 4, cudaMemcpyDeviceToHost));
    std::vector<int64_t> ptr(static_cast<size_t>(m.n_rows + 1));
    SCURRY_CUDA(cudaMemcpy(ptr.data(), m.indptr.data(), ptr.size() * 8, cudaMemcpyDeviceToHost));
    const int64_t row = static_cast<int64_t>(std::upper_bound(ptr.begin(), ptr.end(), p) - ptr.begin()) - 1;
    fail_bad_count(where, v, row, col);
  }
  s.counts_checked = true;
}

void note_counts(Context& ctx, ResidentX& x) {
  CudaResources& r = res(ctx, "check counts");
  auto& s = x.state();
  if (s.counts_checked || s.is_dense) return;
  if (first_bad_count(r, s.m) == s.m.nnz) s.counts_checked = true;
}

std::unique_ptr<ResidentX> upload(Context& ctx, const CsrParts& x, const std::string& where) {
  CudaResources& r = res(ctx, "upload");
  if (x.n_rows < 0 || x.n_cols < 0 || x.nnz < 0) throw InputError(where + ": negative sizes");
  if (x.n_cols > std::numeric_limits<int32_t>::max())
    throw InputError(detail::concat(where, ": ", x.n_cols, " columns; the GPU takes at most 2^31 - 1"));
  for (int b : {x.indptr_bytes, x.index_bytes, x.value_bytes})
    if (b != 4 && b != 8) throw InputError(where + ": row pointers, indices and values of 4 or 8 bytes only");
  // The row pointers on the host (n_rows + 1: small), checked there.
  std::vector<int64_t> ptr(static_cast<size_t>(x.n_rows + 1));
  if (x.indptr_bytes == 8) std::copy_n(static_cast<const int64_t*>(x.indptr), ptr.size(), ptr.begin());
  else std::copy_n(static_cast<const int32_t*>(x.indptr), ptr.size(), ptr.begin());
  bool decreasing = false;
#pragma omp parallel for reduction(|| : decreasing) schedule(static)
  for (int64_t i = 0; i < x.n_rows; ++i) decreasing = decreasing || ptr[i + 1] < ptr[i];
  if (ptr[0] != 0 || decreasing || ptr.back() != x.nnz)
    throw InputError(where + ": the row pointers (indptr) are not those of a CSR matrix (first 0, not decreasing, last nnz)");
  auto s = std::make_unique<ResidentX::State>();
  s->r = &r;
  DeviceCsr& m = s->m;
  m.n_rows = x.n_rows, m.n_cols = x.n_cols, m.nnz = x.nnz;
  m.indptr = DeviceArray<int64_t>(r, ptr.size(), "X row pointers");
  m.indices = DeviceArray<int32_t>(r, static_cast<size_t>(x.nnz), "X column indices");
  m.data = DeviceArray<float>(r, static_cast<size_t>(x.nnz), "X values");
  copy_to_device(r, m.indptr.data(), ptr.data(), ptr.size() * 8);
  if (x.index_bytes == 8) {
    const int64_t bad = upload_converted(r, m.indices.data(), static_cast<const int64_t*>(x.indices), x.nnz,
                                         std::max<int64_t>(x.n_cols, 1));
    if (bad) throw InputError(detail::concat(where, ": ", bad, " column indices outside [0, ", x.n_cols, ")"));
  } else upload_converted(r, m.indices.data(), static_cast<const int32_t*>(x.indices), x.nnz);
  if (x.value_bytes == 8) upload_converted(r, m.data.data(), static_cast<const double*>(x.data), x.nnz);
  else upload_converted(r, m.data.data(), static_cast<const float*>(x.data), x.nnz);
  if (x.nnz > 0 && x.index_bytes == 4) {  // (int64 indices were checked on the host as they were converted)
    DeviceArray<unsigned long long> bad(r, 1, "bad indices");
    SCURRY_CUDA(cudaMemsetAsync(bad.data(), 0, 8, r.stream));
    const int64_t blocks = std::min<int64_t>((x.nnz + 255) / 256, 4096);
    bad_indices_kernel<<<static_cast<unsigned>(blocks), 256, 0, r.stream>>>(m.indices.data(), x.nnz, x.n_cols, bad.data());
    SCURRY_CUDA_LAUNCH();
    unsigned long long h = 0;
    SCURRY_CUDA(cudaMemcpyAsync(&h, bad.data(), 8, cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    if (h) throw InputError(detail::concat(where, ": ", h, " column indices outside [0, ", x.n_cols, ")"));
  }
  return std::make_unique<ResidentX>(std::move(s));  // (every copy above is synchronous)
}

std::unique_ptr<ResidentX> upload(Context& ctx, const Matrix& x) {
  CudaResources& r = res(ctx, "upload");
  auto s = std::make_unique<ResidentX::State>();
  s->r = &r;
  if (const CsrF* c = std::get_if<CsrF>(&x.m))
    s->m = scurry::upload(r, *c);
  else
    s->m = scurry::upload(r, to_csr_f(x));
  return std::make_unique<ResidentX>(std::move(s));
}

Matrix download(Context& ctx, const ResidentX& x) {
  CudaResources& r = res(ctx, "download");
  const auto& s = x.state();
  if (!s.is_dense) return Matrix(scurry::download(r, s.m), DType::f32);
  DenseF h;
  h.n_rows = s.dense_rows, h.n_cols = s.dense_cols;
  resize_large(h.data, static_cast<size_t>(h.n_rows) * static_cast<size_t>(h.n_cols));
  copy_to_host(r, h.data.data(), s.dense->data(), h.data.size() * 4);
  return Matrix(std::move(h), DType::f32);
}

std::unique_ptr<ResidentX> subset_copy(Context& ctx, const ResidentX& x, const std::vector<int64_t>& rows,
                                       bool all_rows, const std::vector<int64_t>& cols, bool all_cols) {
  CudaResources& r = res(ctx, "subset");
  const auto& s = x.state();
  if (s.is_dense) throw InputError("a view of an AnnData whose X is dense on the GPU: bring it back first (anndata_to_CPU)");
  auto out = std::make_unique<ResidentX::State>();
  out->r = &r;
  out->m = copy_on_device(r, s.m);
  DeviceArray<uint8_t> keep;
  if (!all_rows) {
    std::vector<uint8_t> k(static_cast<size_t>(s.m.n_rows), 0);
    for (int64_t i : rows) {
      if (i < 0 || i >= s.m.n_rows) throw InputError("subset: a row outside the matrix");
      k[static_cast<size_t>(i)] = 1;
    }
    keep = to_device(r, k, "view rows");
  }
  DeviceArray<int32_t> map;
  int64_t new_cols = s.m.n_cols;
  if (!all_cols) {
    std::vector<int32_t> mp(static_cast<size_t>(s.m.n_cols), -1);
    int32_t u = 0;
    for (int64_t j : cols) {
      if (j < 0 || j >= s.m.n_cols) throw InputError("subset: a column outside the matrix");
      mp[static_cast<size_t>(j)] = u++;
    }
    new_cols = u;
    map = to_device(r, mp, "view columns");
  }
  if (!all_rows || !all_cols) filter_inplace(r, out->m, all_rows ? nullptr : keep.data(), all_cols ? nullptr : map.data(), new_cols);
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return std::make_unique<ResidentX>(std::move(out));
}

void qc(Context& ctx, ResidentX& x, Dataset& d, const QcOptions& q) {
  CudaResources& r = res(ctx, "calculate_qc_metrics");
  DeviceCsr& m = csr(x, "calculate_qc_metrics");
  auto& s = x.state();
  PhaseClock clock(r, "resident qc");  // SCURRY_PROFILE=1: phase times on stderr
  const gpu::QcSetup qs = gpu::qc_setup(d, q, m.n_cols);
  DeviceArray<uint8_t> dbits = to_device(r, qs.bits, "QC gene sets");
  clock.mark("setup");
  gpu::RowQc rq = gpu::row_qc(r, m, qs.n_sets ? dbits.data() : nullptr, qs.n_sets, qs.top);
  clock.mark("row_qc (and its copy)");
  gpu::GeneSums gs = gene_counts(ctx, r, m);
  clock.mark("gene_counts");
  keep_row_stats(s, rq);
  s.gene_nnz.assign(gs.nnz.begin(), gs.nnz.end());
  s.have_gene_nnz = true;
  clock.mark("row stats kept");
  gpu::write_qc_columns(d, qs, std::move(rq), gs, sum_ranks(ctx.comm(), m.n_rows));
  clock.mark("columns written");
}

std::vector<uint8_t> filter_cells(Context& ctx, ResidentX& x, Dataset& d, const FilterCellsOptions& o) {
  CudaResources& r = res(ctx, "filter_cells");
  DeviceCsr& m = csr(x, "filter_cells");
  auto& s = x.state();
  Comm& comm = ctx.comm();
  PhaseClock clock(r, "resident filter_cells");
  if (!s.have_row_stats) keep_row_stats(s, gpu::row_qc(r, m, nullptr, 0, {}));  // without QC: one row pass
  clock.mark("row stats");
  FilterCellsResult fr = filter_cells_from_stats(std::move(s.row_n_genes), std::move(s.row_total_f32), o, &comm);
  clock.mark("decision");
  s.have_row_stats = false;
  const int64_t removed_here = m.n_rows - static_cast<int64_t>(fr.kept.size());
  const int64_t removed_all = sum_ranks(comm, removed_here);
  if (s.have_gene_nnz && removed_all > 0) {
    // Per gene, the removed cells' stored entries (this rank's; then summed over the ranks).
    std::vector<int64_t> sub(static_cast<size_t>(m.n_cols), 0);
    if (removed_here > 0) {
      std::vector<int64_t> removed;
      for (int64_t i = 0; i < m.n_rows; ++i)
        if (!fr.keep[i]) removed.push_back(i);
      DeviceArray<int64_t> drows = to_device(r, removed, "removed cells");
      DeviceArray<unsigned long long> cnt(r, static_cast<size_t>(m.n_cols), "removed cells' gene counts");
      SCURRY_CUDA(cudaMemsetAsync(cnt.data(), 0, static_cast<size_t>(m.n_cols) * 8, r.stream));
      gpu::rows_gene_nnz(r, gpu::view(m), drows.data(), static_cast<int64_t>(removed.size()), cnt.data());
      std::vector<unsigned long long> h(static_cast<size_t>(m.n_cols));
      SCURRY_CUDA(cudaMemcpyAsync(h.data(), cnt.data(), h.size() * 8, cudaMemcpyDeviceToHost, r.stream));
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));
      for (size_t g = 0; g < h.size(); ++g) sub[g] = static_cast<int64_t>(h[g]);
    }
    if (comm.size() > 1) comm.allreduce_sum(sub.data(), sub.size());
    for (size_t g = 0; g < sub.size(); ++g) s.gene_nnz[g] -= sub[g];
  }
  if (removed_here > 0) {
    DeviceArray<uint8_t> keep = to_device(r, fr.keep, "cell filter");
    filter_inplace(r, m, keep.data(), nullptr, m.n_cols);
  }
  chain::check_every_rank_keeps(comm, m.n_rows);
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  clock.mark("matrix filtered");
  apply_filter_cells(d, fr, true);
  clock.mark("columns written");
  return std::move(fr.keep);
}

std::vector<uint8_t> filter_genes(Context& ctx, ResidentX& x, Dataset& d, const FilterGenesOptions& o) {
  CudaResources& r = res(ctx, "filter_genes");
  DeviceCsr& m = csr(x, "filter_genes");
  auto& s = x.state();
  const bool by_cells_only = !o.min_counts && !o.max_counts;
  FilterGenesResult fr;
  if (by_cells_only && s.have_gene_nnz) {  // no pass over the matrix: QC's counts less the removed cells'
    fr = filter_genes_from_stats(s.gene_nnz, std::vector<double>(static_cast<size_t>(m.n_cols), 0.0), o);
  } else {
    gpu::GeneSums gs = gene_counts(ctx, r, m);
    std::vector<int64_t> n_cells(gs.nnz.begin(), gs.nnz.end());
    fr = filter_genes_from_stats(std::move(n_cells), gs.sum, o);
  }
  subset_vars(ctx, x, nullptr, fr.kept);  // (QC's gene counts follow; the rows' numbers are dropped)
  apply_filter_genes(d, fr, true);
  return std::move(fr.keep);
}

void normalize_total(Context& ctx, ResidentX& x, Dataset& d, const NormalizeTotalOptions& o, bool then_log1p) {
  CudaResources& r = res(ctx, "normalize_total");
  DeviceCsr& m = csr(x, "normalize_total");
  if (o.exclude_highly_expressed)
    throw InputError("normalize_total: exclude_highly_expressed is not available on the GPU yet; use the CPU");
  if (!o.layer.empty()) throw InputError("normalize_total: a layer is not available on the GPU yet; use the CPU");
  std::vector<double> totals;
  const double target = chain::normalize_target(ctx.comm(), o.target_sum, [&] {
    DeviceArray<double> dt(r, static_cast<size_t>(m.n_rows), "row totals");
    gpu::row_totals(r, m, dt.data());
    totals.resize(static_cast<size_t>(m.n_rows));
    SCURRY_CUDA(cudaMemcpyAsync(totals.data(), dt.data(), totals.size() * 8, cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    return totals;
  });
  gpu::normalize_log1p(r, m, target, then_log1p, o.key_added.empty() ? nullptr : &totals);
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  x.state().values_changed();
  if (!o.key_added.empty()) chain::write_totals(d, o.key_added, totals);
  if (then_log1p) d.uns["log1p"] = Value(Dict{});
}

void log1p(Context& ctx, ResidentX& x, Dataset& d) {
  CudaResources& r = res(ctx, "log1p");
  DeviceCsr& m = csr(x, "log1p");
  if (m.nnz > 0) {
    const int64_t blocks = std::min<int64_t>((m.nnz + 255) / 256, int64_t{1} << 20);
    log1p_kernel<<<static_cast<unsigned>(blocks), 256, 0, r.stream>>>(m.data.data(), m.nnz);
    SCURRY_CUDA_LAUNCH();
  }
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  x.state().values_changed();
  Log1pOptions lo;
  write_log1p(d, lo);
}

void subset_vars(Context& ctx, ResidentX& x, Dataset* d, const std::vector<int64_t>& keep) {
  CudaResources& r = res(ctx, "subset");
  DeviceCsr& m = csr(x, "subset");
  auto& s = x.state();
  for (size_t u = 0; u < keep.size(); ++u)
    if (keep[u] < 0 || keep[u] >= m.n_cols || (u > 0 && keep[u] <= keep[u - 1]))
      throw InputError("subset: the genes kept must be ascending positions in [0, n_vars)");
  if (static_cast<int64_t>(keep.size()) != m.n_cols) {
    std::vector<int32_t> map(static_cast<size_t>(m.n_cols), -1);
    for (size_t u = 0; u < keep.size(); ++u) map[static_cast<size_t>(keep[u])] = static_cast<int32_t>(u);
    PhaseClock clock(r, "resident subset_vars");
    DeviceArray<int32_t> dmap = to_device(r, map, "gene subset");
    filter_inplace(r, m, nullptr, dmap.data(), static_cast<int64_t>(keep.size()));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    clock.mark("matrix filtered");
    if (s.have_gene_nnz) {
      std::vector<int64_t> k;
      k.reserve(keep.size());
      for (int64_t g : keep) k.push_back(s.gene_nnz[static_cast<size_t>(g)]);
      s.gene_nnz = std::move(k);
    }
    s.have_row_stats = false;  // the rows lost entries
  }
  if (d) d->subset_vars(keep);
}

void highly_variable_genes(Context& ctx, ResidentX& x, Dataset& d, const HvgOptions& o) {
  CudaResources& r = res(ctx, "highly_variable_genes");
  DeviceCsr& m = csr(x, "highly_variable_genes");
  if (o.flavor != "seurat" && o.flavor != "cell_ranger")
    throw InputError("highly_variable_genes: flavor " + o.flavor + " is not available on the GPU yet; use the CPU");
  if (!o.batch_key.empty()) throw InputError("highly_variable_genes: batch_key is not available on the GPU yet; use the CPU");
  if (!o.layer.empty()) throw InputError("highly_variable_genes: a layer is not available on the GPU yet; use the CPU");
  Comm& comm = ctx.comm();
  const bool seurat = o.flavor == "seurat";
  PhaseClock clock(r, "resident hvg");
  gpu::GeneSums gs = gpu::gene_sums(r, m, seurat ? gpu::GeneTransform::expm1 : gpu::GeneTransform::identity, nullptr,
                                    gpu::SecondStat::squares);
  sum_ranks(comm, gs.sum);
  sum_ranks(comm, gs.sumsq);
  clock.mark("gene_sums");
  std::vector<int64_t> keep = chain::choose_hvg(d, o, gs.sum, gs.sumsq, sum_ranks(comm, m.n_rows));
  clock.mark("choice");
  if (o.subset) subset_vars(ctx, x, &d, keep);
  clock.mark("subset");
}

void scale(Context& ctx, ResidentX& x, Dataset& d, const ScaleOptions& o) {
  CudaResources& r = res(ctx, "scale");
  DeviceCsr& m = csr(x, "scale");
  auto& s = x.state();
  if (!o.layer.empty()) throw InputError("scale: a layer is not available on the GPU yet; use the CPU");
  if (o.max_value && !(*o.max_value > 0)) throw InputError("scale: max_value must be > 0");
  Comm& comm = ctx.comm();
  const int64_t n = m.n_rows, g = m.n_cols;
  const int64_t n_cells = sum_ranks(comm, n);
  if (n_cells < 2) throw InputError("scale: needs at least 2 cells");
  const float maxv = o.max_value ? static_cast<float>(*o.max_value) : 0.f;
  PhaseClock clock(r, "resident scale");
  gpu::GeneSums gs = gpu::gene_sums(r, m, gpu::GeneTransform::identity, nullptr, gpu::SecondStat::squares);
  sum_ranks(comm, gs.sum);
  sum_ranks(comm, gs.sumsq);
  clock.mark("gene_sums");
  const chain::ScaleStats st = chain::scale_stats(d, gs.sum, gs.sumsq, n_cells);
  std::vector<float> mf(st.mean.begin(), st.mean.end()), sf(st.sd.begin(), st.sd.end());
  DeviceArray<float> d_mean = to_device(r, mf, "scale means");
  DeviceArray<float> d_sd = to_device(r, sf, "scale std");
  clock.mark("stats");
  if (o.zero_center) {
    auto dense = std::make_shared<DeviceArray<float>>(r, static_cast<size_t>(n) * static_cast<size_t>(g), "dense scaled matrix");
    clock.mark("dense allocated");
    gpu::scale_to_dense(r, m, d_mean.data(), d_sd.data(), true, maxv, dense->data());
    if (o.clip_below && maxv > 0) {  // scanpy >= 1.10: centred values clipped to [-max_value, max_value]
      const int64_t total = n * g;
      const int64_t blocks = std::min<int64_t>((total + 255) / 256, int64_t{1} << 20);
      if (total > 0) clip_below_kernel<<<static_cast<unsigned>(blocks), 256, 0, r.stream>>>(dense->data(), total, -maxv);
      SCURRY_CUDA_LAUNCH();
    }
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    clock.mark("dense written");
    s.m = DeviceCsr();  // the sparse matrix is no longer needed
    clock.mark("sparse freed");
    s.dense = std::move(dense);
    s.dense_rows = n, s.dense_cols = g;
    s.is_dense = true;
  } else {
    gpu::scale_sparse_inplace(r, m, d_sd.data(), maxv);
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  }
  s.forget();
}

void pca(Context& ctx, ResidentX& x, Dataset& d, const PcaOptions& o, const DeviceSumFn& device_sum) {
  CudaResources& r = res(ctx, "pca");
  auto& s = x.state();
  Comm& comm = ctx.comm();
  validate_pca_options(o);
  // The genes used: var['highly_variable'] as the CPU step decides it.
  const bool has_hv = d.var.has("highly_variable");
  if (o.use_highly_variable.value_or(false) && !has_hv)
    throw InputError("pca: use_highly_variable is set but var['highly_variable'] does not exist; run "
                     "highly_variable_genes first");
  const bool use_hv = has_hv && o.use_highly_variable.value_or(true);
  const int64_t n = x.n_rows(), g_all = x.n_cols();
  std::vector<int64_t> genes;
  if (use_hv) {
    const auto& hv = d.var.boolean("highly_variable");
    for (size_t j = 0; j < hv.size(); ++j)
      if (hv[j]) genes.push_back(static_cast<int64_t>(j));
    if (genes.empty()) throw InputError("pca: var['highly_variable'] marks no gene");
  } else {
    for (int64_t j = 0; j < g_all; ++j) genes.push_back(j);
  }
  const int64_t g = static_cast<int64_t>(genes.size());
  const int64_t n_cells = sum_ranks(comm, n);
  const int64_t k = o.n_comps ? *o.n_comps : std::min<int64_t>(50, std::min(n_cells, g) - 1);
  if (k < 1 || k >= std::min(n_cells, g))
    throw InputError(detail::concat("pca: n_comps must be in [1, min(n_cells, n_genes) - 1] = [1, ",
                                    std::min(n_cells, g) - 1, "], got ", k));
  DeviceArray<float> xpca(r, static_cast<size_t>(n) * static_cast<size_t>(k), "X_pca");
  // The host X_pca is allocated and first touched on another thread while the device computes.
  auto host_x = std::async(std::launch::async, [n, k] {
    DenseF h;
    h.n_rows = n, h.n_cols = k;
    resize_large(h.data, static_cast<size_t>(n) * static_cast<size_t>(k));
    return h;
  });
  gpu::PcaRanks ranks;
  ranks.comm = &comm;
  if (device_sum)
    ranks.device_sum = [device_sum](double* p, size_t m, cudaStream_t st) { device_sum(p, m, static_cast<void*>(st)); };
  gpu::PcaGpuResult pr;
  if (s.is_dense) {
    if (g != g_all)
      throw InputError("pca: X on the GPU is dense and var['highly_variable'] marks a subset of its genes; subset "
                       "the genes before scale (highly_variable_genes(subset=True)) or pass use_highly_variable=False");
    pr = gpu::pca_dense(r, s.dense->data(), n, g, static_cast<int>(k), o.zero_center, xpca.data(), &ranks);
  } else {
    // The columns used (a copy when a subset), densified one block of rows at a time, each shifted
    // by its column means when centred (a centred PCA does not depend on the shift; the Gram of
    // near-centred rows loses far less to the cancellation in G - n mu mu^T).
    const DeviceCsr* src = &s.m;
    std::unique_ptr<ResidentX> sub;
    if (g != g_all) {
      sub = subset_copy(ctx, x, {}, true, genes, false);
      src = &sub->state().m;
    }
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(n, (int64_t{1} << 28) / std::max<int64_t>(g, 1)));
    DeviceArray<float> buf(r, static_cast<size_t>(chunk) * static_cast<size_t>(g), "dense rows (one chunk)");
    std::vector<float> zeros(static_cast<size_t>(g), 0.f), ones(static_cast<size_t>(g), 1.f);
    DeviceArray<float> d_zero = to_device(r, zeros, "zeros"), d_one = to_device(r, ones, "ones");
    DeviceArray<float> d_shift;
    if (o.zero_center) {
      gpu::GeneSums gs = gpu::gene_sums(r, *src, gpu::GeneTransform::identity, nullptr, gpu::SecondStat::count);
      sum_ranks(comm, gs.sum);
      std::vector<float> sh(static_cast<size_t>(g));
      for (int64_t j = 0; j < g; ++j) sh[j] = static_cast<float>(gs.sum[j] / static_cast<double>(n_cells));
      d_shift = to_device(r, sh, "PCA chunk shift");
    }
    auto rows = [&](int64_t a, int64_t nr) -> const float* {
      gpu::CsrView<float, int32_t> v = gpu::view(*src);
      v.n_rows = nr;
      v.indptr += a;
      gpu::scale_to_dense(r, v, d_zero.data(), d_one.data(), false, 0.f, buf.data());
      if (o.zero_center) gpu::subtract_columns(r, buf.data(), nr, g, d_shift.data());
      return buf.data();
    };
    pr = gpu::pca_rows(r, rows, n, g, chunk, static_cast<int>(k), o.zero_center, xpca.data(), &ranks);
  }
  DenseF hx = host_x.get();
  copy_to_host(r, hx.data.data(), xpca.data(), hx.data.size() * 4);
  PcaResult res;
  res.components = DenseD(g, k);
  for (int64_t i = 0; i < g * k; ++i) res.components.data[i] = pr.components[i];
  res.variance = pr.variance;
  res.total_variance = pr.total_variance;
  for (double v : pr.variance) res.variance_ratio.push_back(v / pr.total_variance);
  res.solver = "gram (cuSOLVER)";
  res.use_highly_variable = use_hv;
  res.genes = std::move(genes);
  write_pca(d, res, o);  // res.x_pca is empty: X_pca is moved in below, not copied
  if (o.dtype == DType::f64) {
    DenseD x64(n, k);
    for (size_t i = 0; i < hx.data.size(); ++i) x64.data[i] = hx.data[i];
    d.obsm["X_pca"] = Matrix(std::move(x64), DType::f64);
  } else {
    d.obsm["X_pca"] = Matrix(std::move(hx), DType::f32);
  }
}

}  // namespace resident
}  // namespace scurry
