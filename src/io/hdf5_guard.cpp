#include "io/hdf5_guard.hpp"

#include <signal.h>
#include <unistd.h>

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "core/output.hpp"

namespace scurry::h5 {

namespace {

// The element being read by this thread (nullptr: not inside libhdf5). Initial-exec TLS in the
// executable: reading it in the handler calls nothing.
thread_local const char* t_file = nullptr;
thread_local const char* t_element = nullptr;

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};  // SIGABRT: glibc's stack-smashing abort
constexpr int kNumSignals = 5;
struct sigaction g_previous[kNumSignals];
std::atomic<bool> g_installed{false};
constexpr size_t kAltStackBytes = 64 * 1024;

// An alternate signal stack for each thread that enters libhdf5 once the guard is installed (a stack
// overflow in the library could not run the handler on the thread's own stack); freed with the thread.
struct AltStack {
  void* mem = nullptr;
  void ensure() {
    if (mem) return;
    stack_t cur{};
    if (sigaltstack(nullptr, &cur) == 0 && !(cur.ss_flags & SS_DISABLE) && cur.ss_size >= kAltStackBytes) {
      mem = reinterpret_cast<void*>(1);  // the thread has one already (a sanitizer's): keep it
      return;
    }
    mem = std::malloc(kAltStackBytes);
    if (!mem) return;
    stack_t ss{};
    ss.ss_sp = mem;
    ss.ss_size = kAltStackBytes;
    if (sigaltstack(&ss, nullptr) != 0) {
      std::free(mem);
      mem = nullptr;
    }
  }
  ~AltStack() {
    if (!mem || mem == reinterpret_cast<void*>(1)) return;
    stack_t ss{};
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, nullptr);
    std::free(mem);
  }
};
thread_local AltStack t_alt;

void put(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w, n -= static_cast<size_t>(w);
  }
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    default: return "SIGILL";
  }
}

extern "C" void on_hdf5_crash(int sig, siginfo_t* info, void* uctx) {
  if (t_file) {
    put("scurry: corrupt HDF5 file: the HDF5 library failed reading ");
    put(t_file);
    put(" (");
    put(t_element ? t_element : "/");
    put(") [");
    put(signal_name(sig));
    put("]");
    remove_temps_from_signal();
    put("\n");
    _exit(2);
  }
  // Not ours: what was there before (a sanitizer's report, or the default action: the fault
  // happens again on return with the default disposition, and the process dies of it as before).
  int i = 0;
  while (i < kNumSignals && kSignals[i] != sig) ++i;
  const struct sigaction& old = g_previous[i < kNumSignals ? i : 0];
  if ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction) {
    old.sa_sigaction(sig, info, uctx);
    return;
  }
  if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN && old.sa_handler) {
    old.sa_handler(sig);
    return;
  }
  signal(sig, SIG_DFL);
  if (info && info->si_code <= 0) raise(sig);  // sent by kill(): deliver it again
}

// The watchdog's view of the metadata call in progress (one at a time: libhdf5 is not re-entrant
// here, its callers serialise their calls): when it began (CLOCK_MONOTONIC ns, 0: none) and what.
std::atomic<int64_t> g_meta_since{0};
std::atomic<const char*> g_meta_file{nullptr}, g_meta_element{nullptr};
int g_hang_seconds = kMetadataHangSeconds;

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void watchdog() {
  const int64_t limit = static_cast<int64_t>(g_hang_seconds) * 1000000000;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const int64_t since = g_meta_since.load(std::memory_order_acquire);
    if (since == 0 || now_ns() - since < limit) continue;
    const char* file = g_meta_file.load();
    const char* element = g_meta_element.load();
    if (g_meta_since.load(std::memory_order_acquire) != since) continue;  // it finished meanwhile
    put("scurry: corrupt HDF5 file: the HDF5 library hangs reading ");
    put(file ? file : "?");
    put(" (");
    put(element ? element : "/");
    put(") [no progress in ");
    put(std::to_string(g_hang_seconds).c_str());
    put(" s]");
    remove_temps_from_signal();
    put("\n");
    _exit(2);
  }
}

}  // namespace

void install_hdf5_crash_guard() {
  if (g_installed.exchange(true)) return;
  t_alt.ensure();
  struct sigaction sa {};
  sa.sa_sigaction = on_hdf5_crash;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < kNumSignals; ++i) sigaction(kSignals[i], &sa, &g_previous[i]);
  if (const char* e = std::getenv("SCURRY_HDF5_HANG_SECONDS")) {
    const int v = std::atoi(e);
    if (v > 0) g_hang_seconds = v;
  }
  std::thread(watchdog).detach();
}

bool hdf5_crash_guard_installed() { return g_installed.load(std::memory_order_relaxed); }

InHdf5::InHdf5(const char* file, const char* element, bool metadata) noexcept
    : prev_file_(t_file), prev_element_(t_element) {
  t_file = file;
  t_element = element;
  if (!g_installed.load(std::memory_order_relaxed)) return;
  if (!prev_file_) t_alt.ensure();
  // The outermost metadata scope starts the clock (a data read inside none does not).
  if (metadata && g_meta_since.load(std::memory_order_relaxed) == 0) {
    g_meta_file.store(file);
    g_meta_element.store(element);
    g_meta_since.store(now_ns(), std::memory_order_release);
    timed_ = true;
  }
}

InHdf5::~InHdf5() {
  if (timed_) g_meta_since.store(0, std::memory_order_release);
  t_file = prev_file_;
  t_element = prev_element_;
}

}  // namespace scurry::h5
