// read_10x_mtx and make_unique against oracles: random v2/v3 directories written here, a direct
// transcription of anndata's make_index_unique, the bundled pbmc3k directory parsed by a naive
// reader, and one malformed input per validation.
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/tenx.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

namespace fs = std::filesystem;

// anndata.utils.make_index_unique, transcribed:
//   values_set = set(values); for each duplicated (keep="first") value in order:
//     while True: counter[v] += 1; t = v + join + str(counter[v]); if t not in values_set: add, use, break
std::vector<std::string> oracle_make_unique(const std::vector<std::string>& index, const std::string& join) {
  std::vector<bool> dup(index.size(), false);
  std::set<std::string> seen;
  for (size_t i = 0; i < index.size(); ++i) dup[i] = !seen.insert(index[i]).second;
  std::set<std::string> values_set(index.begin(), index.end());
  std::map<std::string, int> counter;
  std::vector<std::string> values = index;
  for (size_t i = 0; i < index.size(); ++i) {
    if (!dup[i]) continue;
    const std::string& v = index[i];
    while (true) {
      counter[v] += 1;
      std::string t = v + join + std::to_string(counter[v]);
      if (!values_set.count(t)) {
        values_set.insert(t);
        values[i] = t;
        break;
      }
    }
  }
  return values;
}

void write_file(const std::string& path, const std::string& text, bool gz) {
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
    ASSERT_EQ(gzclose(f), Z_OK);
  } else {
    std::ofstream o(path, std::ios::binary);
    o << text;
    ASSERT_TRUE(o.good()) << path;
  }
}

struct TenxFiles {
  CsrF x;  // cells x genes
  std::vector<std::string> barcodes, ids, symbols, types;
};

TenxFiles random_tenx(uint64_t seed, int64_t cells, int64_t genes, bool with_other_features) {
  TenxFiles t;
  t.x = test::random_counts(cells, genes, 0.15, seed, 30);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  // Few distinct symbols, so there are many duplicates, some colliding with generated names.
  const std::vector<std::string> pool = {"A", "B", "A-1", "CD3E", "B-2", "MT-CO1", "A-3", "C"};
  for (int64_t g = 0; g < genes; ++g) {
    t.ids.push_back("ENSG" + std::to_string(100000 + g));
    t.symbols.push_back(pool[rng() % pool.size()]);
    t.types.push_back(with_other_features && rng() % 4 == 0 ? "Antibody Capture" : "Gene Expression");
  }
  for (int64_t c = 0; c < cells; ++c) t.barcodes.push_back("CELL" + std::to_string(c) + "-1");
  return t;
}

// Writes the directory; entries in Cell Ranger's order (by cell, then gene) or shuffled.
void write_tenx(const TenxFiles& t, const std::string& dir, bool v3, bool gz, bool shuffle, uint64_t seed) {
  fs::create_directories(dir);
  struct E {
    int64_t g, c;
    float v;
  };
  std::vector<E> es;
  for (int64_t r = 0; r < t.x.n_rows; ++r)
    for (int64_t k = t.x.indptr[r]; k < t.x.indptr[r + 1]; ++k) es.push_back({t.x.indices[k], r, t.x.data[k]});
  if (shuffle) std::shuffle(es.begin(), es.end(), std::mt19937_64(seed));
  std::ostringstream m;
  m << "%%MatrixMarket matrix coordinate integer general\n%metadata_json: {}\n";
  m << t.x.n_cols << " " << t.x.n_rows << " " << es.size() << "\n";
  for (const auto& e : es) m << e.g + 1 << " " << e.c + 1 << " " << static_cast<int64_t>(e.v) << "\n";
  std::ostringstream f, b;
  for (size_t g = 0; g < t.ids.size(); ++g) {
    f << t.ids[g] << "\t" << t.symbols[g];
    if (v3) f << "\t" << t.types[g];
    f << "\n";
  }
  for (const auto& s : t.barcodes) b << s << "\n";
  const std::string ext = gz ? ".gz" : "";
  write_file(dir + "/matrix.mtx" + ext, m.str(), gz);
  write_file(dir + (v3 ? "/features.tsv" : "/genes.tsv") + ext, f.str(), gz);
  write_file(dir + "/barcodes.tsv" + ext, b.str(), gz);
}

