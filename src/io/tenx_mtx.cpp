// scurry: 10x Genomics mtx directories (Cell Ranger v2: matrix.mtx, genes.tsv, barcodes.tsv; v3:
// matrix.mtx.gz, features.tsv.gz, barcodes.tsv.gz; each file gzipped or not), read as
// scanpy.read_10x_mtx does, and anndata's make_index_unique.
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/progress.hpp"
#include "io/format.hpp"
#include "io/tenx.hpp"

namespace scurry {

namespace fs = std::filesystem;

namespace {

constexpr size_t kChunkBytes = size_t(8) << 20;  // bytes read from the (decompressed) stream at a time
constexpr size_t kFirstChunkBytes = size_t(64) << 10;  // ... at first: doubled per full read up to kChunkBytes
constexpr size_t kEchoChars = 60;                // at most this much of a bad line is quoted in errors

// Lines of a text file, gzipped or not (zlib reads plain files transparently), read in big chunks.
class LineReader {
 public:
  // With `progress`, a progress bar over the file's bytes (shown only on a terminal).
  explicit LineReader(std::string path, bool progress = false) : path_(std::move(path)) {
    refuse_special_file(path_);  // a FIFO would block gzopen forever
    errno = 0;
    f_ = gzopen(path_.c_str(), "rb");
    if (!f_) fail_input(path_, "cannot be opened for reading (", errno ? std::strerror(errno) : "out of memory", ")");
    // Small files (barcodes, features; fuzzed inputs) take small buffers: zlib's are 3x its size and
    // ours is zero-filled, so 9 MB per file cost more than reading a few KB.
    std::error_code ec;
    const auto size = fs::file_size(path_, ec);
    const size_t want = ec ? (size_t(1) << 20) : std::clamp<size_t>(static_cast<size_t>(size), 8u << 10, 1u << 20);
    gzbuffer(f_, static_cast<unsigned>(want));
    buf_.resize(kFirstChunkBytes);
    if (progress) {
      progress_ = std::make_unique<Progress>("reading " + fs::path(path_).filename().string(),
                                             ec ? 0 : static_cast<int64_t>(size));
    }
  }
  ~LineReader() {
    if (f_) gzclose(f_);
  }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line without its terminator ("\n" or "\r\n"); false at the end of the file.
  bool next(std::string_view& line) {
    for (;;) {
      const char* base = buf_.data();
      const void* nl = pos_ < end_ ? std::memchr(base + pos_, '\n', end_ - pos_) : nullptr;
      if (nl) {
        const size_t at = static_cast<size_t>(static_cast<const char*>(nl) - base);
        line = std::string_view(base + pos_, at - pos_);
        pos_ = at + 1;
        return finish(line);
      }
      if (eof_) {
        if (pos_ >= end_) return false;
        line = std::string_view(base + pos_, end_ - pos_);
        pos_ = end_;
        return finish(line);
      }
      fill();
    }
  }
  int64_t line_no() const { return line_no_; }
  const std::string& path() const { return path_; }

 private:
  bool finish(std::string_view& line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++line_no_;
    return true;
  }
  void fill() {
    const size_t rem = end_ - pos_;
    if (rem > 0 && pos_ > 0) std::memmove(buf_.data(), buf_.data() + pos_, rem);
    pos_ = 0;
    end_ = rem;
    if (end_ == buf_.size() || (full_reads_ > 0 && buf_.size() < kChunkBytes))
      buf_.resize(buf_.size() * 2);  // a line longer than the buffer, or a big file
    const size_t want = std::min<size_t>(buf_.size() - end_, size_t(1) << 30);
    const int n = gzread(f_, buf_.data() + end_, static_cast<unsigned>(want));
    int err = Z_OK;
    const char* msg = gzerror(f_, &err);
    if (n < 0 || (err != Z_OK && err != Z_STREAM_END))
      fail_input(path_, "read error after line ", line_no_, " (", msg ? msg : "zlib error",
                 "): the file is corrupt or truncated; download or copy it again");
    if (n == 0) eof_ = true;
    full_reads_ = static_cast<size_t>(n) == want ? full_reads_ + 1 : 0;
    end_ += static_cast<size_t>(n);
    if (progress_) {
      const int64_t at = static_cast<int64_t>(gzoffset(f_));
      if (at > consumed_) progress_->advance(at - consumed_);
      consumed_ = std::max(consumed_, at);
    }
  }

