#include "graph/leiden.hpp"

#include "graph/leiden_gpu.hpp"

#include <igraph/igraph.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>

#include "core/env_laps.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/parallel.hpp"
#include "graph/mix64.cuh"
#include "graph/umap.hpp"

namespace scurry {
namespace {

const char* kWhere = "leiden";
constexpr int64_t kMaxIterations = 10000;     // "until stable": most iterations
constexpr double kQualityTolerance = 1e-12;   // "until stable": relative gain that counts

// igraph status codes become scurry::Error here, and only here.
void check_igraph(igraph_error_t rc, const char* call) {
  if (rc != IGRAPH_SUCCESS) fail("leiden: igraph ", call, " failed: ", igraph_strerror(rc));
}

// While alive, igraph reports errors by return code instead of aborting the process (its default).
struct ErrorsAsCodes {
  igraph_error_handler_t* old;
  ErrorsAsCodes() : old(igraph_set_error_handler(igraph_error_handler_ignore)) {}
  ~ErrorsAsCodes() { igraph_set_error_handler(old); }
};

// RAII for igraph objects.
struct Graph {
  igraph_t g;
  bool alive = false;
  ~Graph() {
    if (alive) igraph_destroy(&g);
  }
};
struct Vec {
  igraph_vector_t v;
  explicit Vec(igraph_integer_t n) { check_igraph(igraph_vector_init(&v, n), "igraph_vector_init"); }
  ~Vec() { igraph_vector_destroy(&v); }
};
struct IntVec {
  igraph_vector_int_t v;
  explicit IntVec(igraph_integer_t n) { check_igraph(igraph_vector_int_init(&v, n), "igraph_vector_int_init"); }
  ~IntVec() { igraph_vector_int_destroy(&v); }
};

int64_t count_labels(const std::vector<int32_t>& labels) {
  int32_t mx = -1;
  for (int32_t l : labels) {
    if (l < 0) fail("leiden: negative label ", l);
    mx = std::max(mx, l);
  }
  return static_cast<int64_t>(mx) + 1;
}

// ---------------------------------------------------------------------------------------------
// scurry's own Leiden (Traag, Waltman & van Eck 2019, "From Louvain to Leiden: guaranteeing
// well-connected communities", Sci. Rep. 9:5233), optimising modularity with a resolution. Gains
// are in the units of igraph's and leidenalg's (edge weights, not divided by 2m), so beta means
// what it means there: moving v to a community C gains w(v, C) - gamma k_v K_C with gamma =
// resolution / 2m, against staying in its own community without it.

constexpr double kMoveTolerance = 1e-12;  // local moving: a gain counts above this x k_v (1 + resolution)
constexpr int32_t kAggregateBlock = 1024;  // aggregation: aggregate nodes per parallel block
constexpr int32_t kQualityBlock = 16384;   // modularity: nodes per parallel block
constexpr int kPrefetchRow = 4, kPrefetchOffsets = 8;  // rows asked for this many visits ahead
constexpr double kNegligibleExponent = 40;  // refinement: exp(-40) of the best move's weight counts as 0

using gpu::mix64;  // SplitMix64's finaliser (graph/mix64.cuh, shared with the GPU kernels)

// The seeded random source: SplitMix64 (Steele, Lea & Flood 2014), counter-based (draw i of a
// stream is mix64(seed + (i + 1) * golden ratio)), so each community's refinement has a stream of
// its own whatever thread runs it; our own bounded integers and unit doubles (the standard
// distributions differ between standard libraries).
class LeidenRng {
 public:
  explicit LeidenRng(uint64_t seed) : s_(seed) {}
  uint64_t next() { return mix64(s_ += 0x9e3779b97f4a7c15ULL); }
  uint64_t below(uint64_t n) {  // uniform in [0, n), n >= 1: rejection, then modulo
    const uint64_t threshold = (0 - n) % n;
    uint64_t x = next();
    while (x < threshold) x = next();
    return x % n;
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // uniform in [0, 1)
  void shuffle(int32_t* v, size_t n) {  // Fisher-Yates
    for (size_t i = n; i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }

 private:
  uint64_t s_;
};

// One level's graph: symmetric CSR without self-loops (int64 offsets, int32 node ids) and the node
// weights k (float64 strengths, self-loops and, at upper levels, the aggregated nodes' internal
// weight included). Edge weights W: float at level 0 (the input's own values, so exact), float64
// above (sums); every sum is taken in float64.
template <class W>
struct LevelGraph {
  int32_t n = 0;
  std::vector<int64_t> off;
  std::vector<int32_t> adj;
  std::vector<W> w;
  std::vector<double> k;
};

// Level 0 from the upper triangle of `graph` (i <= j; each edge mirrored, diagonal entries kept
// apart as self-loops); every entry's weight is checked. Zero weights are no edges.
LevelGraph<float> base_graph(const CsrF& graph, bool use_weights, std::vector<double>& self, double& two_m) {
  const int64_t n = graph.n_rows;
  if (n >= std::numeric_limits<int32_t>::max())
    fail_input(kWhere, "the graph has ", n, " nodes; at most ", std::numeric_limits<int32_t>::max() - 1, " are supported");
  LevelGraph<float> g;
  g.n = static_cast<int32_t>(n);
  g.off.assign(static_cast<size_t>(n) + 1, 0);
  self.assign(static_cast<size_t>(n), 0.0);
  auto weight = [&](int64_t p) { return use_weights ? graph.data[p] : 1.0f; };
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p) {
      const int64_t j = graph.indices[p];
      const float w = weight(p);
      if (!std::isfinite(w) || w < 0) fail_input(kWhere, "the graph has a negative or non-finite weight at row ", i);
      if (j < i || w == 0) continue;
      if (j == i) {
        self[i] += w;
      } else {
        ++g.off[i + 1];
        ++g.off[j + 1];
      }
    }
  for (int64_t i = 0; i < n; ++i) g.off[i + 1] += g.off[i];
  g.adj.resize(static_cast<size_t>(g.off[n]));
  g.w.resize(static_cast<size_t>(g.off[n]));
  std::vector<int64_t> pos(g.off.begin(), g.off.end() - 1);
  // Rows in order: row j receives (i, j) for i < j before its own (j, i > j): sorted rows.
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p) {
      const int64_t j = graph.indices[p];
      const float w = weight(p);
      if (j <= i || w == 0) continue;
      g.adj[pos[i]] = static_cast<int32_t>(j);
      g.w[pos[i]++] = w;
      g.adj[pos[j]] = static_cast<int32_t>(i);
      g.w[pos[j]++] = w;
    }
  g.k.assign(static_cast<size_t>(n), 0.0);
  two_m = 0;
  for (int64_t i = 0; i < n; ++i) {
    double s = self[i];
    for (int64_t p = g.off[i]; p < g.off[i + 1]; ++p) s += g.w[p];
    g.k[i] = s;
    two_m += s;
  }
  return g;
}

// A sparse accumulator: dense weights and flags (zero between uses) and the list of the indices
// touched.
struct Accumulator {
  double* acc;
  char* seen;
  std::vector<int32_t>* touched;
  void add(int32_t c, double w) {
    if (!seen[c]) {
      seen[c] = 1;
      touched->push_back(c);
    }
    acc[c] += w;
  }
  void clear() {
    for (int32_t c : *touched) acc[c] = 0, seen[c] = 0;
    touched->clear();
  }
};

// One worker thread's scratch (refinement: candidates and visiting order; aggregation: an
// accumulator over the aggregate nodes).
struct WorkerScratch {
  std::vector<int32_t> touched, order;
  std::vector<double> gain, acc;
  std::vector<char> seen;
};

// One aggregation block's rows.
struct BlockRows {
  std::vector<int64_t> len;
  std::vector<int32_t> adj;
  std::vector<double> w;
};

// g with its nodes renumbered in breadth-first order (from node 0, then from the first node not
// reached, ...), `self` too; id[v] = node v's new number. Neighbours get near numbers, so the rows
// of a community lie near each other in memory and the random visits of its nodes find them in
// cache more often (15-20% faster on a 100,000-cell kNN graph in random cell order).
LevelGraph<float> breadth_first(const LevelGraph<float>& g, std::vector<double>& self, std::vector<int32_t>& id) {
  const int32_t n = g.n;
  id.assign(static_cast<size_t>(n), -1);
  std::vector<int32_t> order(static_cast<size_t>(n));
  int32_t next = 0, head = 0;
  for (int32_t s = 0; s < n; ++s) {
    if (id[s] >= 0) continue;
    id[s] = next;
    order[next++] = s;
    while (head < next) {
      const int32_t v = order[head++];
      for (int64_t p = g.off[v]; p < g.off[v + 1]; ++p) {
        const int32_t u = g.adj[p];
        if (id[u] < 0) {
          id[u] = next;
          order[next++] = u;
        }
      }
    }
  }
  LevelGraph<float> out;
  out.n = n;
  out.off.resize(static_cast<size_t>(n) + 1);
  out.adj.resize(g.adj.size());
  out.w.resize(g.w.size());
  out.k.resize(static_cast<size_t>(n));
  std::vector<double> self_by_id(static_cast<size_t>(n));
  out.off[0] = 0;
  for (int32_t r = 0; r < n; ++r) {
    const int32_t v = order[r];
    int64_t q = out.off[r];
    for (int64_t p = g.off[v]; p < g.off[v + 1]; ++p, ++q) {
      out.adj[q] = id[g.adj[p]];
      out.w[q] = g.w[p];
    }
    out.off[r + 1] = q;
    out.k[r] = g.k[v];
    self_by_id[r] = self[v];
  }
  self.swap(self_by_id);
  return out;
}

// Scratch arrays of one run, sized for level 0 and reused by every level and iteration.
struct Workspace {
  int threads;
  std::vector<double> acc;       // sparse accumulator over communities or refined communities
  std::vector<char> seen;
  std::vector<int32_t> touched;
  std::vector<double> tot;       // per community: total node weight
  std::vector<int32_t> cnt;      // per community: nodes
  std::vector<int32_t> empty;    // stack of empty community ids
  std::vector<int32_t> queue;    // local moving's circular queue
  std::vector<char> queued;
  std::vector<double> rtot, rext;  // refined communities: total node weight, weight to the rest of their community
  std::vector<char> merged;      // refined community with more than one node
  std::vector<int32_t> newid;    // renumbering
  std::vector<int64_t> start;    // counting sorts: nodes by community or by aggregate node
  std::vector<int32_t> members;
  std::vector<WorkerScratch> workers;
  std::vector<BlockRows> blocks;
  LevelGraph<double> levels[2];  // the aggregate graphs, alternately
  Workspace(int32_t n, int threads_)
      : threads(std::max(1, threads_)), acc(n, 0.0), seen(n, 0), tot(n), cnt(n), queue(n), queued(n), rtot(n), rext(n),
        merged(n), newid(n), start(static_cast<size_t>(n) + 1), members(n), workers(static_cast<size_t>(threads)) {}
  Accumulator shared() { return Accumulator{acc.data(), seen.data(), &touched}; }
  // The scratch of the thread running a parallel_for block (exec/parallel.hpp's parallel_worker).
  WorkerScratch& worker() {
    const int id = parallel_worker();
    if (id < 0 || id >= threads) fail("leiden: worker ", id, " of ", threads);
    return workers[id];
  }
};

// Nodes grouped by label (0..count-1), in node order within a label: ws.members[ws.start[c] ..
// ws.start[c + 1]) (a counting sort).
void group_by(const std::vector<int32_t>& lab, int32_t n, int32_t count, Workspace& ws) {
  std::fill_n(ws.start.begin(), static_cast<size_t>(count) + 1, 0);
  for (int32_t v = 0; v < n; ++v) ++ws.start[lab[v] + 1];
  for (int32_t c = 0; c < count; ++c) ws.start[c + 1] += ws.start[c];
  for (int32_t v = 0; v < n; ++v) ws.members[ws.start[lab[v]]++] = v;
  for (int32_t c = count; c > 0; --c) ws.start[c] = ws.start[c - 1];  // back to the starts
  ws.start[0] = 0;
}

// Rows are visited in random order: ask for the row of a node a few visits ahead (its offsets
// further ahead still) so that it comes from memory while the current rows are summed.
template <class W>
inline void prefetch_offsets(const LevelGraph<W>& g, int32_t v) {
  __builtin_prefetch(&g.off[v]);
}
template <class W>
inline void prefetch_row(const LevelGraph<W>& g, int32_t v) {
  constexpr int64_t kLine = 64, kMaxLines = 8;
  const int64_t b = g.off[v], e = g.off[v + 1];
  const char* adj = reinterpret_cast<const char*>(g.adj.data() + b);
  const char* w = reinterpret_cast<const char*>(g.w.data() + b);
  const int64_t adj_bytes = std::min((e - b) * static_cast<int64_t>(sizeof(int32_t)), kMaxLines * kLine);
  const int64_t w_bytes = std::min((e - b) * static_cast<int64_t>(sizeof(W)), kMaxLines * kLine);
  for (int64_t x = 0; x < adj_bytes; x += kLine) __builtin_prefetch(adj + x);
  for (int64_t x = 0; x < w_bytes; x += kLine) __builtin_prefetch(w + x);
}

// Labels 0..count-1 in the order of their first node; returns count.
int32_t renumber(std::vector<int32_t>& lab, int32_t n, Workspace& ws) {
  std::fill_n(ws.newid.begin(), n, -1);
  int32_t next = 0;
  for (int32_t v = 0; v < n; ++v) {
    int32_t& id = ws.newid[lab[v]];
    if (id < 0) id = next++;
    lab[v] = id;
  }
  return next;
}

// Fast local moving (the paper's MoveNodesFast, leidenalg's Optimiser::move_nodes): every node is
// queued once in random order; a node popped moves to the neighbouring community, or an empty one
// when it is not alone, with the largest gain when that beats staying; the neighbours of a moved
// node outside its new community are queued again (when not queued already). One thread (each
// move depends on the moves before). `comm` starts as given, ends numbered 0..count-1; returns
// count.
template <class W>
int32_t move_nodes(const LevelGraph<W>& g, std::vector<int32_t>& comm, double gamma, double resolution, LeidenRng& rng,
                   Workspace& ws) {
  const int32_t n = g.n;
  std::fill_n(ws.tot.begin(), n, 0.0);
  std::fill_n(ws.cnt.begin(), n, 0);
  for (int32_t v = 0; v < n; ++v) {
    ws.tot[comm[v]] += g.k[v];
    ++ws.cnt[comm[v]];
  }
  ws.empty.clear();
  for (int32_t c = n - 1; c >= 0; --c)
    if (ws.cnt[c] == 0) ws.empty.push_back(c);
  std::vector<int32_t>& q = ws.queue;
  q.resize(static_cast<size_t>(n));
  std::iota(q.begin(), q.end(), 0);
  rng.shuffle(q.data(), q.size());
  std::fill_n(ws.queued.begin(), n, 1);
  Accumulator a = ws.shared();
  const int64_t* off = g.off.data();
  const int32_t* adj = g.adj.data();
  const W* wt = g.w.data();
  int32_t* cm = comm.data();
  const double tol_per_weight = kMoveTolerance * (1.0 + resolution);
  int64_t head = 0, size = n;
  auto ahead = [&](int64_t d) {
    const int64_t i = head + d;
    return q[i >= n ? i - n : i];
  };
  while (size > 0) {
    if (size > kPrefetchOffsets) {
      prefetch_offsets(g, ahead(kPrefetchOffsets));
      prefetch_row(g, ahead(kPrefetchRow));
    }
    const int32_t v = q[head];
    head = head + 1 == n ? 0 : head + 1;
    --size;
    ws.queued[v] = 0;
    const int32_t cv = cm[v];
    const double kv = g.k[v];
    double to_own = 0;  // summed apart: most neighbours share v's community (no chain through memory)
    for (int64_t p = off[v], e = off[v + 1]; p < e; ++p) {
      const int32_t c = cm[adj[p]];
      if (c == cv) {
        to_own += wt[p];
      } else {
        a.add(c, wt[p]);
      }
    }
    int32_t best = cv;
    double best_gain = to_own - gamma * kv * (ws.tot[cv] - kv) + tol_per_weight * kv;
    for (int32_t c : *a.touched) {
      const double gain = a.acc[c] - gamma * kv * ws.tot[c];
      if (gain > best_gain) {
        best = c;
        best_gain = gain;
      }
    }
    if (ws.cnt[cv] > 1 && 0.0 > best_gain) best = ws.empty.back();  // alone in a new community
    a.clear();
    if (best == cv) continue;
    if (ws.cnt[best] == 0) ws.empty.pop_back();
    ws.tot[cv] -= kv;
    ws.tot[best] += kv;
    ++ws.cnt[best];
    if (--ws.cnt[cv] == 0) ws.empty.push_back(cv);
    cm[v] = best;
    for (int64_t p = off[v]; p < off[v + 1]; ++p) {
      const int32_t u = adj[p];
      if (!ws.queued[u] && cm[u] != best) {
        ws.queued[u] = 1;
        const int64_t tail = head + size;
        q[tail >= n ? tail - n : tail] = u;
        ++size;
      }
    }
  }
  return renumber(comm, n, ws);
}

// Refinement (the paper's RefinePartition / MergeNodesSubset, as igraph's implementation): every
// node starts alone inside its community S of the local moving; S's nodes are visited in random
// order; a node still alone and well connected to S (E(v, S - v) >= gamma k_v (K_S - k_v)) joins
// a refined community R of S that is well connected to S (E(R, S - R) >= gamma K_R (K_S - K_R)),
// staying alone included, drawn with probability ~ exp(gain / beta) over the gains >= 0. The
// communities are refined independently, each with its own random stream (from `key`), on the
// worker threads: the same result for any thread count. Returns the refined communities' count;
// `refined` numbered 0..count-1 by first node.
template <class W>
int32_t refine(const LevelGraph<W>& g, const std::vector<int32_t>& comm, int32_t n_comms, double gamma, double beta,
               uint64_t key, Workspace& ws, std::vector<int32_t>& refined) {
  const int32_t n = g.n;
  group_by(comm, n, n_comms, ws);
  parallel_for(ws.threads, n_comms, [&](int64_t c) {
    const int32_t* mem = ws.members.data() + ws.start[c];
    const int32_t m = static_cast<int32_t>(ws.start[c + 1] - ws.start[c]);
    double ks = 0;  // K_S, summed in node order
    for (int32_t t = 0; t < m; ++t) {
      const int32_t v = mem[t];
      ks += g.k[v];
      refined[v] = v;
      ws.rtot[v] = g.k[v];
      ws.merged[v] = 0;
      double e = 0;
      for (int64_t p = g.off[v]; p < g.off[v + 1]; ++p)
        if (comm[g.adj[p]] == c) e += g.w[p];
      ws.rext[v] = e;
    }
    if (m == 1) return;
    WorkerScratch& sc = ws.worker();
    // Refined ids are S's node ids: the shared accumulator's entries of S are this task's alone.
    Accumulator a{ws.acc.data(), ws.seen.data(), &sc.touched};
    sc.order.assign(mem, mem + m);
    LeidenRng rng(mix64(key ^ mix64(static_cast<uint64_t>(c) + 1)));
    rng.shuffle(sc.order.data(), sc.order.size());
    for (int32_t i = 0; i < m; ++i) {
      if (i + kPrefetchOffsets < m) {
        prefetch_offsets(g, sc.order[i + kPrefetchOffsets]);
        prefetch_row(g, sc.order[i + kPrefetchRow]);
      }
      const int32_t v = sc.order[i];
      if (ws.merged[v]) continue;  // others have joined v: not alone
      const double kv = g.k[v], to_s = ws.rext[v];  // to_s = E(v, S - v)
      if (to_s < gamma * kv * (ks - kv)) continue;  // not well connected to its community
      ws.rtot[v] = 0;
      ws.rext[v] = 0;
      a.add(v, 0.0);  // staying alone: gain 0
      for (int64_t p = g.off[v]; p < g.off[v + 1]; ++p) {
        const int32_t u = g.adj[p];
        if (comm[u] == c) a.add(refined[u], g.w[p]);
      }
      const size_t nc = sc.touched.size();
      sc.gain.resize(nc);
      double max_gain = 0;
      for (size_t t = 0; t < nc; ++t) {
        const int32_t r = sc.touched[t];
        const bool well = ws.rext[r] >= gamma * ws.rtot[r] * (ks - ws.rtot[r]);
        const double gain = well ? a.acc[r] - gamma * kv * ws.rtot[r] : -1.0;
        sc.gain[t] = gain;
        if (gain > max_gain) max_gain = gain;
      }
      double total = 0;
      for (size_t t = 0; t < nc; ++t) {  // weights below e^-40 of the best one's are left out
        const double d = sc.gain[t] >= 0 ? (sc.gain[t] - max_gain) / beta : -kNegligibleExponent - 1;
        sc.gain[t] = d >= -kNegligibleExponent ? std::exp(d) : 0.0;
        total += sc.gain[t];
      }
      const double x = rng.unit() * total;
      int32_t chosen = v;
      double cum = 0;
      for (size_t t = 0; t < nc; ++t) {
        if (sc.gain[t] == 0) continue;
        cum += sc.gain[t];
        chosen = sc.touched[t];
        if (x < cum) break;
      }
      // R + v's weight to the rest of S: R's, less v's weight to R, plus v's weight to S - R - v.
      ws.rtot[chosen] += kv;
      ws.rext[chosen] += to_s - 2 * a.acc[chosen];
      a.clear();
      if (chosen != v) {
        refined[v] = chosen;
        ws.merged[chosen] = 1;
      }
    }
  });
  return renumber(refined, n, ws);
}

// The graph of the `parts` (0..count-1) of g's nodes: node weights summed, the weights between
// two parts summed into one edge, the weights inside a part dropped (they are in its node weight).
// Nodes bucketed by part with a counting sort; each part's edges gathered in a sparse accumulator,
// blocks of parts on the worker threads, their rows then joined in block order.
template <class W>
void aggregate(const LevelGraph<W>& g, const std::vector<int32_t>& parts, int32_t count, Workspace& ws,
               LevelGraph<double>& out) {
  group_by(parts, g.n, count, ws);
  out.n = count;
  out.k.assign(static_cast<size_t>(count), 0.0);
  out.off.assign(static_cast<size_t>(count) + 1, 0);
  const int64_t n_blocks = (static_cast<int64_t>(count) + kAggregateBlock - 1) / kAggregateBlock;
  if (static_cast<int64_t>(ws.blocks.size()) < n_blocks) ws.blocks.resize(static_cast<size_t>(n_blocks));
  parallel_for(ws.threads, n_blocks, [&](int64_t b) {
    WorkerScratch& sc = ws.worker();
    if (static_cast<int32_t>(sc.acc.size()) < count) {
      sc.acc.resize(static_cast<size_t>(count), 0.0);
      sc.seen.resize(static_cast<size_t>(count), 0);
    }
    Accumulator a{sc.acc.data(), sc.seen.data(), &sc.touched};
    BlockRows& rows = ws.blocks[b];
    const int32_t r0 = static_cast<int32_t>(b * kAggregateBlock);
    const int32_t r1 = std::min(count, r0 + kAggregateBlock);
    rows.len.assign(static_cast<size_t>(r1 - r0), 0);
    rows.adj.clear();
    rows.w.clear();
    const int64_t t_end = ws.start[r1];
    for (int32_t r = r0; r < r1; ++r) {
      double kr = 0;
      for (int64_t t = ws.start[r]; t < ws.start[r + 1]; ++t) {
        if (t + kPrefetchOffsets < t_end) {
          prefetch_offsets(g, ws.members[t + kPrefetchOffsets]);
          prefetch_row(g, ws.members[t + kPrefetchRow]);
        }
        const int32_t v = ws.members[t];
        kr += g.k[v];
        for (int64_t p = g.off[v]; p < g.off[v + 1]; ++p) {
          const int32_t pr = parts[g.adj[p]];
          if (pr != r) a.add(pr, g.w[p]);
        }
      }
      out.k[r] = kr;
      for (int32_t c : sc.touched) {
        rows.adj.push_back(c);
        rows.w.push_back(a.acc[c]);
      }
      rows.len[r - r0] = static_cast<int64_t>(sc.touched.size());
      a.clear();
    }
  });
  for (int32_t r = 0; r < count; ++r) out.off[r + 1] = out.off[r] + ws.blocks[r / kAggregateBlock].len[r % kAggregateBlock];
  out.adj.resize(static_cast<size_t>(out.off[count]));
  out.w.resize(static_cast<size_t>(out.off[count]));
  parallel_for(ws.threads, n_blocks, [&](int64_t b) {
    const BlockRows& rows = ws.blocks[b];
    const int64_t at = out.off[b * kAggregateBlock];
    std::copy(rows.adj.begin(), rows.adj.end(), out.adj.begin() + at);
    std::copy(rows.w.begin(), rows.w.end(), out.w.begin() + at);
  });
}

// The state of one iteration between its levels.
struct Levels {
  std::vector<int32_t> comm;     // the current level's communities
  std::vector<int32_t> node_of;  // level-0 node -> current level's node
  std::vector<int32_t> refined, next;
};

// One level: local moving on g from st.comm; then, unless every community is one node (returns
// false), the refinement and g aggregated into `out` (st.comm becomes out's starting partition).
template <class W>
bool level(const LevelGraph<W>& g, Levels& st, double gamma, double resolution, double beta, LeidenRng& rng,
           Workspace& ws, LevelGraph<double>& out) {
  const int32_t n_comms = move_nodes(g, st.comm, gamma, resolution, rng, ws);
  if (n_comms == g.n) return false;
  int32_t n_refined = refine(g, st.comm, n_comms, gamma, beta, rng.next(), ws, st.refined);
  if (n_refined == g.n) {  // nothing merged: aggregate by the communities themselves (igraph)
    std::copy(st.comm.begin(), st.comm.begin() + g.n, st.refined.begin());
    n_refined = n_comms;
  }
  for (int32_t& a : st.node_of) a = st.refined[a];
  aggregate(g, st.refined, n_refined, ws, out);
  st.next.assign(static_cast<size_t>(n_refined), 0);
  for (int32_t v = 0; v < g.n; ++v) st.next[st.refined[v]] = st.comm[v];
  st.comm.swap(st.next);
  return true;
}

// One Leiden iteration from `membership` (level-0 communities; updated): local moving, refinement
// and aggregation by the refined partition (the aggregate nodes starting in their community of the
// local moving), level after level, until the local moving leaves every community one node or the
// refinement (then the partition itself, as igraph) no longer shrinks the graph. Returns the levels.
int leiden_iteration(const LevelGraph<float>& g0, std::vector<int32_t>& membership, double gamma, double resolution,
                     double beta, LeidenRng& rng, Workspace& ws) {
  const int32_t n0 = g0.n;
  Levels st;
  st.comm = membership;
  st.node_of.resize(static_cast<size_t>(n0));
  std::iota(st.node_of.begin(), st.node_of.end(), 0);
  st.refined.resize(static_cast<size_t>(n0));
  int levels = 1, which = 0;
  if (level(g0, st, gamma, resolution, beta, rng, ws, ws.levels[0]))
    for (;;) {
      ++levels;
      if (!level(ws.levels[which], st, gamma, resolution, beta, rng, ws, ws.levels[which ^ 1])) break;
      which ^= 1;
    }
  for (int32_t i = 0; i < n0; ++i) membership[i] = st.comm[st.node_of[i]];
  return levels;
}

// Modularity of a level-0 partition (labels 0..n-1), as modularity() on the symmetric graph; the
// internal weight summed per fixed block of nodes, the blocks in order.
double level0_quality(const LevelGraph<float>& g, const std::vector<double>& self, const std::vector<int32_t>& c,
                      double resolution, double two_m, Workspace& ws) {
  std::fill_n(ws.tot.begin(), g.n, 0.0);
  for (int32_t v = 0; v < g.n; ++v) ws.tot[c[v]] += g.k[v];
  const int64_t n_blocks = (static_cast<int64_t>(g.n) + kQualityBlock - 1) / kQualityBlock;
  std::vector<double> part(static_cast<size_t>(n_blocks), 0.0);
  parallel_for(ws.threads, n_blocks, [&](int64_t b) {
    const int32_t v1 = static_cast<int32_t>(std::min<int64_t>(g.n, (b + 1) * kQualityBlock));
    double in = 0;
    for (int32_t v = static_cast<int32_t>(b * kQualityBlock); v < v1; ++v) {
      in += self[v];
      for (int64_t p = g.off[v]; p < g.off[v + 1]; ++p)
        if (c[g.adj[p]] == c[v]) in += g.w[p];
    }
    part[b] = in;
  });
  double inside = 0, expected = 0;
  for (double x : part) inside += x;
  for (int32_t x = 0; x < g.n; ++x) expected += ws.tot[x] * ws.tot[x];
  return inside / two_m - resolution * expected / (two_m * two_m);
}

// scurry's Leiden at one resolution: n_iterations iterations from the singletons (none: the
// singletons), or, negative, until an iteration no longer raises the modularity by a relative
// kQualityTolerance (one that lowers it is undone; at most kMaxIterations).
std::vector<int32_t> own_leiden(const LevelGraph<float>& g0, const std::vector<double>& self, double two_m,
                                double resolution, const LeidenOptions& opt, int threads) {
  const int32_t n = g0.n;
  Workspace ws(n, threads);
  LeidenRng rng(opt.random_state);
  const double gamma = resolution / two_m;
  std::vector<int32_t> membership(static_cast<size_t>(n));
  std::iota(membership.begin(), membership.end(), 0);
  EnvLaps laps("SCURRY_LEIDEN_TIMES", "leiden");  // each iteration's seconds and quality
  const bool until_stable = opt.n_iterations < 0;
  const int64_t iterations = until_stable ? kMaxIterations : opt.n_iterations;
  double prev = -std::numeric_limits<double>::infinity();
  std::vector<int32_t> best;
  for (int64_t it = 0; it < iterations; ++it) {
    const int levels = leiden_iteration(g0, membership, gamma, resolution, opt.beta, rng, ws);
    if (!until_stable && !laps.on()) continue;
    const double q = level0_quality(g0, self, membership, resolution, two_m, ws);
    if (laps.on()) {
      const int32_t k = 1 + *std::max_element(membership.begin(), membership.end());
      laps.lap(("iteration " + std::to_string(it) + ": " + std::to_string(levels) + " levels, " + std::to_string(k) +
                " clusters, quality " + std::to_string(q)).c_str());
    }
    if (!until_stable) continue;
    if (q < prev) {  // an iteration that lost quality: keep the partition before it
      membership = best;
      break;
    }
    if (it > 0 && !(q > prev + kQualityTolerance * std::fabs(prev))) break;
    prev = q;
    best = membership;
  }
  return membership;
}

}  // namespace

void validate_leiden_options(const LeidenOptions& opt) {
  if (!(opt.resolution > 0)) fail_input(kWhere, "resolution = ", opt.resolution, " must be positive");
  for (double r : opt.resolutions)
    if (!(r > 0)) fail_input(kWhere, "resolution = ", r, " must be positive");
  if (!(opt.beta > 0)) fail_input(kWhere, "beta = ", opt.beta, " must be positive");
  if (opt.flavor != "leidenalg" && opt.flavor != "igraph")
    fail_input(kWhere, "flavor '", opt.flavor, "' is not one of leidenalg, igraph");
  if (opt.flavor == "igraph" && opt.directed.value_or(false))
    fail_input(kWhere, "flavor igraph cannot use a directed graph (igraph's Leiden is undirected): leave directed false");
  if (!opt.restrict_key.empty() && opt.restrict_categories.empty())
    fail_input(kWhere, "restrict_to '", opt.restrict_key, "' names no categories");
  if (opt.restrict_key.empty() && !opt.restrict_categories.empty())
    fail_input(kWhere, "restrict_to categories given without an obs key");
}

namespace {

// igraph's igraph_community_leiden at each resolution: resolution_parameter = resolution / (2m),
// node weights = strengths, edge weights from the upper triangle, beta, seeded via igraph's default
// RNG. Flavor igraph: n_iterations handed to igraph as given (negative: igraph's own rule). `loop`
// (the leidenalg flavor's CPU path before issue 19, kept as the tests' oracle): n_iterations >= 0
// as given, negative one igraph iteration at a time from the previous partition until the quality
// stops rising (igraph 0.10's own negative n_iterations stops after the first iteration whatever it
// gained; on pbmc3k: modularity 0.620 after one iteration, 0.632 when iterated to the end).
std::vector<std::vector<int32_t>> igraph_memberships(const CsrF& graph, const LeidenOptions& opt,
                                                     const std::vector<double>& resolutions, bool loop) {
  const int64_t n = graph.n_rows;
  // Edges: upper triangle (i <= j), each undirected edge once.
  std::vector<igraph_integer_t> ends;
  std::vector<double> weights;
  double two_m = 0;
  std::vector<double> strength(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p) {
      const int64_t j = graph.indices[p];
      const double w = opt.use_weights ? static_cast<double>(graph.data[p]) : 1.0;
      if (!std::isfinite(w) || w < 0) fail_input(kWhere, "the graph has a negative or non-finite weight at row ", i);
      if (w == 0) continue;
      strength[i] += w;
      two_m += w;
      if (j >= i) {
        ends.push_back(i);
        ends.push_back(j);
        weights.push_back(w);
      }
    }
  ErrorsAsCodes errors_as_codes;
  Graph g;
  igraph_vector_t wview, sview;
  if (two_m > 0) {
    igraph_vector_int_t edge_view;
    igraph_vector_int_view(&edge_view, ends.data(), static_cast<igraph_integer_t>(ends.size()));
    check_igraph(igraph_create(&g.g, &edge_view, static_cast<igraph_integer_t>(n), IGRAPH_UNDIRECTED), "igraph_create");
    g.alive = true;
    igraph_vector_view(&wview, weights.data(), static_cast<igraph_integer_t>(weights.size()));
    igraph_vector_view(&sview, strength.data(), static_cast<igraph_integer_t>(n));
  }
  std::vector<std::vector<int32_t>> out(resolutions.size());
  for (size_t r = 0; r < resolutions.size(); ++r) {
    std::vector<int32_t>& labels = out[r];
    labels.assign(static_cast<size_t>(n), 0);
    if (!(two_m > 0)) {
      std::iota(labels.begin(), labels.end(), 0);  // no edges: every cell alone
      continue;
    }
    IntVec membership(n);
    igraph_integer_t nb = 0;
    igraph_real_t quality = 0;
    check_igraph(igraph_rng_seed(igraph_rng_default(), static_cast<igraph_uint_t>(opt.random_state)), "igraph_rng_seed");
    const double gamma = resolutions[r] / two_m;
    if (opt.n_iterations >= 0 || !loop) {
      check_igraph(igraph_community_leiden(&g.g, &wview, &sview, gamma, opt.beta, false,
                                           static_cast<igraph_integer_t>(opt.n_iterations), &membership.v, &nb, &quality),
                   "igraph_community_leiden");
    } else {
      double prev = -std::numeric_limits<double>::infinity();
      std::vector<igraph_integer_t> best(static_cast<size_t>(n));
      EnvLaps laps("SCURRY_LEIDEN_TIMES", "leiden igraph");  // each iteration's seconds and quality
      for (int64_t it = 0; it < kMaxIterations; ++it) {
        check_igraph(igraph_community_leiden(&g.g, &wview, &sview, gamma, opt.beta, it > 0, 1, &membership.v, &nb,
                                             &quality),
                     "igraph_community_leiden");
        if (laps.on())
          laps.lap(("iteration " + std::to_string(it) + ": " + std::to_string(nb) + " clusters, quality " +
                    std::to_string(quality)).c_str());
        if (quality < prev) {  // an iteration that lost quality: keep the partition before it
          for (int64_t i = 0; i < n; ++i) VECTOR(membership.v)[i] = best[i];
          break;
        }
        if (it > 0 && !(quality > prev + kQualityTolerance * std::fabs(prev))) break;
        prev = quality;
        for (int64_t i = 0; i < n; ++i) best[i] = VECTOR(membership.v)[i];
      }
    }
    for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<int32_t>(VECTOR(membership.v)[i]);
  }
  return out;
}

// scurry's own Leiden at each resolution, level 0 built once.
std::vector<std::vector<int32_t>> own_memberships(const CsrF& graph, const LeidenOptions& opt,
                                                  const std::vector<double>& resolutions, int threads) {
  std::vector<double> self;
  double two_m = 0;
  EnvLaps laps("SCURRY_LEIDEN_TIMES", "leiden");
  std::vector<int32_t> id;
  const LevelGraph<float> g0 = breadth_first(base_graph(graph, opt.use_weights, self, two_m), self, id);
  laps.lap("graph");
  std::vector<std::vector<int32_t>> out(resolutions.size());
  for (size_t r = 0; r < resolutions.size(); ++r) {
    if (two_m > 0) {
      const std::vector<int32_t> by_id = own_leiden(g0, self, two_m, resolutions[r], opt, threads);
      out[r].resize(by_id.size());
      for (size_t v = 0; v < by_id.size(); ++v) out[r][v] = by_id[id[v]];
    } else {
      out[r].resize(static_cast<size_t>(graph.n_rows));
      std::iota(out[r].begin(), out[r].end(), 0);  // no edges: every cell alone
    }
  }
  return out;
}

// SCURRY_LEIDEN_IGRAPH_LOOP=1: the leidenalg flavor through igraph_memberships' loop (for
// comparisons with the CPU path before issue 19).
bool igraph_loop_requested() {
  const char* e = std::getenv("SCURRY_LEIDEN_IGRAPH_LOOP");
  return e != nullptr && std::strcmp(e, "1") == 0;
}

std::vector<LeidenResult> leiden_with(const CsrF& graph, const LeidenOptions& opt, const std::vector<double>& resolutions,
                                      bool igraph_loop, int threads) {
  const int64_t n = graph.n_rows;
  if (graph.n_cols != n) fail_input(kWhere, "the graph is ", n, " x ", graph.n_cols, "; it must be square");
  validate_leiden_options(opt);
  for (double r : resolutions)
    if (!(r > 0)) fail_input(kWhere, "resolution = ", r, " must be positive");
  std::vector<LeidenResult> out(resolutions.size());
  if (n == 0) return out;
  const bool igraph_flavor = opt.flavor == "igraph";
  std::vector<std::vector<int32_t>> memberships = igraph_flavor || igraph_loop
                                                      ? igraph_memberships(graph, opt, resolutions, !igraph_flavor)
                                                      : own_memberships(graph, opt, resolutions, threads);
  for (size_t r = 0; r < resolutions.size(); ++r) {
    LeidenResult& res = out[r];
    res.labels = std::move(memberships[r]);
    const int64_t k = count_labels(res.labels);
    std::vector<int64_t> size(static_cast<size_t>(k), 0), first(static_cast<size_t>(k), n);
    for (int64_t i = 0; i < n; ++i) {
      ++size[res.labels[i]];
      first[res.labels[i]] = std::min(first[res.labels[i]], i);
    }
    std::vector<int32_t> order;
    for (int32_t c = 0; c < k; ++c)
      if (size[c] > 0) order.push_back(c);
    // leidenalg: renumber by decreasing size, ties by first cell; igraph: its own (contiguous) numbers.
    if (!igraph_flavor)
      std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
        return size[x] != size[y] ? size[x] > size[y] : first[x] < first[y];
      });
    std::vector<int32_t> newid(static_cast<size_t>(k), -1);
    for (size_t q = 0; q < order.size(); ++q) newid[order[q]] = static_cast<int32_t>(q);
    for (int32_t& l : res.labels) l = newid[l];
    res.n_clusters = static_cast<int64_t>(order.size());
    res.modularity = modularity(graph, res.labels, resolutions[r]);
  }
  return out;
}

}  // namespace

