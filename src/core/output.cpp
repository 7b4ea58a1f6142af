#include "core/output.hpp"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <system_error>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"

namespace scurry {

namespace fs = std::filesystem;

namespace {

// ---- names ----------------------------------------------------------------------------------------

// 8 hex digits of a hash (FNV-1a) of the host name: temporaries on a shared filesystem are judged
// stale only by the host whose processes wrote them.
const std::string& host_tag() {
  static const std::string tag = [] {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    uint32_t h = 2166136261u;
    for (const char* c = host; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 16777619u;
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", h);
    return std::string(buf);
  }();
  return tag;
}

constexpr const char* kTempMark = ".tmp-";

// The pid of a temporary's name "STEM.tmp-HHHHHHHH-PID" written on this host; -1 for any other name.
long temp_pid(const std::string& name) {
  const size_t at = name.rfind(kTempMark);
  if (at == std::string::npos || at == 0) return -1;
  const std::string rest = name.substr(at + std::strlen(kTempMark));
  const std::string& tag = host_tag();
  if (rest.size() < tag.size() + 2 || rest.compare(0, tag.size(), tag) != 0 || rest[tag.size()] != '-') return -1;
  const std::string digits = rest.substr(tag.size() + 1);
  if (digits.empty() || digits.size() > 9 || digits[0] == '0') return -1;
  for (char c : digits)
    if (c < '0' || c > '9') return -1;
  return std::stol(digits);
}

// ---- the registry of temporaries, read by the signal handler ---------------------------------------
//
// A fixed array of path buffers (no allocation in the handler). Writers change it under a spin lock
// taken with the cleanup signals blocked in their thread, so the handler (which may run in any other
// thread) waits for a change to finish and never sees half a path.

constexpr int kSlots = 32;
struct Slot {
  bool used;
  bool directory;
  char path[PATH_MAX];
};
Slot g_slots[kSlots];
std::atomic_flag g_lock = ATOMIC_FLAG_INIT;
std::atomic<int> g_signal{0};
bool g_stderr_tty = false;
constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};

class RegistryLock {
 public:
  RegistryLock() {
    sigset_t s;
    sigemptyset(&s);
    for (int sig : kCleanupSignals) sigaddset(&s, sig);
    pthread_sigmask(SIG_BLOCK, &s, &old_);
    while (g_lock.test_and_set(std::memory_order_acquire)) sched_yield();
  }
  ~RegistryLock() {
    g_lock.clear(std::memory_order_release);
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  RegistryLock(const RegistryLock&) = delete;
  RegistryLock& operator=(const RegistryLock&) = delete;

 private:
  sigset_t old_;
};

// A slot, or -1 when the registry is full or the path too long (the temporary is then not removed
// on a signal; the next write there removes it as stale).
int register_temp(const std::string& path, bool directory) {
  if (path.size() >= PATH_MAX) return -1;
  RegistryLock lock;
  for (int i = 0; i < kSlots; ++i)
    if (!g_slots[i].used) {
      std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
      g_slots[i].directory = directory;
      g_slots[i].used = true;
      return i;
    }
  return -1;
}

void unregister_temp(int slot) {
  if (slot < 0) return;
  RegistryLock lock;
  g_slots[slot].used = false;
}

// ---- the signal handler: async-signal-safe calls only ---------------------------------------------

void put(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = write(STDERR_FILENO, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w, n -= static_cast<size_t>(w);
  }
}

struct Dirent64 {  // the kernel's linux_dirent64
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[1];
};

constexpr int kMaxDepth = 24;  // a zarr store is a few levels deep

// Removes `name` (relative to the directory `parent`): a file, or a directory with all it holds.
// Other threads may still be writing into it: a directory is read again until it is empty.
bool remove_at(int parent, const char* name, int depth) {
  if (unlinkat(parent, name, 0) == 0) return true;
  if ((errno != EISDIR && errno != EPERM) || depth > kMaxDepth) return false;
  const int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  alignas(8) char buf[2048];
  for (int pass = 0; pass < 64; ++pass) {
    bool any = false;
    lseek(fd, 0, SEEK_SET);
    long n;
    while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
      for (long off = 0; off < n;) {
        const Dirent64* d = reinterpret_cast<const Dirent64*>(buf + off);
        off += d->d_reclen;
        if (d->d_name[0] == '.' && (d->d_name[1] == 0 || (d->d_name[1] == '.' && d->d_name[2] == 0))) continue;
        any = true;
        remove_at(fd, d->d_name, depth + 1);
      }
    if (!any) break;
  }
  close(fd);
  return unlinkat(parent, name, AT_REMOVEDIR) == 0;
}

void remove_registered() {
  bool first = true;
  for (Slot& s : g_slots)
    if (s.used && remove_at(AT_FDCWD, s.path, 0)) {
      put(first ? "; removed " : ", ");
      put(s.path);
      first = false;
    }
}

extern "C" void on_cleanup_signal(int sig) {
  g_signal.store(sig);
  // A writer changing the registry in another thread holds the lock for a moment; this handler keeps
  // it until _exit, so a second signal in another thread waits here.
  while (g_lock.test_and_set(std::memory_order_acquire)) {
  }
  if (g_stderr_tty) put("\r\x1b[K");  // over a progress bar
  put(sig == SIGINT ? "scurry: interrupted (SIGINT)" : sig == SIGTERM ? "scurry: interrupted (SIGTERM)"
                                                                     : "scurry: interrupted (SIGHUP)");
  remove_registered();
  put("\n");
  _exit(128 + sig);
}

}  // namespace

// ---- public ---------------------------------------------------------------------------------------

std::string temp_name(const std::string& path) {
  return path + kTempMark + host_tag() + "-" + std::to_string(getpid());
}

TempOutput::TempOutput(std::string path, bool directory)
    : path_(std::move(path)), temp_(temp_name(path_)), directory_(directory) {
  {  // once per directory and process (cNMF writes thousands of files into one)
    static std::mutex mu;
    static std::set<std::string> cleaned;
    fs::path dir = fs::path(path_).parent_path();
    std::lock_guard<std::mutex> lock(mu);
    if (cleaned.insert(dir.empty() ? "." : dir.string()).second) remove_stale_temps(path_);
  }
  slot_ = register_temp(temp_, directory_);
  // Our own name already there: left by an earlier process that had this pid.
  std::error_code ec;
  if (fs::symlink_status(temp_, ec).type() != fs::file_type::not_found) fs::remove_all(temp_, ec);
}

TempOutput::~TempOutput() {
  if (!done_) {
    std::error_code ec;
    fs::remove_all(temp_, ec);
  }
  unregister_temp(slot_);
}

// Over an existing regular file: the two names exchanged (renameat2 RENAME_EXCHANGE, atomic like
// rename: PATH is the old file, then the new one), then the old file, now under the temporary's name,
// removed. A rename over an existing file makes ext4 (auto_da_alloc, its default) start writing the
// new file's delayed blocks to disk before the rename returns: 0.25-0.36 s for a 475 MB h5ad on a
// virtual disk, ~0.015 s for the same write to a new name (bench/RESULTS.md section 60); the exchange
// does not. A rerun over its previous output no longer waits for the disk. Elsewhere (a new output, a
// directory, a file system or kernel without the exchange): rename.
namespace {
bool exchange_into_place(const std::string& temp, const std::string& path) {
#ifdef RENAME_EXCHANGE
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) != 0) return false;
  if (::unlink(temp.c_str()) != 0)  // (the old file; a later write here removes it: remove_stale_temps)
    log::warn("could not remove the replaced " + path + " (now " + temp + "): " + std::strerror(errno));
  return true;
#else
  (void)temp, (void)path;
  return false;
#endif
}
}  // namespace

