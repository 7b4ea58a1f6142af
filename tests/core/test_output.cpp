// Safe outputs (core/output.hpp): the temporary's name, the removal of stale temporaries of dead
// processes (and only those), the handler of SIGINT/SIGTERM/SIGHUP (death tests: the registered
// temporaries, files and directories, are gone, the exit status is 128 + the signal, one line on
// stderr), the errno conversion of failed writes, and write_file_atomic.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <set>

#include "core/error.hpp"
#include "core/output.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void spit(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// This host's tag in temporaries' names (the HHHHHHHH of "PATH.tmp-HHHHHHHH-PID").
std::string host_tag() { return temp_name("x").substr(std::string("x.tmp-").size(), 8); }

// A pid that no process has: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t p = fork();
  if (p == 0) _exit(0);
  int st = 0;
  waitpid(p, &st, 0);
  return p;
}

TEST(Output, TempNameCarriesHostAndPid) {
  const std::string t = temp_name("/some/dir/out.h5ad");
  const std::string tag = host_tag();
  ASSERT_EQ(tag.size(), 8u);
  for (char c : tag) EXPECT_TRUE(std::isxdigit(static_cast<unsigned char>(c))) << t;
  EXPECT_EQ(t, "/some/dir/out.h5ad.tmp-" + tag + "-" + std::to_string(getpid()));
}

TEST(Output, RemovesOnlyStaleTemporariesOfDeadProcesses) {
  test::TempDir tmp;
  const std::string tag = host_tag(), other_tag = tag == "00000000" ? "11111111" : "00000000";
  const std::string dead = std::to_string(dead_pid());
  // Removed: this host's pattern, a dead pid, our own files (a file, and a zarr store's directory).
  const std::vector<std::string> stale = {"out.h5ad.tmp-" + tag + "-" + dead, "t.json.tmp-" + tag + "-" + dead};
  const std::string stale_dir = "store.zarr.tmp-" + tag + "-" + dead;
  // Kept: a live process (init, this process), another host, names off the exact pattern.
  const std::vector<std::string> kept = {"live.h5ad.tmp-" + tag + "-1",
                                         "mine.h5ad.tmp-" + tag + "-" + std::to_string(getpid()),
                                         "other.h5ad.tmp-" + other_tag + "-" + dead,
                                         "x.h5ad.tmp-" + tag + "-" + dead + "x",
                                         "x.h5ad.tmp-" + tag + "-0" + dead,
                                         "x.h5ad.tmp-" + tag.substr(1) + "-" + dead,
                                         ".tmp-" + tag + "-" + dead,
                                         "x.h5ad.tmp-" + tag,
                                         "x.h5ad",
                                         "cnmf_tmp"};
  for (const auto& n : stale) spit(tmp.dir() / n, "partial");
  fs::create_directories(tmp.dir() / stale_dir / "X" / "data");
  spit(tmp.dir() / stale_dir / "X" / "data" / "0", "chunk");
  for (const auto& n : kept) spit(tmp.dir() / n, "keep");
  std::set<std::string> want(kept.begin(), kept.end());
  // Another user's stale temporary is left alone (testable as root only).
  if (geteuid() == 0) {
    const std::string foreign = "foreign.h5ad.tmp-" + tag + "-" + dead;
    spit(tmp.dir() / foreign, "theirs");
    ASSERT_EQ(chown((tmp.dir() / foreign).c_str(), 65534, 65534), 0);
    want.insert(foreign);
  }
  remove_stale_temps(tmp.path("anything.h5ad"));
  EXPECT_EQ(entries(tmp.dir()), want);
  for (const auto& n : kept) EXPECT_EQ(slurp(tmp.dir() / n), "keep") << n;
}

TEST(Output, EveryWriteRemovesStaleTemporariesOfItsDirectory) {
  test::TempDir tmp;
  const std::string stale = "old.h5ad.tmp-" + host_tag() + "-" + std::to_string(dead_pid());
  spit(tmp.dir() / stale, "partial");
  spit(tmp.dir() / "t.json", "previous");
  write_file_atomic(tmp.path("t.json"), "{}\n");
  EXPECT_EQ(entries(tmp.dir()), std::set<std::string>{"t.json"});
  EXPECT_EQ(slurp(tmp.dir() / "t.json"), "{}\n");
}

TEST(Output, TempOutputIsRemovedUnlessCommitted) {
  test::TempDir tmp;
  const std::string out = tmp.path("a.txt");
  {
    TempOutput t(out);
    spit(t.name(), "partial");
  }
  EXPECT_TRUE(entries(tmp.dir()).empty());
  {
    TempOutput t(out, true);
    fs::create_directories(fs::path(t.name()) / "sub");
    spit(fs::path(t.name()) / "sub" / "f", "x");
  }
  EXPECT_TRUE(entries(tmp.dir()).empty());
  {
    TempOutput t(out);
    spit(t.name(), "done");
    t.commit();
  }
  EXPECT_EQ(entries(tmp.dir()), std::set<std::string>{"a.txt"});
  EXPECT_EQ(slurp(out), "done");
}