std::vector<LeidenResult> leiden(const Context& ctx, const CsrF& graph, const LeidenOptions& opt,
                                 const std::vector<double>& resolutions) {
  return leiden_with(graph, opt, resolutions, igraph_loop_requested(), ctx.threads());
}

namespace detail {
LeidenResult leiden_igraph_loop(const CsrF& graph, const LeidenOptions& opt) {
  return std::move(leiden_with(graph, opt, std::vector<double>{opt.resolution}, true, 1)[0]);
}
}  // namespace detail

LeidenResult leiden(const Context& ctx, const CsrF& graph, const LeidenOptions& opt) {
  return std::move(leiden(ctx, graph, opt, std::vector<double>{opt.resolution})[0]);
}

std::string leiden_resolution_key(const std::string& key_added, double resolution) {
  // Python's repr(float): the shortest round trip, positional between 1e-4 and 1e16, with ".0" for
  // whole numbers.
  char buf[64];
  const double a = std::fabs(resolution);
  const bool fixed = a >= 1e-4 && a < 1e16;
  auto r = std::to_chars(buf, buf + sizeof buf, resolution, fixed ? std::chars_format::fixed : std::chars_format::scientific);
  std::string s(buf, r.ptr);
  if (fixed && s.find('.') == std::string::npos) s += ".0";
  return key_added + "_" + s;
}

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0, db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      // compare as integers: strip leading zeros, then by length, then digits
      size_t is = i, js = j;
      while (is + 1 < ie && a[is] == '0') ++is;
      while (js + 1 < je && b[js] == '0') ++js;
      if (ie - is != je - js) return ie - is < je - js;
      const int c = a.compare(is, ie - is, b, js, je - js);
      if (c != 0) return c < 0;
      i = ie;
      j = je;
    } else if (da != db) {
      return da;  // natsort: a number (after the empty leading string) sorts before text
    } else {
      size_t ie = i, je = j;
      while (ie < a.size() && !std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && !std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      const int c = a.compare(i, ie - i, b, j, je - j);
      if (c != 0) return c < 0;
      i = ie;
      j = je;
    }
  }
  return a.size() - i < b.size() - j;
}

