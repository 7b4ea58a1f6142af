// scurry: 10x Genomics inputs: Cell Ranger .h5 (v2 genome groups, v3 `matrix` with `features`) and
// mtx directories (v2 genes.tsv, v3 features.tsv.gz; gzipped or not). X comes out as CSR cells x
// genes float32 counts (dtype kept as on disk), obs index = barcodes, var index = gene symbols made
// unique the way scanpy's var_names_make_unique does, var['gene_ids'] (and var['feature_types']
// for v3), as scanpy.read_10x_h5 / read_10x_mtx give.
#pragma once
#include <string>
#include <vector>

#include "core/dataset.hpp"

namespace scurry {

struct TenxOptions {
  std::string genome;                  // v2 .h5 with several genomes: which one ("" = the only one)
  bool gex_only = true;                // v3: keep only "Gene Expression" features (scanpy's default)
};

Dataset read_10x_h5(const std::string& path, const TenxOptions& opt = {});
Dataset read_10x_mtx(const std::string& dir, const TenxOptions& opt = {});
// True if the HDF5 file at path has a top-level `matrix` group or v2 genome groups holding
// `barcodes` (i.e. is a Cell Ranger .h5, not an h5ad).
bool hdf5_looks_like_10x(const std::string& path);

// scanpy/anndata's var_names_make_unique: the second occurrence of "A" becomes "A-1", the third
// "A-2", ...; a generated name that already exists is skipped to the next number.
std::vector<std::string> make_unique(const std::vector<std::string>& names, const std::string& join = "-");

}  // namespace scurry
