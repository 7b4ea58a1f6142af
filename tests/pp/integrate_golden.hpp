// The batch tools' shared-data input (issue 21): pbmc3k's log-normalised matrix (raw.X of the
// golden h5ad) at the 2,000 HVGs, with obs total_counts (scanpy's QC table), pct_counts_mt and the
// made-up batch of the references ('a' for the first 500 cells, 'b' for the rest), and the
// references themselves (tests/data/golden/pbmc3k_first1000.scanpy_integrate.h5; README there).
#pragma once
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "io/h5ad.hpp"
#include "io/hdf5.hpp"
#include "testlib.hpp"

namespace scurry::test {

inline std::string integrate_golden_path() { return test_data("golden/pbmc3k_first1000.scanpy_integrate.h5"); }

inline Dataset integrate_input() {
  const Dataset g = read_h5ad(test_data("golden/pbmc3k_first1000.scanpy.h5ad"));
  h5::File f = h5::File::open(integrate_golden_path());
  const std::vector<int32_t> idx = f.dataset("hvg_raw_index").read<int32_t>();
  std::vector<int64_t> cols(idx.begin(), idx.end());
  Dataset d;
  d.X = Matrix(to_dense_f(take_cols(g.raw->X, cols)));
  d.obs.index = g.obs.index;
  d.var.index = g.var.index;
  d.obs.set("total_counts", Column::numeric(f.dataset("total_counts").read<double>()));
  d.obs.set("pct_counts_mt", Column::numeric(g.obs.numeric("pct_counts_mt")));
  CategoricalColumn batch;
  batch.categories = {"a", "b"};
  for (int64_t i = 0; i < d.n_obs(); ++i) batch.codes.push_back(i < 500 ? 0 : 1);
  d.obs.set("batch", Column(batch));
  d.obsm["X_pca"] = g.obsm.at("X_pca");
  return d;
}

// A reference matrix of the integrate file (rows x cols, float32 -> double).
inline DenseD integrate_reference(const std::string& name) {
  h5::File f = h5::File::open(integrate_golden_path());
  h5::Dataset ds = f.dataset(name);
  const auto shape = ds.shape();
  DenseD m(shape[0], shape.size() > 1 ? shape[1] : 1);
  m.data = ds.read<double>();
  return m;
}

}  // namespace scurry::test
