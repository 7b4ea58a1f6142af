// scurry: cNMF's files (see cnmf_files.hpp).
#include "nmf/cnmf_files.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "core/output.hpp"

namespace scurry {

namespace fs = std::filesystem;

namespace {

std::string fmt_path(const std::string& base, const std::string& pattern) { return base + "/" + pattern; }

// Python repr from scientific shortest digits "d.ddde±XX".
std::string py_style(const char* sci) {
  std::string s(sci);
  bool neg = false;
  if (!s.empty() && s[0] == '-') neg = true, s.erase(0, 1);
  const size_t e = s.find('e');
  std::string mant = s.substr(0, e);
  const int exp = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (const char c : mant)
    if (c != '.') digits.push_back(c);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  if (exp < 0) return out + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  const size_t ip = static_cast<size_t>(exp) + 1;
  if (digits.size() <= ip) return out + digits + std::string(ip - digits.size(), '0') + ".0";
  return out + digits.substr(0, ip) + "." + digits.substr(ip);
}

template <class T>
std::string repr(T v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf - 1, v, std::chars_format::scientific);
  *r.ptr = '\0';
  return py_style(buf);
}

std::string field(double v) { return std::isnan(v) ? std::string() : repr(v); }
std::string field(float v) { return std::isnan(v) ? std::string() : repr(v); }

template <class M>
void write_table(const std::string& path, const std::vector<std::string>& index, const std::vector<std::string>& columns,
                 const M& values) {
  if (static_cast<int64_t>(index.size()) != values.n_rows || static_cast<int64_t>(columns.size()) != values.n_cols)
    fail("write_tsv_table: labels do not match the values' shape for ", path);
  std::string s;
  for (const auto& c : columns) s += "\t" + c;
  s += "\n";
  for (int64_t i = 0; i < values.n_rows; ++i) {
    s += index[i];
    for (int64_t j = 0; j < values.n_cols; ++j) s += "\t" + field(values(i, j));
    s += "\n";
  }
  write_text_file(path, s);
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  size_t p = 0;
  for (;;) {
    const size_t q = line.find('\t', p);
    out.push_back(line.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  return out;
}

}  // namespace

CnmfPaths::CnmfPaths(const std::string& output_dir, const std::string& n)
    : dir(output_dir + "/" + n), tmp(output_dir + "/" + n + "/cnmf_tmp"), name(n) {
  if (n.empty() || n.find('/') != std::string::npos)
    fail_input("--name", "'", n, "' is not a usable analysis name (non-empty, no '/')");
}

void CnmfPaths::make_dirs() const {
  std::error_code ec;
  fs::create_directories(tmp, ec);
  if (ec) fail_input(tmp, "cannot create the directory: ", ec.message());
}

std::string CnmfPaths::normalized_counts() const { return fmt_path(tmp, name + ".norm_counts.h5ad"); }
std::string CnmfPaths::tpm() const { return fmt_path(tmp, name + ".tpm.h5ad"); }
std::string CnmfPaths::tpm_stats() const { return fmt_path(tmp, name + ".tpm_stats.df.npz"); }
std::string CnmfPaths::replicate_params() const { return fmt_path(tmp, name + ".nmf_params.df.npz"); }
std::string CnmfPaths::run_params() const { return fmt_path(tmp, name + ".nmf_idvrun_params.yaml"); }
std::string CnmfPaths::genes_list() const { return fmt_path(dir, name + ".overdispersed_genes.txt"); }
std::string CnmfPaths::iter_spectra(int k, int iter) const {
  return fmt_path(tmp, name + ".spectra.k_" + std::to_string(k) + ".iter_" + std::to_string(iter) + ".df.npz");
}
std::string CnmfPaths::merged_spectra(int k) const {
  return fmt_path(tmp, name + ".spectra.k_" + std::to_string(k) + ".merged.df.npz");
}
std::string CnmfPaths::local_density_cache(int k) const {
  return fmt_path(tmp, name + ".local_density_cache.k_" + std::to_string(k) + ".merged.df.npz");
}
std::string CnmfPaths::kdt(const char* folder_tmp_or_dir, const std::string& stem, int k, const std::string& dt,
                           const std::string& ext) const {
  return fmt_path(folder_tmp_or_dir[0] == 't' ? tmp : dir,
                  name + "." + stem + ".k_" + std::to_string(k) + ".dt_" + dt + ext);
}
std::string CnmfPaths::consensus_spectra(int k, const std::string& dt) const { return kdt("tmp", "spectra", k, dt, ".consensus.df.npz"); }
std::string CnmfPaths::consensus_spectra_txt(int k, const std::string& dt) const { return kdt("dir", "spectra", k, dt, ".consensus.txt"); }
std::string CnmfPaths::consensus_usages(int k, const std::string& dt) const { return kdt("tmp", "usages", k, dt, ".consensus.df.npz"); }
std::string CnmfPaths::consensus_usages_txt(int k, const std::string& dt) const { return kdt("dir", "usages", k, dt, ".consensus.txt"); }
std::string CnmfPaths::gene_spectra_score(int k, const std::string& dt) const { return kdt("tmp", "gene_spectra_score", k, dt, ".df.npz"); }
std::string CnmfPaths::gene_spectra_score_txt(int k, const std::string& dt) const { return kdt("dir", "gene_spectra_score", k, dt, ".txt"); }
std::string CnmfPaths::gene_spectra_tpm(int k, const std::string& dt) const { return kdt("tmp", "gene_spectra_tpm", k, dt, ".df.npz"); }
std::string CnmfPaths::gene_spectra_tpm_txt(int k, const std::string& dt) const { return kdt("dir", "gene_spectra_tpm", k, dt, ".txt"); }
std::string CnmfPaths::starcat_spectra(int k, const std::string& dt) const { return kdt("tmp", "starcat_spectra", k, dt, ".df.npz"); }
std::string CnmfPaths::starcat_spectra_txt(int k, const std::string& dt) const { return kdt("dir", "starcat_spectra", k, dt, ".txt"); }
std::string CnmfPaths::clustering_plot(int k, const std::string& dt) const { return kdt("dir", "clustering", k, dt, ".png"); }
std::string CnmfPaths::k_selection_plot() const { return fmt_path(dir, name + ".k_selection.png"); }
std::string CnmfPaths::k_selection_stats() const { return fmt_path(dir, name + ".k_selection_stats.df.npz"); }

std::string py_float_repr(double v) { return repr(v); }
std::string py_float_repr(float v) { return repr(v); }

std::string cnmf_dt_tag(double threshold) {
  std::string s = py_float_repr(threshold);
  for (char& c : s)
    if (c == '.') c = '_';
  return s;
}

void write_tsv_table(const std::string& path, const std::vector<std::string>& index,
                     const std::vector<std::string>& columns, const DenseF& values) {
  write_table(path, index, columns, values);
}
void write_tsv_table(const std::string& path, const std::vector<std::string>& index,
                     const std::vector<std::string>& columns, const DenseD& values) {
  write_table(path, index, columns, values);
}

TsvTable read_tsv_table(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail_input(path, "cannot open the file (did the previous cNMF step run with the same --output-dir/--name?)");
  TsvTable t;
  std::string line;
  if (!std::getline(in, line)) fail_input(path, "the file is empty");
  auto head = split_tabs(line);
  t.columns.assign(head.begin() + 1, head.end());
  std::vector<double> vals;
  int64_t ln = 1;
  while (std::getline(in, line)) {
    ++ln;
    if (line.empty()) continue;
    const auto f = split_tabs(line);
    if (f.size() != head.size())
      fail_input(path, "line ", ln, " has ", f.size(), " fields but the header has ", head.size());
    t.index.push_back(f[0]);
    for (size_t q = 1; q < f.size(); ++q) {
      if (f[q].empty()) {
        vals.push_back(std::nan(""));
        continue;
      }
      char* end = nullptr;
      const double v = std::strtod(f[q].c_str(), &end);
      if (end == f[q].c_str() || *end != '\0') fail_input(path, "line ", ln, ": '", f[q], "' is not a number");
      vals.push_back(v);
    }
  }
  t.values.n_rows = static_cast<int64_t>(t.index.size());
  t.values.n_cols = static_cast<int64_t>(t.columns.size());
  t.values.data = std::move(vals);
  return t;
}

void write_key_values(const std::string& path, const std::vector<std::pair<std::string, std::string>>& kv) {
  std::string s;
  for (const auto& [k, v] : kv) s += k + "\t" + v + "\n";
  write_text_file(path, s);
}

std::vector<std::pair<std::string, std::string>> read_key_values(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail_input(path, "cannot open the file (run `scurry cnmf prepare` first)");
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const size_t t = line.find('\t');
    if (t == std::string::npos) fail_input(path, "line '", line, "' is not key<TAB>value");
    out.emplace_back(line.substr(0, t), line.substr(t + 1));
  }
  return out;
}

void write_flat_yaml(const std::string& path, const std::vector<std::pair<std::string, std::string>>& kv) {
  auto sorted = kv;
  std::sort(sorted.begin(), sorted.end());  // yaml.dump's sort_keys
  std::string s;
  for (const auto& [k, v] : sorted) s += k + ": " + v + "\n";
  write_text_file(path, s);
}

std::vector<std::pair<std::string, std::string>> read_flat_yaml(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail_input(path, "cannot open the file (run `cnmf prepare` first)");
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  int no = 0;
  auto trim = [](std::string x) {
    const size_t a = x.find_first_not_of(" \t\r"), b = x.find_last_not_of(" \t\r");
    return a == std::string::npos ? std::string() : x.substr(a, b - a + 1);
  };
  while (std::getline(in, line)) {
    ++no;
    std::string t = trim(line);
    if (t.empty() || t[0] == '#' || t == "---" || t == "...") continue;
    if (line[0] == ' ' || line[0] == '\t' || t[0] == '-' || t[0] == '{' || t[0] == '[')
      fail_input(path, "line ", no, ": '", line, "' is not a top-level 'key: value' (scurry reads flat mappings only)");
    const size_t c = t.find(": ");
    std::string key = c == std::string::npos ? (t.back() == ':' ? t.substr(0, t.size() - 1) : std::string()) : t.substr(0, c);
    if (key.empty()) fail_input(path, "line ", no, ": '", line, "' is not 'key: value'");
    std::string v = c == std::string::npos ? std::string() : trim(t.substr(c + 2));
    if (!v.empty() && v[0] != '\'' && v[0] != '"') {
      const size_t h = v.find(" #");
      if (h != std::string::npos) v = trim(v.substr(0, h));
    }
    if (v.size() >= 2 && (v[0] == '\'' || v[0] == '"') && v.back() == v[0]) v = v.substr(1, v.size() - 2);
    if (v == "null" || v == "~") v.clear();
    out.emplace_back(trim(key), v);
  }
  return out;
}

void write_text_file(const std::string& path, const std::string& text) { write_file_atomic(path, text); }

}  // namespace scurry