  std::string path_;
  gzFile f_ = nullptr;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;
  bool eof_ = false;
  int64_t full_reads_ = 0;  // consecutive fills that got all they asked for
  int64_t line_no_ = 0;
  std::unique_ptr<Progress> progress_;
  int64_t consumed_ = 0;  // compressed bytes read so far
};

std::string quote(std::string_view s) {
  std::string q(s.substr(0, kEchoChars));
  if (s.size() > kEchoChars) q += "...";
  return "'" + q + "'";
}

bool is_blank(char c) { return c == ' ' || c == '\t'; }

// Splits on runs of spaces/tabs.
std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> w;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_blank(s[i])) ++i;
    size_t j = i;
    while (j < s.size() && !is_blank(s[j])) ++j;
    if (j > i) w.push_back(s.substr(i, j - i));
    i = j;
  }
  return w;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// Parses one whitespace-delimited integer token starting at p (leading blanks skipped).
bool next_int(const char*& p, const char* end, int64_t& v) {
  while (p < end && is_blank(*p)) ++p;
  auto [q, ec] = std::from_chars(p, end, v);
  if (ec != std::errc() || (q < end && !is_blank(*q))) return false;
  p = q;
  return true;
}
bool next_double(const char*& p, const char* end, double& v) {
  while (p < end && is_blank(*p)) ++p;
  if (p < end && *p == '+') ++p;  // from_chars rejects a leading '+'
  auto [q, ec] = std::from_chars(p, end, v);
  if (ec != std::errc() || (q < end && !is_blank(*q))) return false;
  p = q;
  return true;
}
bool only_blanks(const char* p, const char* end) {
  while (p < end && is_blank(*p)) ++p;
  return p == end;
}

struct Mtx {
  int64_t n_genes = 0, n_cells = 0;
  CsrF x;  // cells x genes
};

