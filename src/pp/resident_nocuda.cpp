// Built without CUDA: no resident steps (pp/resident.hpp); upload says so, and nothing else can be
// reached without a ResidentX.
#include "core/error.hpp"
#include "pp/resident.hpp"

namespace scurry {

struct ResidentX::State {};
ResidentX::ResidentX(std::unique_ptr<State> s) : s_(std::move(s)) {}
ResidentX::~ResidentX() = default;
int64_t ResidentX::n_rows() const { return 0; }
int64_t ResidentX::n_cols() const { return 0; }
bool ResidentX::dense() const { return false; }
int64_t ResidentX::nnz() const { return 0; }
int ResidentX::device() const { return -1; }

namespace resident {
namespace {
[[noreturn]] void no_cuda() { throw InputError("this scurry was built without CUDA: no GPU steps; use the CPU"); }
}  // namespace
std::unique_ptr<ResidentX> upload(Context&, const Matrix&) { no_cuda(); }
std::unique_ptr<ResidentX> upload(Context&, const CsrParts&, const std::string&) { no_cuda(); }
Matrix download(Context&, const ResidentX&) { no_cuda(); }
std::unique_ptr<ResidentX> subset_copy(Context&, const ResidentX&, const std::vector<int64_t>&, bool,
                                       const std::vector<int64_t>&, bool) { no_cuda(); }
void check_counts(Context&, ResidentX&, const std::string&) { no_cuda(); }
void note_counts(Context&, ResidentX&) { no_cuda(); }
void qc(Context&, ResidentX&, Dataset&, const QcOptions&) { no_cuda(); }
std::vector<uint8_t> filter_cells(Context&, ResidentX&, Dataset&, const FilterCellsOptions&) { no_cuda(); }
std::vector<uint8_t> filter_genes(Context&, ResidentX&, Dataset&, const FilterGenesOptions&) { no_cuda(); }
void normalize_total(Context&, ResidentX&, Dataset&, const NormalizeTotalOptions&, bool) { no_cuda(); }
void log1p(Context&, ResidentX&, Dataset&) { no_cuda(); }
void highly_variable_genes(Context&, ResidentX&, Dataset&, const HvgOptions&) { no_cuda(); }
void subset_vars(Context&, ResidentX&, Dataset*, const std::vector<int64_t>&) { no_cuda(); }
void scale(Context&, ResidentX&, Dataset&, const ScaleOptions&) { no_cuda(); }
void pca(Context&, ResidentX&, Dataset&, const PcaOptions&, const DeviceSumFn&) { no_cuda(); }
}  // namespace resident
void stepwise_chain_simulated(Context&, DeviceSimulated&, Dataset&, const PreprocessOptions&, Timings*, bool) {
  throw InputError("this scurry was built without CUDA; use --device cpu");
}
}  // namespace scurry
