// scurry: Dataset, AnnData's model in C++: X (cells x genes), layers, obs, var, obsm, varm, obsp,
// varp, uns and an optional raw (X, var, varm). Steps read and write its named slots under the
// names scanpy uses.
#pragma once
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/matrix.hpp"
#include "core/table.hpp"
#include "core/value.hpp"

namespace scurry {

// A copy of a matrix's values on a GPU: row-major float32, n_rows x n_cols, on CUDA device
// `device`, complete once the work queued so far on that device's main stream has run; `keep` owns
// the memory.
struct DeviceMatrix {
  const float* data = nullptr;
  int64_t n_rows = 0, n_cols = 0;
  int device = -1;
  std::shared_ptr<void> keep;
};

struct Dataset {
  Matrix X;
  std::map<std::string, Matrix> layers;
  Table obs, var;
  std::map<std::string, Matrix> obsm, varm, obsp, varp;
  Dict uns;
  std::shared_ptr<Dataset> raw;  // only X, var and varm are meaningful
  // X still being made in the background (a GPU run copies its scaled X back to the host while the
  // graph steps run: PreprocessOptions::background_x); X is empty until settle() moves it in. The
  // writers and the steps that read X refuse a dataset with pending work (an internal error: the
  // caller settles first). Copies of the dataset share it; the first to settle takes X.
  std::shared_ptr<std::future<Matrix>> pending_x;
  // X's values still on the GPU (a GPU run keeps its scaled dense X there for the markers step:
  // PreprocessOptions::keep_device_x). It describes X only while X is unchanged: the step that made
  // X sets it, subset_obs/subset_vars drop it, and whoever else changes X must reset it.
  std::shared_ptr<const DeviceMatrix> device_x;

  // Waits for pending_x and moves it into X (rethrowing its error); a no-op when there is none.
  void settle() {
    if (!pending_x) return;
    auto p = std::move(pending_x);
    if (p->valid()) X = p->get();
  }

  int64_t n_obs() const { return obs.n_rows(); }
  int64_t n_vars() const { return var.n_rows(); }

  // Checks every slot against (n_obs, n_vars), and raw's against (n_obs, raw.var); throws InputError
  // "<where>: <slot> has shape ... but ...".
  void check_shapes(const std::string& where) const;

  // Keep the given cells (rows), in that order, in X, layers, obs, obsm, obsp.
  void subset_obs(const std::vector<int64_t>& keep);
  // Keep the given genes (columns), in that order, in X, layers, var, varm, varp.
  void subset_vars(const std::vector<int64_t>& keep);
};

// Row and column selection on matrices (copies).
template <class T>
Csr<T> take_rows(const Csr<T>& a, const std::vector<int64_t>& rows);
template <class T>
Csr<T> slice_rows(const Csr<T>& a, int64_t begin, int64_t end);
template <class T>
Csr<T> take_cols(const Csr<T>& a, const std::vector<int64_t>& cols);
Matrix take_rows(const Matrix& m, const std::vector<int64_t>& rows);
Matrix take_cols(const Matrix& m, const std::vector<int64_t>& cols);

}  // namespace scurry