// The MatrixMarket file: genes x cells coordinates, 1-based. Returns CSR cells x genes with sorted
// column indices; duplicate coordinates are summed and explicit zeros kept (as scipy's
// coo -> csr conversion does).
Mtx read_mtx(const std::string& path) {
  LineReader in(path, /*progress=*/true);
  std::string_view line;
  if (!in.next(line)) fail_input(path, "empty file; expected a '%%MatrixMarket matrix coordinate ...' header");
  {
    const auto w = words(line);
    const bool ok = w.size() == 5 && lower(w[0]) == "%%matrixmarket" && lower(w[1]) == "matrix" &&
                    lower(w[2]) == "coordinate" && (lower(w[3]) == "integer" || lower(w[3]) == "real") &&
                    lower(w[4]) == "general";
    if (!ok)
      fail_input(path, "line 1: expected the header '%%MatrixMarket matrix coordinate integer|real general', got ",
                 quote(line), "; is this a 10x matrix.mtx file?");
  }
  const bool integer = lower(words(line)[3]) == "integer";

  // Size line after comments.
  int64_t rows = -1, cols = -1, nnz = -1;
  for (;;) {
    if (!in.next(line)) fail_input(path, "ends before the size line 'GENES CELLS ENTRIES'; the file is truncated");
    if (!line.empty() && line[0] == '%') continue;
    if (only_blanks(line.data(), line.data() + line.size())) continue;
    const char* p = line.data();
    const char* e = p + line.size();
    if (!next_int(p, e, rows) || !next_int(p, e, cols) || !next_int(p, e, nnz) || !only_blanks(p, e) || rows < 0 ||
        cols < 0 || nnz < 0)
      fail_input(path, "line ", in.line_no(), ": expected the size line 'GENES CELLS ENTRIES' (three non-negative integers), got ",
                 quote(line));
    break;
  }
  const int64_t size_line = in.line_no();
  constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();
  if (rows > kMaxDim || cols > kMaxDim)
    fail_input(path, "line ", size_line, ": ", rows, " x ", cols, " is larger than scurry supports (at most ", kMaxDim,
               " genes and cells)");
  if (static_cast<double>(nnz) > static_cast<double>(rows) * static_cast<double>(cols))
    fail_input(path, "line ", size_line, ": ", nnz, " entries do not fit a ", rows, " x ", cols,
               " matrix; the size line is corrupt");

  // The declared entry count is checked against what the file can hold before memory is reserved
  // for it: an entry line "G C V\n" takes at least 6 bytes; a gzipped file inflates at most 1032-fold
  // (deflate's maximum ratio), so there the reservation is capped and the count checked at the end.
  const int64_t max_entries = [&] {
    std::error_code ec;
    const auto bytes = static_cast<double>(fs::file_size(path, ec));
    unsigned char magic[2] = {0, 0};
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      if (std::fread(magic, 1, 2, f) != 2) magic[0] = 0;
      std::fclose(f);
    }
    const bool gz = magic[0] == 0x1f && magic[1] == 0x8b;
    return static_cast<int64_t>(std::min(9e18, (ec ? 0.0 : bytes) * (gz ? 1032.0 : 1.0) / 6.0)) + 1;
  }();
  if (nnz > max_entries)
    fail_input(path, "line ", size_line, ": declares ", nnz, " entries, more than the file's ", fs::file_size(path),
               " bytes can hold (the size line is corrupt or the file truncated)");
  std::vector<int32_t> cell, gene;
  std::vector<float> val;
  cell.reserve(static_cast<size_t>(nnz));
  gene.reserve(static_cast<size_t>(nnz));
  val.reserve(static_cast<size_t>(nnz));
  int64_t count = 0;
  while (in.next(line)) {
    const char* p = line.data();
    const char* e = p + line.size();
    if (only_blanks(p, e) || line[0] == '%') continue;
    if (count == nnz)
      fail_input(path, "line ", in.line_no(), ": more entries than the ", nnz, " declared on line ", size_line,
                 "; the file is corrupt");
    int64_t i = 0, j = 0;
    if (!next_int(p, e, i) || !next_int(p, e, j))
      fail_input(path, "line ", in.line_no(), ": expected 'GENE CELL VALUE', got ", quote(line));
    double v = 0;
    bool ok;
    if (integer) {
      int64_t iv = 0;
      ok = next_int(p, e, iv);
      v = static_cast<double>(iv);
    } else {
      ok = next_double(p, e, v);
    }
    if (!ok || !only_blanks(p, e))
      fail_input(path, "line ", in.line_no(), ": expected 'GENE CELL VALUE' with ", integer ? "an integer" : "a real",
                 " value, got ", quote(line));
    if (i < 1 || i > rows)
      fail_input(path, "line ", in.line_no(), ": gene (row) index ", i, " is outside 1..", rows,
                 " (the size line says ", rows, " genes)");
    if (j < 1 || j > cols)
      fail_input(path, "line ", in.line_no(), ": cell (column) index ", j, " is outside 1..", cols,
                 " (the size line says ", cols, " cells)");
    if (!std::isfinite(v) || v < 0)
      fail_input(path, "line ", in.line_no(), ": the value in ", quote(line), " is ",
                 std::isfinite(v) ? "negative" : "not finite", "; counts must be finite and non-negative");
    gene.push_back(static_cast<int32_t>(i - 1));
    cell.push_back(static_cast<int32_t>(j - 1));
    val.push_back(static_cast<float>(v));
    ++count;
  }
  if (count != nnz)
    fail_input(path, "has ", count, " entries but its size line (line ", size_line, ") declares ", nnz,
               "; the file is truncated or corrupt");

  Mtx out;
  out.n_genes = rows;
  out.n_cells = cols;
  CsrF& x = out.x;
  x.n_rows = cols;
  x.n_cols = rows;
  x.indptr.assign(static_cast<size_t>(cols) + 1, 0);
  for (int32_t c : cell) ++x.indptr[static_cast<size_t>(c) + 1];
  std::partial_sum(x.indptr.begin(), x.indptr.end(), x.indptr.begin());
  if (std::is_sorted(cell.begin(), cell.end())) {  // Cell Ranger's order: by cell, then gene
    x.indices = std::move(gene);
    x.data = std::move(val);
  } else {  // scatter
    x.indices.resize(static_cast<size_t>(nnz));
    x.data.resize(static_cast<size_t>(nnz));
    std::vector<int64_t> next(x.indptr.begin(), x.indptr.end() - 1);
    for (int64_t k = 0; k < nnz; ++k) {
      const int64_t at = next[static_cast<size_t>(cell[k])]++;
      x.indices[at] = gene[k];
      x.data[at] = val[k];
    }
    std::vector<int32_t>().swap(gene);
    std::vector<float>().swap(val);
  }
  std::vector<int32_t>().swap(cell);

  // Sort column indices within each row; sum duplicates (compacting in place).
  std::vector<std::pair<int32_t, float>> tmp;
  int64_t w = 0, b = 0;
  for (int64_t r = 0; r < x.n_rows; ++r) {
    const int64_t e = x.indptr[r + 1];  // the old end; indptr[r] already holds row r-1's new end
    bool strictly = true;
    for (int64_t k = b + 1; k < e && strictly; ++k) strictly = x.indices[k - 1] < x.indices[k];
    if (strictly) {
      if (w != b)
        for (int64_t k = b; k < e; ++k) {
          x.indices[w + (k - b)] = x.indices[k];
          x.data[w + (k - b)] = x.data[k];
        }
      w += e - b;
    } else {
      tmp.clear();
      for (int64_t k = b; k < e; ++k) tmp.emplace_back(x.indices[k], x.data[k]);
      std::stable_sort(tmp.begin(), tmp.end(), [](const auto& p, const auto& q) { return p.first < q.first; });
      const int64_t row_start = w;
      for (const auto& [g, v] : tmp) {
        if (w > row_start && x.indices[w - 1] == g) {
          x.data[w - 1] += v;
        } else {
          x.indices[w] = g;
          x.data[w] = v;
          ++w;
        }
      }
    }
    x.indptr[r + 1] = w;
    b = e;
  }
  x.indices.resize(static_cast<size_t>(w));
  x.data.resize(static_cast<size_t>(w));
  return out;
}