namespace {

// The graph the Dataset-level call clusters: obsp[obsp] or the neighbours' connectivities.
CsrF leiden_graph(const Dataset& d, const LeidenOptions& opt) {
  if (opt.obsp.empty()) return neighbors_graph(d, opt.neighbors_key, kWhere);
  auto it = d.obsp.find(opt.obsp);
  if (it == d.obsp.end()) fail_input(kWhere, "obsp['", opt.obsp, "'] is missing");
  CsrF g = to_csr_f(it->second);
  if (it->second.is_sparse()) validate_csr(g, std::string(kWhere) + ": obsp['" + opt.obsp + "']");
  if (g.n_rows != d.n_obs() || g.n_cols != d.n_obs())
    fail_input(kWhere, "obsp['", opt.obsp, "'] is ", g.n_rows, " x ", g.n_cols, " but the dataset has ", d.n_obs(), " cells");
  return g;
}

// The rows and columns `keep` (sorted cell indices) of a square graph.
CsrF subgraph(const CsrF& g, const std::vector<int64_t>& keep) {
  std::vector<int32_t> pos(static_cast<size_t>(g.n_rows), -1);
  for (size_t t = 0; t < keep.size(); ++t) pos[keep[t]] = static_cast<int32_t>(t);
  CsrF s;
  s.n_rows = s.n_cols = static_cast<int64_t>(keep.size());
  s.indptr.push_back(0);
  for (int64_t i : keep) {
    for (int64_t p = g.indptr[i]; p < g.indptr[i + 1]; ++p)
      if (pos[g.indices[p]] >= 0) {
        s.indices.push_back(pos[g.indices[p]]);
        s.data.push_back(g.data[p]);
      }
    s.indptr.push_back(static_cast<int64_t>(s.indices.size()));
  }
  return s;
}

void write_params(Dataset& d, const std::string& key, double resolution, const LeidenOptions& opt) {
  Dict params;
  params["resolution"] = Value(resolution);
  params["random_state"] = Value(static_cast<int64_t>(opt.random_state));
  params["n_iterations"] = Value(opt.n_iterations);
  Dict u;
  u["params"] = Value(std::move(params));
  d.uns[key] = Value(std::move(u));
}

}  // namespace

