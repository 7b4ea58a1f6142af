// scurry: per-step measurements of a run: wall time, process CPU time, peak resident memory. A
// Timings collects steps (through RAII scopes), prints them as an aligned table and serialises
// them to JSON (with the machine, the scurry version and the command line) for `--timings FILE`.
#pragma once
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace scurry {

struct TimingStep {
  std::string name;
  double wall_s = 0;       // elapsed (steady clock)
  double cpu_s = 0;        // process CPU time, all threads (CLOCK_PROCESS_CPUTIME_ID)
  double peak_rss_mb = 0;  // peak resident set size of the process so far, at the end of the step
  std::string extra;       // free text, e.g. "1000 x 13714, nnz 845352"
};

class Timings {
 public:
  // Measures from construction to destruction (or finish()) and records the step then.
  class Scope {
   public:
    Scope(Timings& t, std::string name);
    ~Scope();
    Scope(Scope&& o) noexcept;
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope& operator=(Scope&&) = delete;
    void set_extra(std::string extra) { extra_ = std::move(extra); }
    void finish();  // records now; the destructor then does nothing

   private:
    Timings* t_;
    std::string name_, extra_;
    double wall0_, cpu0_;
  };

  Scope scope(std::string name) { return Scope(*this, std::move(name)); }
  void record(TimingStep step) { steps_.push_back(std::move(step)); }
  const std::vector<TimingStep>& steps() const { return steps_; }
  double total_wall_s() const;
  double total_cpu_s() const;

  // Extra facts for the JSON ("device": "cpu, 2 threads", ...).
  void set_meta(const std::string& key, const std::string& value) { meta_[key] = value; }
  const std::map<std::string, std::string>& meta() const { return meta_; }
  void set_argv(std::vector<std::string> argv) { argv_ = std::move(argv); }

  // An aligned table: step, wall s, cpu s, cpu/wall, peak RSS MB, extra; then a total line.
  void print_table(std::FILE* out) const;
  // {"scurry_version", "argv", "machine": {"hostname", "cores"}, "meta", "steps": [...], "total"}.
  std::string to_json(int indent = 2) const;

  // Process-wide clocks, in seconds / MB.
  static double wall_now();
  static double cpu_now();
  static double peak_rss_mb();

 private:
  std::vector<TimingStep> steps_;
  std::vector<std::string> argv_;
  std::map<std::string, std::string> meta_;
};

}  // namespace scurry