void expect_same_csr(const CsrF& got, const CsrF& want) {
  ASSERT_EQ(got.n_rows, want.n_rows);
  ASSERT_EQ(got.n_cols, want.n_cols);
  ASSERT_EQ(got.indptr, want.indptr);
  ASSERT_EQ(got.indices, want.indices);
  ASSERT_EQ(got.data, want.data);
}

const std::vector<std::string>& strings(const Table& t, const std::string& name) {
  return std::get<StringColumn>(t.at(name).c).values;
}

TEST(MakeUnique, HandCases) {
  EXPECT_EQ(make_unique({"A", "A", "A-1", "A"}), (std::vector<std::string>{"A", "A-2", "A-1", "A-3"}));
  EXPECT_EQ(make_unique({"A", "B", "C"}), (std::vector<std::string>{"A", "B", "C"}));
  EXPECT_EQ(make_unique({"A", "A", "B", "A"}), (std::vector<std::string>{"A", "A-1", "B", "A-2"}));
  EXPECT_EQ(make_unique({"x", "x", "x"}, "_"), (std::vector<std::string>{"x", "x_1", "x_2"}));
  EXPECT_EQ(make_unique({}), std::vector<std::string>{});
}

TEST(MakeUnique, MatchesAnndataOnRandomNames) {
  std::mt19937_64 rng(test::fresh_seed());
  const std::vector<std::string> pool = {"A", "A-1", "A-2", "B", "B-1", "A-1-1", "C"};
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<std::string> names(1 + rng() % 200);
    for (auto& n : names) n = pool[rng() % pool.size()];
    const auto got = make_unique(names);
    EXPECT_EQ(got, oracle_make_unique(names, "-"));
    EXPECT_EQ(std::set<std::string>(got.begin(), got.end()).size(), got.size());
  }
}

TEST(TenxMtx, RandomV2PlainShuffled) {
  const uint64_t seed = test::fresh_seed();
  test::TempDir tmp;
  const TenxFiles t = random_tenx(seed, 57, 43, false);
  write_tenx(t, tmp.path("v2"), /*v3=*/false, /*gz=*/false, /*shuffle=*/true, seed);
  const Dataset d = read_10x_mtx(tmp.path("v2"));
  expect_same_csr(d.X.csr_f(), t.x);
  EXPECT_EQ(d.obs.index, t.barcodes);
  EXPECT_EQ(d.var.index, oracle_make_unique(t.symbols, "-"));
  EXPECT_EQ(strings(d.var, "gene_ids"), t.ids);
  EXPECT_FALSE(d.var.has("feature_types"));
}

TEST(TenxMtx, RandomV3GzippedWithGexOnly) {
  const uint64_t seed = test::fresh_seed();
  test::TempDir tmp;
  const TenxFiles t = random_tenx(seed, 64, 51, true);
  write_tenx(t, tmp.path("v3"), /*v3=*/true, /*gz=*/true, /*shuffle=*/false, seed);

  TenxOptions all;
  all.gex_only = false;
  const Dataset d = read_10x_mtx(tmp.path("v3"), all);
  expect_same_csr(d.X.csr_f(), t.x);
  EXPECT_EQ(d.obs.index, t.barcodes);
  const auto unique = oracle_make_unique(t.symbols, "-");
  EXPECT_EQ(d.var.index, unique);
  EXPECT_EQ(strings(d.var, "gene_ids"), t.ids);
  EXPECT_EQ(strings(d.var, "feature_types"), t.types);

  // gex_only (the default): names made unique over all features first, then subset (as scanpy).
  const Dataset g = read_10x_mtx(tmp.path("v3"));
  std::vector<int32_t> keep;
  for (size_t i = 0; i < t.types.size(); ++i)
    if (t.types[i] == "Gene Expression") keep.push_back(static_cast<int32_t>(i));
  ASSERT_EQ(g.n_vars(), static_cast<int64_t>(keep.size()));
  CsrF want = CsrF::zeros(t.x.n_rows, static_cast<int64_t>(keep.size()));
  for (int64_t r = 0; r < t.x.n_rows; ++r) {
    for (int64_t k = t.x.indptr[r]; k < t.x.indptr[r + 1]; ++k) {
      auto it = std::lower_bound(keep.begin(), keep.end(), t.x.indices[k]);
      if (it != keep.end() && *it == t.x.indices[k]) {
        want.indices.push_back(static_cast<int32_t>(it - keep.begin()));
        want.data.push_back(t.x.data[k]);
      }
    }
    want.indptr[r + 1] = static_cast<int64_t>(want.data.size());
  }
  expect_same_csr(g.X.csr_f(), want);
  for (size_t j = 0; j < keep.size(); ++j) {
    EXPECT_EQ(g.var.index[j], unique[keep[j]]);
    EXPECT_EQ(strings(g.var, "gene_ids")[j], t.ids[keep[j]]);
  }
}