LeidenResult leiden(const Context& ctx, Dataset& d, const LeidenOptions& opt) {
  validate_leiden_options(opt);
  const CsrF full = leiden_graph(d, opt);
  const std::vector<double> resolutions = opt.resolutions.empty() ? std::vector<double>{opt.resolution} : opt.resolutions;
  const bool several = resolutions.size() > 1;
  // restrict_to: the cells of those categories (scanpy's restrict_adjacency).
  std::vector<int64_t> keep;
  std::vector<std::string> old_labels;
  if (!opt.restrict_key.empty()) {
    if (!d.obs.has(opt.restrict_key)) fail_input(kWhere, "restrict_to: obs['", opt.restrict_key, "'] is missing");
    const auto* cat = std::get_if<CategoricalColumn>(&d.obs.at(opt.restrict_key).c);
    if (cat == nullptr) fail_input(kWhere, "restrict_to: obs['", opt.restrict_key, "'] is not categorical");
    std::vector<char> chosen(cat->categories.size(), 0);
    for (const std::string& c : opt.restrict_categories) {
      auto f = std::find(cat->categories.begin(), cat->categories.end(), c);
      if (f == cat->categories.end())
        fail_input(kWhere, "restrict_to: '", c, "' is not a valid category for '", opt.restrict_key, "'");
      chosen[f - cat->categories.begin()] = 1;
    }
    old_labels.resize(cat->codes.size());
    for (size_t i = 0; i < cat->codes.size(); ++i) {
      const int32_t code = cat->codes[i];
      old_labels[i] = code >= 0 ? cat->categories[code] : "nan";  // pandas astype('U') of a missing value
      if (code >= 0 && chosen[code]) keep.push_back(static_cast<int64_t>(i));
    }
    if (keep.empty()) fail_input(kWhere, "restrict_to: no cell of obs['", opt.restrict_key, "'] is in those categories");
  }
  const CsrF g = keep.empty() ? full : subgraph(full, keep);
  const bool gpu = ctx.backend() == Backend::cuda;  // our own GPU kernels; igraph on the CPU
  std::vector<LeidenResult> results;
  if (gpu) {
    for (double r : resolutions) {
      LeidenOptions o = opt;
      o.resolution = r;
      results.push_back(leiden_gpu(ctx, g, o));
    }
  } else {
    results = leiden(ctx, g, opt, resolutions);
  }
  for (size_t r = 0; r < resolutions.size(); ++r) {
    std::string key = opt.key_added;
    if (!keep.empty() && key == "leiden") key += "_R";  // scanpy's restrict_to key
    if (several) key = leiden_resolution_key(key, resolutions[r]);
    LeidenOptions o = opt;
    o.resolution = resolutions[r];
    o.key_added = key;
    if (keep.empty()) {
      write_leiden(d, results[r], o);
    } else {
      // scanpy's rename_groups: "<categories joined by ->,<new label>" for the clustered cells.
      std::string prefix;
      for (size_t c = 0; c < opt.restrict_categories.size(); ++c)
        prefix += (c ? "-" : "") + opt.restrict_categories[c];
      prefix += ",";
      std::vector<std::string> labels = old_labels;
      for (size_t t = 0; t < keep.size(); ++t) labels[keep[t]] = prefix + std::to_string(results[r].labels[t]);
      std::vector<std::string> cats = labels;
      std::sort(cats.begin(), cats.end());
      cats.erase(std::unique(cats.begin(), cats.end()), cats.end());
      std::stable_sort(cats.begin(), cats.end(), natural_less);
      CategoricalColumn col;
      col.categories = cats;
      std::map<std::string, int32_t> code_of;
      for (size_t c = 0; c < cats.size(); ++c) code_of.emplace(cats[c], static_cast<int32_t>(c));
      col.codes.resize(labels.size());
      for (size_t i = 0; i < labels.size(); ++i) col.codes[i] = code_of.at(labels[i]);
      d.obs.set(key, Column(std::move(col)));
      write_params(d, key, resolutions[r], opt);
    }
    log::info(detail::concat(gpu ? "leiden (gpu): " : "leiden: ", results[r].n_clusters, " clusters of ", g.n_rows,
                             " cells (resolution ", resolutions[r], ", modularity ", results[r].modularity, ") -> obs['",
                             key, "']"));
  }
  return std::move(results[0]);
}