void TempOutput::commit() {
  if (!directory_ && exchange_into_place(temp_, path_)) {
    release();
    return;
  }
  if (std::rename(temp_.c_str(), path_.c_str()) != 0)
    fail_write(path_, errno, "cannot move the finished file into place", true);
  release();
}

void TempOutput::release() {
  done_ = true;
  unregister_temp(slot_);
  slot_ = -1;
}

void remove_stale_temps(const std::string& path) {
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  std::vector<std::pair<fs::path, long>> stale;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path p = it->path();
    const long pid = temp_pid(p.filename().string());
    if (pid <= 0 || pid == getpid()) continue;  // not ours, or this process's (being written)
    struct stat st;
    if (lstat(p.c_str(), &st) != 0 || st.st_uid != geteuid()) continue;  // another user's
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // the process still runs
    stale.emplace_back(p, pid);
  }
  for (const auto& [p, pid] : stale) {
    std::error_code rec;
    if (fs::remove_all(p, rec) > 0 && !rec)
      log::info(detail::concat("removed ", p.string(), ", a temporary left by process ", pid,
                               " (no longer running)"));
  }
}

void fail_write(const std::string& path, int err, const std::string& what, bool at_open) {
  const std::string cause = err ? " (" + std::error_code(err, std::generic_category()).message() + ")" : "";
  if (err == ENOSPC || err == EDQUOT)
    throw Error(path + ": disk full: " + what + cause +
                "; the output was not written: free some space there or choose another directory");
  if (at_open) throw InputError(path + ": " + what + cause);
  throw Error(path + ": " + what + cause);
}

void rethrow_naming_output(const std::string& temp, const std::string& path) {
  auto rename = [&](std::string m) {
    for (size_t at = m.find(temp); at != std::string::npos; at = m.find(temp, at + path.size()))
      m.replace(at, temp.size(), path);
    return m;
  };
  try {
    throw;
  } catch (const InputError& e) {
    throw InputError(rename(e.what()));
  } catch (const Error& e) {
    throw Error(rename(e.what()));
  }
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  TempOutput t(path);
  const int fd = open(t.name().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail_write(path, errno, "cannot create the file", true);
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      close(fd);
      fail_write(path, err, "cannot write the file");
    }
    p += w, left -= static_cast<size_t>(w);
  }
  if (close(fd) != 0) fail_write(path, errno, "cannot write the file");
  t.commit();
}

void install_signal_cleanup() {
  g_stderr_tty = isatty(STDERR_FILENO) == 1;
  struct sigaction sa {};
  sa.sa_handler = on_cleanup_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : kCleanupSignals) sigaddset(&sa.sa_mask, sig);
  for (int sig : kCleanupSignals) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;  // nohup, background jobs
    sigaction(sig, &sa, nullptr);
  }
}

void remove_temps_from_signal() {
  // A writer in another thread may hold the registry lock for a moment: wait a bounded while, then
  // go on (a crashed thread never releases it; a half-changed slot is at worst not removed).
  for (int i = 0; i < 1000000 && g_lock.test_and_set(std::memory_order_acquire); ++i) {
  }
  remove_registered();
}

bool interrupted() { return g_signal.load() != 0; }

void wait_if_interrupted() {
  if (!interrupted()) return;
  for (;;) pause();  // the handler, in another thread, ends the process
}

}  // namespace scurry