// Tab-separated fields of every non-blank line (pandas skips blank lines), at least `min_fields` each.
std::vector<std::vector<std::string>> read_tsv(const std::string& path, size_t min_fields, const char* what) {
  LineReader in(path);
  std::vector<std::vector<std::string>> rows;
  std::string_view line;
  while (in.next(line)) {
    if (only_blanks(line.data(), line.data() + line.size())) continue;
    std::vector<std::string> f;
    size_t i = 0;
    for (;;) {
      const size_t t = line.find('\t', i);
      f.emplace_back(line.substr(i, t == std::string_view::npos ? std::string_view::npos : t - i));
      if (t == std::string_view::npos) break;
      i = t + 1;
    }
    if (f.size() < min_fields)
      fail_input(path, "line ", in.line_no(), ": expected ", min_fields, " tab-separated fields (", what, "), got ",
                 f.size(), ": ", quote(line));
    rows.push_back(std::move(f));
  }
  return rows;
}

std::string first_existing(const fs::path& dir, std::initializer_list<const char*> names) {
  std::error_code ec;
  for (const char* n : names)
    // Any file but a directory: a FIFO or device is then refused by name (LineReader), not skipped.
    if (fs::exists(dir / n, ec) && !fs::is_directory(dir / n, ec)) return (dir / n).string();
  return {};
}

}  // namespace