// Committing over what is already there: a regular file is replaced (by an exchange of the two names,
// then the old one removed: no temporary left, other hard links of the old file keep its content), a
// symlink is replaced by the file itself (rename's behaviour, never its target written), a directory is
// refused and left in place.
TEST(Output, CommitReplacesAnExistingFileOrSymlinkAndRefusesADirectory) {
  test::TempDir tmp;
  const std::string out = tmp.path("a.h5ad"), link = tmp.path("b.h5ad"), target = tmp.path("target");
  spit(out, "old");
  ASSERT_EQ(::link(out.c_str(), tmp.path("hard").c_str()), 0);
  {
    TempOutput t(out);
    spit(t.name(), "new");
    t.commit();
  }
  EXPECT_EQ(slurp(out), "new");
  EXPECT_EQ(slurp(tmp.path("hard")), "old");
  spit(target, "target");
  fs::create_symlink(target, link);
  {
    TempOutput t(link);
    spit(t.name(), "new");
    t.commit();
  }
  EXPECT_FALSE(fs::is_symlink(link));
  EXPECT_EQ(slurp(link), "new");
  EXPECT_EQ(slurp(target), "target");
  EXPECT_EQ(entries(tmp.dir()), (std::set<std::string>{"a.h5ad", "b.h5ad", "hard", "target"}));
  const std::string dir = tmp.path("d.h5ad");
  fs::create_directories(fs::path(dir) / "inside");
  {
    TempOutput t(dir);
    spit(t.name(), "new");
    EXPECT_THROW(t.commit(), InputError);
  }
  EXPECT_TRUE(fs::is_directory(fs::path(dir) / "inside"));
  EXPECT_EQ(entries(tmp.dir()), (std::set<std::string>{"a.h5ad", "b.h5ad", "d.h5ad", "hard", "target"}));
}

TEST(Output, WriteFileAtomicReportsTheCause) {
  test::TempDir tmp;
  try {
    write_file_atomic(tmp.path("missing/t.json"), "x");
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(tmp.path("missing/t.json")), std::string::npos) << m;
    EXPECT_NE(m.find("No such file or directory"), std::string::npos) << m;
    EXPECT_EQ(m.find(".tmp-"), std::string::npos) << m;
  }
  EXPECT_TRUE(entries(tmp.dir()).empty());
}

TEST(Output, FailWriteConvertsErrno) {
  for (int err : {ENOSPC, EDQUOT}) {
    try {
      fail_write("/d/out.h5ad", err, "cannot write dataset 'X'");
    } catch (const InputError& e) {
      ADD_FAILURE() << "a full disk is not bad input: " << e.what();
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("/d/out.h5ad: disk full: cannot write dataset 'X' (", 0), 0u) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
  EXPECT_THROW(fail_write("/d/out.h5ad", EACCES, "cannot create the file", true), InputError);
  try {
    fail_write("/d/out.h5ad", EIO, "cannot write");
  } catch (const InputError& e) {
    ADD_FAILURE() << "an I/O error while writing is not bad input: " << e.what();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "/d/out.h5ad: cannot write (Input/output error)");
  }
}

TEST(Output, RethrowNamesTheOutput) {
  const std::string tmp = temp_name("/d/out.zarr");
  try {
    try {
      throw InputError(tmp + "/X/data/0: cannot be created (" + tmp + ")");
    } catch (...) {
      rethrow_naming_output(tmp, "/d/out.zarr");
    }
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "/d/out.zarr/X/data/0: cannot be created (/d/out.zarr)");
  }
  try {
    try {
      throw Error(tmp + ": disk full");
    } catch (...) {
      rethrow_naming_output(tmp, "/d/out.zarr");
    }
  } catch (const InputError&) {
    ADD_FAILURE() << "the type must be kept";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "/d/out.zarr: disk full");
  }
}

// ---- signals (death tests: each runs in a forked child, gtest's "fast" style, so that it writes
// where the parent then looks) ------------------------------------------------------------------------

// In the child: the handler, a temporary file and a temporary zarr-like directory being written,
// then the signal.
void interrupted_write(const std::string& out_file, const std::string& out_dir, int sig) {
  install_signal_cleanup();
  TempOutput f(out_file);
  spit(f.name(), "partial");
  TempOutput d(out_dir, true);
  fs::create_directories(fs::path(d.name()) / "X" / "data");
  for (int i = 0; i < 50; ++i) spit(fs::path(d.name()) / "X" / "data" / std::to_string(i), "chunk");
  raise(sig);
  std::_Exit(0);  // not reached
}

TEST(OutputDeathTest, SignalsRemoveTheTemporariesAndExit128PlusSignal) {
  const struct {
    int sig;
    const char* name;
  } cases[] = {{SIGINT, "SIGINT"}, {SIGTERM, "SIGTERM"}, {SIGHUP, "SIGHUP"}};
  for (const auto& c : cases) {
    test::TempDir tmp;
    spit(tmp.dir() / "out.h5ad", "previous");
    const std::string f = tmp.path("out.h5ad"), d = tmp.path("out.zarr");
    const std::string msg = std::string("^scurry: interrupted \\(") + c.name + "\\); removed " + f + "\\.tmp-" +
                            host_tag() + "-[0-9]+, " + d + "\\.tmp-" + host_tag() + "-[0-9]+\n$";
    EXPECT_EXIT(interrupted_write(f, d, c.sig), testing::ExitedWithCode(128 + c.sig), msg) << c.name;
    EXPECT_EQ(entries(tmp.dir()), std::set<std::string>{"out.h5ad"}) << c.name;
    EXPECT_EQ(slurp(tmp.dir() / "out.h5ad"), "previous") << c.name;
  }
}

TEST(OutputDeathTest, SignalWithNothingToRemove) {
  EXPECT_EXIT(
      {
        install_signal_cleanup();
        raise(SIGTERM);
      },
      testing::ExitedWithCode(143), "^scurry: interrupted \\(SIGTERM\\)\n$");
}

TEST(OutputDeathTest, AnIgnoredSignalStaysIgnored) {
  EXPECT_EXIT(
      {
        signal(SIGHUP, SIG_IGN);  // as under nohup
        install_signal_cleanup();
        raise(SIGHUP);
        std::fprintf(stderr, "still running\n");
        std::_Exit(0);
      },
      testing::ExitedWithCode(0), "^still running\n$");
}

}  // namespace
}  // namespace scurry
