// Times write_h5ad on a dataset shaped like the GPU benchmark's output at 1.3M cells (obs names, the
// QC columns, obsm X_pca 50 columns, varm PCs), and on parts of it, to see where the time goes.
// Usage: scurry_write_bench [N_CELLS] [OUT_DIR]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/dataset.hpp"
#include "io/h5ad.hpp"

using namespace scurry;

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 1306127;
  const std::string dir = argc > 2 ? argv[2] : "/tmp";
  const int64_t g = 2000, k = 50;
  Dataset full;
  full.obs.index.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) full.obs.index[i] = "cell" + std::to_string(i);
  for (int c = 0; c < 12; ++c) {
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>((i * 7 + c) % 1000) * (c % 3 == 0 ? 1.0 : 0.5);
    full.obs.set("col" + std::to_string(c), Column::numeric(std::move(v), c % 3 == 0 ? DType::i32 : c % 3 == 1 ? DType::f32 : DType::f64));
  }
  full.var.index.resize(static_cast<size_t>(g));
  for (int64_t j = 0; j < g; ++j) full.var.index[j] = "GENE" + std::to_string(j);
  DenseF x(n, k);
  for (size_t i = 0; i < x.data.size(); ++i) x.data[i] = static_cast<float>(i % 977) * 0.01f;
  full.obsm["X_pca"] = Matrix(std::move(x), DType::f32);
  H5adWriteOptions o;
  o.allow_no_x = true;
  auto time_write = [&](const Dataset& d, const char* what) {
    const double t0 = now();
    write_h5ad(d, dir + "/write_bench.h5ad", o);
    std::printf("%-28s %.3f s\n", what, now() - t0);
  };
  time_write(full, "all");
  time_write(full, "all (again)");
  Dataset names_only;
  names_only.obs.index = full.obs.index;
  names_only.var = full.var;
  time_write(names_only, "obs names only");
  Dataset cols = full;
  cols.obsm.clear();
  time_write(cols, "obs names + 12 columns");
  Dataset pca;
  pca.obs.index = full.obs.index;
  pca.var = full.var;
  pca.obsm = full.obsm;
  time_write(pca, "obs names + X_pca");
  return 0;
}
