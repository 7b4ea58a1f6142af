#include "pp/log1p.hpp"

#include <algorithm>
#include <cmath>

#include "core/cancel.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/parallel.hpp"

namespace scurry {
namespace {

// Elements per parallel block of the value array (a fixed partition; a map needs no reduction).
constexpr int64_t kChunk = int64_t{1} << 18;

template <class T>
void log1p_values(const Context& ctx, T* v, int64_t n, const Log1pOptions& opt) {
  const double scale = opt.base ? 1.0 / std::log(*opt.base) : 1.0;
  const bool has_base = opt.base.has_value();
  const int64_t nb = (n + kChunk - 1) / kChunk;
  const CancelShield shield;  // one writing pass: not cut in the middle (core/cancel.hpp)
  parallel_for(ctx.threads(), nb, [&](int64_t b) {
    const int64_t e = std::min(n, (b + 1) * kChunk);
    for (int64_t i = b * kChunk; i < e; ++i) {
      const double y = std::log1p(static_cast<double>(v[i]));
      v[i] = static_cast<T>(has_base ? y * scale : y);
    }
  });
}

}  // namespace

void validate_log1p_options(const Log1pOptions& opt) {
  if (opt.base && (!(*opt.base > 0.0) || *opt.base == 1.0 || !std::isfinite(*opt.base)))
    fail_input("log1p", "base=", *opt.base, " is not a valid logarithm base; give a positive number other than 1");
}

void log1p(const Context& ctx, float* values, int64_t n, const Log1pOptions& opt) {
  validate_log1p_options(opt);
  log1p_values(ctx, values, n, opt);
}
void log1p(const Context& ctx, double* values, int64_t n, const Log1pOptions& opt) {
  validate_log1p_options(opt);
  log1p_values(ctx, values, n, opt);
}

void write_log1p(Dataset& d, const Log1pOptions& opt) {
  if (d.uns.count("log1p")) log::warn("log1p: the data seem to be log-transformed already (uns['log1p'] exists)");
  Dict info;
  if (opt.base) info["base"] = Value(*opt.base);
  d.uns["log1p"] = Value(std::move(info));
}

void log1p(const Context& ctx, CsrF& X, const Log1pOptions& opt) {
  validate_log1p_options(opt);
  log1p_values(ctx, X.data.data(), X.nnz(), opt);
}
void log1p(const Context& ctx, DenseF& X, const Log1pOptions& opt) {
  validate_log1p_options(opt);
  log1p_values(ctx, X.data.data(), static_cast<int64_t>(X.data.size()), opt);
}

void log1p(const Context& ctx, Dataset& d, const Log1pOptions& opt) {
  validate_log1p_options(opt);
  Matrix* M = &d.X;
  std::string slot = "X";
  if (!opt.layer.empty()) {
    auto it = d.layers.find(opt.layer);
    if (it == d.layers.end()) fail_input("log1p", "no layer named '", opt.layer, "'; use one of the dataset's layers or X");
    M = &it->second;
    slot = "layers/" + opt.layer;
  }
  if (M->empty()) fail_input("log1p", slot, " is empty; load a matrix first");
  std::visit(
      [&](auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (!std::is_same_v<X, std::monostate>) {
          log1p_values(ctx, x.data.data(), static_cast<int64_t>(x.data.size()), opt);
          M->dtype = std::is_same_v<typename decltype(x.data)::value_type, float> ? DType::f32 : DType::f64;
        }
      },
      M->m);
  write_log1p(d, opt);
}

}  // namespace scurry