TEST(TenxMtx, DuplicateEntriesAreSummedAndRealValuesRead) {
  test::TempDir tmp;
  const std::string dir = tmp.path("d");
  fs::create_directories(dir);
  write_file(dir + "/matrix.mtx",
             "%%MatrixMarket matrix coordinate real general\n3 2 5\n3 1 1.5\n1 1 2\n3 1 0.25\n2 2 0\n1 2 +4e0\n", false);
  write_file(dir + "/genes.tsv", "g1\tA\ng2\tB\ng3\tA\n", false);
  write_file(dir + "/barcodes.tsv", "c1\r\nc2\r\n", false);
  const Dataset d = read_10x_mtx(dir);
  const CsrF& x = d.X.csr_f();
  EXPECT_EQ(x.indptr, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(x.indices, (std::vector<int32_t>{0, 2, 0, 1}));
  EXPECT_EQ(x.data, (std::vector<float>{2.0f, 1.75f, 4.0f, 0.0f}));  // explicit zero kept, as scipy
  EXPECT_EQ(d.obs.index, (std::vector<std::string>{"c1", "c2"}));
  EXPECT_EQ(d.var.index, (std::vector<std::string>{"A", "B", "A-1"}));
}

// A naive independent parse of data/pbmc3k_first1000_10x_mtx: every entry, line by line with sscanf.
TEST(TenxMtx, BundledPbmc3k) {
  const std::string dir = test::repo_data("pbmc3k_first1000_10x_mtx");
  const Dataset d = read_10x_mtx(dir);
  ASSERT_EQ(d.n_obs(), 1000);
  ASSERT_EQ(d.n_vars(), 13714);
  const CsrF& x = d.X.csr_f();
  ASSERT_EQ(x.n_rows, 1000);
  ASSERT_EQ(x.n_cols, 13714);
  ASSERT_EQ(x.nnz(), 845352);
  EXPECT_EQ(d.obs.index.front(), "AAACATACAACCAC-1");
  EXPECT_EQ(d.var.index.front(), "AL627309.1");
  EXPECT_EQ(strings(d.var, "feature_types").front(), "Gene Expression");
  double total = 0;
  for (float v : x.data) total += v;
  EXPECT_EQ(total, 2369979.0);  // scipy.io.mmread(...).sum()

  std::vector<double> row_sums(1000, 0.0), want_row_sums(1000, 0.0);
  for (int64_t r = 0; r < 1000; ++r)
    for (int64_t k = x.indptr[r]; k < x.indptr[r + 1]; ++k) row_sums[r] += x.data[k];
  gzFile f = gzopen((dir + "/matrix.mtx.gz").c_str(), "rb");
  ASSERT_NE(f, nullptr);
  char line[256];
  int64_t entries = 0;
  bool header_done = false;
  while (gzgets(f, line, sizeof line)) {
    if (line[0] == '%') continue;
    if (!header_done) {
      header_done = true;
      continue;
    }
    long g = 0, c = 0;
    double v = 0;
    ASSERT_EQ(std::sscanf(line, "%ld %ld %lf", &g, &c, &v), 3);
    want_row_sums[c - 1] += v;
    // the entry is present in row c-1 at column g-1 with value v
    const auto b = x.indices.begin() + x.indptr[c - 1], e = x.indices.begin() + x.indptr[c];
    const auto it = std::lower_bound(b, e, static_cast<int32_t>(g - 1));
    ASSERT_TRUE(it != e && *it == g - 1) << "entry " << g << " " << c;
    EXPECT_EQ(x.data[it - x.indices.begin()], static_cast<float>(v));
    ++entries;
  }
  gzclose(f);
  EXPECT_EQ(entries, 845352);
  EXPECT_EQ(row_sums, want_row_sums);
  EXPECT_EQ(row_sums[0], 2419.0);
  EXPECT_EQ(row_sums[1], 4903.0);
}

// ---- malformed inputs: each an InputError naming the offending file --------------------------

struct Malformed : ::testing::Test {
  test::TempDir tmp;
  std::string dir = tmp.path("m");
  void SetUp() override {
    fs::create_directories(dir);
    write_file(dir + "/genes.tsv", "g1\tA\ng2\tB\ng3\tC\n", false);
    write_file(dir + "/barcodes.tsv", "c1\nc2\n", false);
  }
  void expect_error(const std::string& file, const std::string& fragment) {
    try {
      read_10x_mtx(dir);
      ADD_FAILURE() << "no InputError for " << fragment;
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(file), std::string::npos) << msg;
      EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
};

TEST_F(Malformed, BadHeader) {
  write_file(dir + "/matrix.mtx", "%%MatrixMarket matrix array real general\n3 2\n1\n2\n3\n4\n5\n6\n", false);
  expect_error(dir + "/matrix.mtx", "line 1");
}
TEST_F(Malformed, IndexOutOfRange) {
  write_file(dir + "/matrix.mtx", "%%MatrixMarket matrix coordinate integer general\n3 2 2\n1 1 5\n4 2 1\n", false);
  expect_error(dir + "/matrix.mtx", "line 4");
}
TEST_F(Malformed, CellIndexOutOfRange) {
  write_file(dir + "/matrix.mtx", "%%MatrixMarket matrix coordinate integer general\n3 2 2\n1 1 5\n1 0 1\n", false);
  expect_error(dir + "/matrix.mtx", "cell (column) index 0");
}
TEST_F(Malformed, TooFewEntries) {
  write_file(dir + "/matrix.mtx", "%%MatrixMarket matrix coordinate integer general\n3 2 3\n1 1 5\n2 2 1\n", false);
  expect_error(dir + "/matrix.mtx", "has 2 entries");
}
TEST_F(Malformed, TooManyEntries) {
  write_file(dir + "/matrix.mtx", "%%MatrixMarket matrix coordinate integer general\n3 2 1\n1 1 5\n2 2 1\n", false);
  expect_error(dir + "/matrix.mtx", "more entries");
}
TEST_F(Malformed, NegativeValue) {
  write_file(dir + "/matrix.mtx", "%%MatrixMarket matrix coordinate integer general\n3 2 2\n1 1 5\n2 2 -1\n", false);
  expect_error(dir + "/matrix.mtx", "negative");
}
TEST_F(Malformed, NanValue) {
  write_file(dir + "/matrix.mtx", "%%MatrixMarket matrix coordinate real general\n3 2 2\n1 1 nan\n2 2 1\n", false);
  expect_error(dir + "/matrix.mtx", "not finite");
}
TEST_F(Malformed, GenesLineCountMismatch) {
  write_file(dir + "/matrix.mtx", "%%MatrixMarket matrix coordinate integer general\n4 2 1\n1 1 5\n", false);
  expect_error(dir + "/genes.tsv", "has 3 genes");
}
TEST_F(Malformed, MissingBarcodes) {
  write_file(dir + "/matrix.mtx", "%%MatrixMarket matrix coordinate integer general\n3 2 1\n1 1 5\n", false);
  fs::remove(dir + "/barcodes.tsv");
  expect_error(dir + "/barcodes.tsv", "missing");
}
TEST_F(Malformed, TruncatedGzip) {
  std::ostringstream m;
  m << "%%MatrixMarket matrix coordinate integer general\n3 2 4000\n";
  std::mt19937 rng(7);
  for (int i = 0; i < 4000; ++i) m << 1 + rng() % 3 << " " << 1 + rng() % 2 << " " << 1 + rng() % 9 << "\n";
  write_file(dir + "/full.mtx.gz", m.str(), true);
  std::ifstream in(dir + "/full.mtx.gz", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 100u);
  std::ofstream(dir + "/matrix.mtx.gz", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  fs::remove(dir + "/full.mtx.gz");
  expect_error(dir + "/matrix.mtx.gz", "truncated");
}
TEST_F(Malformed, NotADirectory) {
  try {
    read_10x_mtx(dir + "/genes.tsv");
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/genes.tsv"), std::string::npos);
  }
}

}  // namespace
}  // namespace scurry