std::vector<std::string> make_unique(const std::vector<std::string>& names, const std::string& join) {
  // anndata.utils.make_index_unique: every occurrence after the first gets the first free
  // "name<join><n>", n counting up per name, skipping names already present.
  std::unordered_set<std::string> values_set;
  values_set.reserve(names.size() * 2);
  std::vector<size_t> dups;
  for (size_t i = 0; i < names.size(); ++i)
    if (!values_set.insert(names[i]).second) dups.push_back(i);
  std::vector<std::string> out = names;
  std::unordered_map<std::string, int64_t> counter;
  for (size_t i : dups) {
    const std::string& v = names[i];
    for (;;) {
      std::string candidate = v + join + std::to_string(++counter[v]);
      if (values_set.insert(candidate).second) {
        out[i] = std::move(candidate);
        break;
      }
    }
  }
  return out;
}

Dataset read_10x_mtx(const std::string& dir_name, const TenxOptions& opt) {
  const fs::path dir(dir_name);
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail_input(dir_name, "no such directory");
  if (!fs::is_directory(dir, ec)) fail_input(dir_name, "is not a directory; a 10x mtx input is a directory holding matrix.mtx[.gz]");

  const std::string matrix = first_existing(dir, {"matrix.mtx.gz", "matrix.mtx"});
  if (matrix.empty())
    fail_input((dir / "matrix.mtx.gz").string(), "missing: a 10x mtx directory needs matrix.mtx.gz (Cell Ranger v3) or matrix.mtx (v2)");
  std::string features = first_existing(dir, {"features.tsv.gz", "features.tsv"});
  const bool v3 = !features.empty();
  if (!v3) features = first_existing(dir, {"genes.tsv", "genes.tsv.gz"});
  if (features.empty())
    fail_input((dir / "features.tsv.gz").string(),
               "missing: a 10x mtx directory needs features.tsv.gz (Cell Ranger v3) or genes.tsv (v2)");
  const std::string barcodes = first_existing(dir, {"barcodes.tsv.gz", "barcodes.tsv"});
  if (barcodes.empty())
    fail_input((dir / (v3 ? "barcodes.tsv.gz" : "barcodes.tsv")).string(),
               "missing: a 10x mtx directory needs barcodes.tsv[.gz] (one cell barcode a line)");

  auto genes = read_tsv(features, v3 ? 3 : 2, v3 ? "gene id, gene symbol, feature type" : "gene id, gene symbol");
  auto cells = read_tsv(barcodes, 1, "cell barcode");
  Mtx m = read_mtx(matrix);
  if (static_cast<int64_t>(genes.size()) != m.n_genes)
    fail_input(features, "has ", genes.size(), " genes (lines) but ", fs::path(matrix).filename().string(), " has ",
               m.n_genes, " rows (genes); the files do not belong together");
  if (static_cast<int64_t>(cells.size()) != m.n_cells)
    fail_input(barcodes, "has ", cells.size(), " barcodes (lines) but ", fs::path(matrix).filename().string(), " has ",
               m.n_cells, " columns (cells); the files do not belong together");

  Dataset d;
  d.X = Matrix(std::move(m.x), DType::f32);  // scanpy reads mtx values as float32
  d.obs.index.reserve(cells.size());
  for (auto& c : cells) d.obs.index.push_back(std::move(c[0]));
  std::vector<std::string> ids, symbols, types;
  ids.reserve(genes.size());
  symbols.reserve(genes.size());
  for (auto& g : genes) {
    ids.push_back(std::move(g[0]));
    symbols.push_back(std::move(g[1]));
    if (v3) types.push_back(std::move(g[2]));
  }
  d.var.index = make_unique(symbols, "-");
  d.var.set("gene_ids", Column::strings(std::move(ids)));
  if (v3) {
    std::vector<int64_t> keep;
    for (size_t i = 0; i < types.size(); ++i)
      if (types[i] == "Gene Expression") keep.push_back(static_cast<int64_t>(i));
    d.var.set("feature_types", Column::strings(std::move(types)));
    if (opt.gex_only && static_cast<int64_t>(keep.size()) != d.n_vars()) d.subset_vars(keep);
  }
  return d;
}

}  // namespace scurry
