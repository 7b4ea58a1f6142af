// scurry: cNMF's on-disk layout (dylkot/cNMF 1.7 cnmf.py `_initialize_dirs`): DIR/NAME/ holds the
// results, DIR/NAME/cnmf_tmp/ the intermediate files, every one with cNMF's name and format:
// .df.npz = numpy savez_compressed of a DataFrame's data/index/columns (io/npz.hpp), the run
// parameters as cNMF's yaml (a flat mapping), the h5ad intermediates as h5ad, and the results as
// pandas to_csv(sep='\t') TSVs (a header of an empty index name and the column names, then one row
// per index entry; floats as Python's repr, NaN as an empty field).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/matrix.hpp"

namespace scurry {

struct CnmfPaths {
  std::string dir;   // DIR/NAME
  std::string tmp;   // DIR/NAME/cnmf_tmp
  std::string name;  // NAME

  CnmfPaths(const std::string& output_dir, const std::string& name);
  void make_dirs() const;  // creates dir and tmp

  std::string normalized_counts() const;            // cnmf_tmp/NAME.norm_counts.h5ad
  std::string tpm() const;                          // cnmf_tmp/NAME.tpm.h5ad
  std::string tpm_stats() const;                    // cnmf_tmp/NAME.tpm_stats.df.npz
  std::string replicate_params() const;             // cnmf_tmp/NAME.nmf_params.df.npz
  std::string run_params() const;                   // cnmf_tmp/NAME.nmf_idvrun_params.yaml
  std::string genes_list() const;                   // NAME.overdispersed_genes.txt
  std::string iter_spectra(int k, int iter) const;  // cnmf_tmp/NAME.spectra.k_K.iter_I.df.npz
  std::string merged_spectra(int k) const;          // cnmf_tmp/NAME.spectra.k_K.merged.df.npz
  std::string local_density_cache(int k) const;     // cnmf_tmp/NAME.local_density_cache.k_K.merged.df.npz
  // dt: cnmf_dt_tag(threshold). The .df.npz in cnmf_tmp/, the .txt/.png in NAME/.
  std::string consensus_spectra(int k, const std::string& dt) const;       // NAME.spectra.k_K.dt_X.consensus.df.npz
  std::string consensus_spectra_txt(int k, const std::string& dt) const;   // NAME.spectra.k_K.dt_X.consensus.txt
  std::string consensus_usages(int k, const std::string& dt) const;        // NAME.usages.k_K.dt_X.consensus.df.npz
  std::string consensus_usages_txt(int k, const std::string& dt) const;    // NAME.usages.k_K.dt_X.consensus.txt
  std::string gene_spectra_score(int k, const std::string& dt) const;      // NAME.gene_spectra_score.k_K.dt_X.df.npz
  std::string gene_spectra_score_txt(int k, const std::string& dt) const;  // NAME.gene_spectra_score.k_K.dt_X.txt
  std::string gene_spectra_tpm(int k, const std::string& dt) const;        // NAME.gene_spectra_tpm.k_K.dt_X.df.npz
  std::string gene_spectra_tpm_txt(int k, const std::string& dt) const;    // NAME.gene_spectra_tpm.k_K.dt_X.txt
  std::string starcat_spectra(int k, const std::string& dt) const;         // NAME.starcat_spectra.k_K.dt_X.df.npz
  std::string starcat_spectra_txt(int k, const std::string& dt) const;     // NAME.starcat_spectra.k_K.dt_X.txt
  std::string clustering_plot(int k, const std::string& dt) const;         // NAME.clustering.k_K.dt_X.png
  std::string k_selection_plot() const;             // NAME.k_selection.png
  std::string k_selection_stats() const;            // NAME.k_selection_stats.df.npz

 private:
  std::string kdt(const char* folder, const std::string& stem, int k, const std::string& dt, const std::string& ext) const;
};

// Python's str(float) (repr): shortest round-trip digits, fixed notation for exponents -4..15
// ("0.5", "2.0", "1e-05", "1.5e+16"); "nan", "inf", "-inf".
std::string py_float_repr(double v);
// The float32 value's shortest digits in the same style (numpy float32 repr).
std::string py_float_repr(float v);
// cNMF's density-threshold tag: str(threshold) with '.' replaced by '_' ("0.5" -> "0_5").
std::string cnmf_dt_tag(double threshold);

// A labelled table, as the TSV files hold it.
struct TsvTable {
  std::vector<std::string> index, columns;
  DenseD values;  // index.size() x columns.size(); NaN = empty field
};
// Writes atomically (temporary then rename). Float32 tables print each value's shortest float
// digits (exact round trip through read_tsv_table + float conversion).
void write_tsv_table(const std::string& path, const std::vector<std::string>& index,
                     const std::vector<std::string>& columns, const DenseF& values);
void write_tsv_table(const std::string& path, const std::vector<std::string>& index,
                     const std::vector<std::string>& columns, const DenseD& values);
// Throws InputError naming the path and line on anything malformed.
TsvTable read_tsv_table(const std::string& path);

// key<TAB>value lines.
void write_key_values(const std::string& path, const std::vector<std::pair<std::string, std::string>>& kv);
std::vector<std::pair<std::string, std::string>> read_key_values(const std::string& path);
// cNMF's run parameters: yaml.dump of a flat dict (sorted keys, "key: value" lines). The reader takes
// any flat block mapping of scalars (comments, quotes, blank lines) and throws InputError naming the
// path and line on nested or flow-style content.
void write_flat_yaml(const std::string& path, const std::vector<std::pair<std::string, std::string>>& kv);
std::vector<std::pair<std::string, std::string>> read_flat_yaml(const std::string& path);
// Writes text atomically.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace scurry
