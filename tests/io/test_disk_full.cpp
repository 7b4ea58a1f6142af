// Full disks: h5ad and zarr writes on a small tmpfs (mounted here; the tests skip, with a message,
// where mounting is not permitted) must throw Error "OUT: disk full ..." naming the output, never
// crash (HDF5 1.10 did: a file whose close failed was closed again), leave no temporary, leave an
// existing output as it was, and give the space back (the next write there succeeds). The tmpfs
// sizes sweep from far too small (a failing dataset write) to just too small (the final flush).
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>

#include "core/error.hpp"
#include "io/h5ad.hpp"
#include "io/zarr.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

namespace fs = std::filesystem;

// A tmpfs of `bytes` mounted on a fresh directory, unmounted when the object dies.
class Tmpfs {
 public:
  explicit Tmpfs(int64_t bytes) {
    const std::string opt = "size=" + std::to_string(bytes);
    if (mount("tmpfs", dir_.dir().c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opt.c_str()) == 0) mounted_ = true;
    else error_ = std::strerror(errno);
  }
  ~Tmpfs() {
    if (mounted_) umount2(dir_.dir().c_str(), MNT_DETACH);
  }
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  std::string path(const std::string& name) const { return dir_.path(name); }
  const fs::path& dir() const { return dir_.dir(); }

 private:
  test::TempDir dir_;
  bool mounted_ = false;
  std::string error_;
};

#define SCURRY_REQUIRE_TMPFS(fs_)                                                                          \
  do {                                                                                                     \
    if (!(fs_).mounted())                                                                                  \
      GTEST_SKIP() << "cannot mount a tmpfs here (" << (fs_).error() << "): the full-disk tests need root"; \
  } while (0)

std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

Dataset dataset(int64_t cells, int64_t genes, double density) {
  Dataset d;
  d.X = Matrix(test::random_counts(cells, genes, density, test::fresh_seed()), DType::f32);
  for (int64_t i = 0; i < cells; ++i) d.obs.index.push_back("cell" + std::to_string(i));
  for (int64_t j = 0; j < genes; ++j) d.var.index.push_back("gene" + std::to_string(j));
  d.obs.set("total", Column::numeric(std::vector<double>(static_cast<size_t>(cells), 2.5)));
  return d;
}

int64_t tree_bytes(const fs::path& p) {
  if (!fs::is_directory(p)) return static_cast<int64_t>(fs::file_size(p));
  int64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(p))
    if (e.is_regular_file()) n += static_cast<int64_t>(e.file_size());
  return n;
}

// `write(out)` on a tmpfs smaller than the output must throw Error (not InputError: exit code 1)
// "OUT: disk full ...", with no temporary left and `check_existing()` still true.
template <class Write, class Check>
void expect_disk_full(const Tmpfs& t, const std::string& out, const std::set<std::string>& before, Write write,
                      Check check_existing) {
  try {
    write(out);
    ADD_FAILURE() << "the write fitted; expected a full disk";
  } catch (const InputError& e) {
    ADD_FAILURE() << "a full disk is not bad input (exit code 2): " << e.what();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind(out, 0), 0u) << "the message should name the output: " << m;
    EXPECT_NE(m.find("disk full"), std::string::npos) << m;
    EXPECT_NE(m.find("No space left on device"), std::string::npos) << m;
    EXPECT_EQ(m.find(".tmp-"), std::string::npos) << "the message names the temporary: " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_EQ(entries(t.dir()), before) << "a temporary was left behind";
  check_existing();
}

TEST(DiskFull, H5adWriteFailsCleanly) {
  test::TempDir ref;
  const Dataset big = dataset(3000, 800, 0.15);  // about 2.9 MB
  write_h5ad(big, ref.path("big.h5ad"));
  const int64_t size = tree_bytes(ref.path("big.h5ad"));
  const Dataset small = dataset(20, 10, 0.3);
  const std::string previous = "a previous result\n";
  // H5Dwrite's path, and the mapped write of large contiguous datasets (hdf5.cpp; forced here)
  for (const char* mode : {"0", "force"})
  for (int64_t room : {size / 4, size / 2, size - 256 * 1024, size - 64 * 1024, size - 32 * 1024, size - 16 * 1024,
                       size - 8 * 1024, size - 4 * 1024}) {
    Tmpfs t(room);
    SCURRY_REQUIRE_TMPFS(t);
    SCOPED_TRACE(std::string("SCURRY_H5_MMAP_WRITE=") + mode + ", tmpfs of " + std::to_string(room) +
                 " bytes for a file of " + std::to_string(size));
    setenv("SCURRY_H5_MMAP_WRITE", mode, 1);
    const std::string out = t.path("out.h5ad");
    std::ofstream(out) << previous;
    expect_disk_full(
        t, out, {"out.h5ad"}, [&](const std::string& o) { write_h5ad(big, o); },
        [&] {
          std::ifstream in(out);
          EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), previous) << "the existing file was changed";
        });
    // The space of the failed file is free again: a small write there succeeds.
    write_h5ad(small, t.path("small.h5ad"));
    EXPECT_EQ(read_h5ad(t.path("small.h5ad")).n_obs(), 20);
    unsetenv("SCURRY_H5_MMAP_WRITE");
  }
}

TEST(DiskFull, ZarrWriteFailsCleanly) {
  test::TempDir ref;
  const Dataset big = dataset(3000, 800, 0.15);
  ZarrWriteOptions opt;
  opt.codec = ZarrCodec::none;  // random counts compress: keep the size predictable
  write_zarr(big, ref.path("big.zarr"), opt);
  const int64_t size = tree_bytes(ref.path("big.zarr"));
  const Dataset small = dataset(20, 10, 0.3);
  for (int64_t room : {size / 2, size - 64 * 1024}) {
    Tmpfs t(room);
    SCURRY_REQUIRE_TMPFS(t);
    SCOPED_TRACE("tmpfs of " + std::to_string(room) + " bytes for a store of " + std::to_string(size));
    const std::string out = t.path("out.zarr");
    write_zarr(small, out, opt);  // an existing store, to be left as it is
    expect_disk_full(
        t, out, {"out.zarr"}, [&](const std::string& o) { write_zarr(big, o, opt); },
        [&] {
          const Dataset back = read_zarr(out);
          EXPECT_EQ(back.n_obs(), 20);
          EXPECT_EQ(back.n_vars(), 10);
        });
  }
}

}  // namespace
}  // namespace scurry