void write_leiden(Dataset& d, const LeidenResult& res, const LeidenOptions& opt) {
  CategoricalColumn col;
  for (int64_t c = 0; c < res.n_clusters; ++c) col.categories.push_back(std::to_string(c));
  col.codes = res.labels;
  d.obs.set(opt.key_added, Column(std::move(col)));
  write_params(d, opt.key_added, opt.resolution, opt);
}

double modularity(const CsrF& graph, const std::vector<int32_t>& labels, double resolution) {
  const int64_t n = graph.n_rows;
  if (static_cast<int64_t>(labels.size()) != n)
    fail("modularity: ", labels.size(), " labels for a graph of ", n, " nodes");
  const int64_t k = count_labels(labels);
  std::vector<double> tot(static_cast<size_t>(k), 0.0);
  double two_m = 0, inside = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p) {
      const double w = graph.data[p];
      two_m += w;
      tot[labels[i]] += w;
      if (labels[graph.indices[p]] == labels[i]) inside += w;
    }
  if (!(two_m > 0)) return 0.0;
  double expected = 0;
  for (double t : tot) expected += t * t;
  return inside / two_m - resolution * expected / (two_m * two_m);
}

double adjusted_rand_index(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  if (a.size() != b.size()) fail("adjusted_rand_index: labelings of ", a.size(), " and ", b.size(), " cells");
  const int64_t n = static_cast<int64_t>(a.size());
  if (n < 2) return 1.0;
  const int64_t ka = count_labels(a), kb = count_labels(b);
  std::map<std::pair<int32_t, int32_t>, int64_t> table;
  std::vector<int64_t> ra(static_cast<size_t>(ka), 0), rb(static_cast<size_t>(kb), 0);
  for (int64_t i = 0; i < n; ++i) {
    ++table[{a[i], b[i]}];
    ++ra[a[i]];
    ++rb[b[i]];
  }
  auto c2 = [](int64_t x) { return 0.5 * static_cast<double>(x) * static_cast<double>(x - 1); };
  double sum_ij = 0, sum_a = 0, sum_b = 0;
  for (const auto& [key, c] : table) sum_ij += c2(c);
  for (int64_t x : ra) sum_a += c2(x);
  for (int64_t x : rb) sum_b += c2(x);
  const double expected = sum_a * sum_b / c2(n);
  const double max_index = 0.5 * (sum_a + sum_b);
  if (max_index == expected) return 1.0;  // both trivial partitions (as scikit-learn)
  return (sum_ij - expected) / (max_index - expected);
}

}  // namespace scurry
