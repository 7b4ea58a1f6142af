// scurry Python binding: the in-place steps on the caller's own buffers (issue 17 point 3). A
// scipy CSR matrix (float32/float64 values, int32/int64 indices and row pointers) or a C-contiguous
// numpy array is viewed, not copied (core/matrix_view.hpp), and normalize_total, log1p and scale
// write into it; calculate_qc_metrics and the filters read it (no copy of X into the scratch
// Dataset). Each function returns None when the matrix is not of a layout it can view (CSC
// for normalize_total and scale, integer values, read-only or strided arrays): the wrapper then
// takes the copying path, which gives the same values.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <optional>
#include <vector>

#include "convert.hpp"
#include "runtime.hpp"
#include "core/matrix_view.hpp"
#include "pp/filter_view.hpp"
#include "pp/log1p.hpp"
#include "pp/normalize.hpp"
#include "pp/qc_view.hpp"
#include "pp/scale.hpp"

namespace scurry::py_binding {

namespace {

bool contiguous_writable(const py::array& a) {
  return (a.flags() & py::array::c_style) && a.writeable();
}
bool contiguous(const py::array& a) { return a.flags() & py::array::c_style; }

// The buffers of a scipy CSR matrix or of a numpy array, when they can be viewed in place.
struct Buffers {
  bool dense = false;
  char value = 0;  // 'f' float32, 'd' float64
  int64_t rows = 0, cols = 0;
  py::array data, indices, indptr;
  int index_bytes = 4, indptr_bytes = 4;
};

std::optional<Buffers> buffers_of(py::handle x, bool values_only) {
  Buffers b;
  if (py::hasattr(x, "indptr") && py::hasattr(x, "format")) {
    const std::string fmt = py::str(x.attr("format"));
    if (fmt != "csr" && !(values_only && fmt == "csc")) return std::nullopt;
    py::tuple shape = x.attr("shape");
    b.rows = shape[0].cast<int64_t>();
    b.cols = shape[1].cast<int64_t>();
    b.data = py::reinterpret_borrow<py::array>(x.attr("data"));
    b.indices = py::reinterpret_borrow<py::array>(x.attr("indices"));
    b.indptr = py::reinterpret_borrow<py::array>(x.attr("indptr"));
    if (!contiguous_writable(b.data) || !contiguous(b.indices) || !contiguous(b.indptr)) return std::nullopt;
    for (const py::array* a : {&b.indices, &b.indptr})
      if (a->dtype().kind() != 'i' || (a->dtype().itemsize() != 4 && a->dtype().itemsize() != 8)) return std::nullopt;
    b.index_bytes = static_cast<int>(b.indices.dtype().itemsize());
    b.indptr_bytes = static_cast<int>(b.indptr.dtype().itemsize());
    if (b.indptr.size() != b.rows + 1 || b.indices.size() != b.data.size()) return std::nullopt;
  } else if (py::isinstance<py::array>(x)) {
    b.dense = true;
    b.data = py::reinterpret_borrow<py::array>(x);
    if (b.data.ndim() != 2 || !contiguous_writable(b.data)) return std::nullopt;
    b.rows = b.data.shape(0);
    b.cols = b.data.shape(1);
  } else {
    return std::nullopt;
  }
  if (b.data.dtype().kind() != 'f') return std::nullopt;
  if (b.data.dtype().itemsize() == 4) b.value = 'f';
  else if (b.data.dtype().itemsize() == 8) b.value = 'd';
  else return std::nullopt;
  return b;
}

// indptr as int64 (a copy of n_rows + 1 entries when scipy holds it as int32: small).
std::vector<int64_t> indptr64(const Buffers& b) {
  std::vector<int64_t> p(static_cast<size_t>(b.rows + 1));
  if (b.indptr_bytes == 8) {
    const auto* s = static_cast<const int64_t*>(b.indptr.data());
    std::copy(s, s + p.size(), p.begin());
  } else {
    const auto* s = static_cast<const int32_t*>(b.indptr.data());
    std::copy(s, s + p.size(), p.begin());
  }
  return p;
}

// Calls f(view) with the CsrView<T, I, int64_t> of b (T non-const or const).
template <class T, class F>
auto with_csr(const Buffers& b, const std::vector<int64_t>& ptr, F&& f) {
  T* data = static_cast<T*>(const_cast<void*>(b.data.data()));
  if (b.index_bytes == 8)
    return f(CsrView<T, int64_t, int64_t>{b.rows, b.cols, ptr.data(), static_cast<const int64_t*>(b.indices.data()), data});
  return f(CsrView<T, int32_t, int64_t>{b.rows, b.cols, ptr.data(), static_cast<const int32_t*>(b.indices.data()), data});
}

// Whether every stored value is finite and >= 0 (the counts check of the copying path, which
// gives the CLI's message naming the first bad value, runs when not).
template <class T>
bool all_counts(const T* v, int64_t n) {
  bool ok = true;
#pragma omp parallel for reduction(&& : ok) schedule(static)
  for (int64_t i = 0; i < n; ++i) ok = ok && std::isfinite(v[i]) && v[i] >= 0;
  return ok;
}

// Calls f with the read-only view of b (CSR with int32 or int64 indices, or dense; float32/float64).
template <class F>
void with_const_view(const Buffers& b, F&& f) {
  if (b.dense) {
    if (b.value == 'f') f(DenseView<const float>{b.rows, b.cols, static_cast<const float*>(b.data.data())});
    else f(DenseView<const double>{b.rows, b.cols, static_cast<const double*>(b.data.data())});
    return;
  }
  const auto ptr = indptr64(b);
  if (b.value == 'f') with_csr<const float>(b, ptr, f);
  else with_csr<const double>(b, ptr, f);
}

// The buffers of x when a read-only step can view them: CSR or dense, float values, shaped as the
// Dataset's obs x var, and (`counts`) every value finite and >= 0 (otherwise the copying path runs
// and raises the CLI's message naming the first bad value).
std::optional<Buffers> readable(const Dataset& d, py::handle x, bool counts) {
  auto b = buffers_of(x, false);
  if (!b || b->rows != d.n_obs() || b->cols != d.n_vars()) return std::nullopt;
  if (counts) {
    const int64_t n = static_cast<int64_t>(b->data.size());
    bool ok = false;
    {
      py::gil_scoped_release release;
      ok = b->value == 'f' ? all_counts(static_cast<const float*>(b->data.data()), n)
                           : all_counts(static_cast<const double*>(b->data.data()), n);
    }
    if (!ok) return std::nullopt;
  }
  return b;
}

py::array_t<bool> bools(const std::vector<uint8_t>& v) {
  py::array_t<bool> a(static_cast<py::ssize_t>(v.size()));
  auto* p = a.mutable_data();
  for (size_t i = 0; i < v.size(); ++i) p[i] = v[i] != 0;
  return a;
}
template <class T>
py::array_t<T> numbers(const std::vector<T>& v) {
  return py::array_t<T>(static_cast<py::ssize_t>(v.size()), v.data());
}

}  // namespace

void bind_views(py::module_& m) {
  auto context = [] () -> const Context& { return state().context(); };
  // normalize_total in place on X's buffers; writes obs[key_added] into `d` as the Dataset overload
  // does. Returns (counts_per_cell, target_sum) or None (layout not viewable).
  m.def("normalize_total_inplace", [context](Dataset& d, py::handle x, const NormalizeTotalOptions& o) -> py::object {
    auto b = buffers_of(x, false);
    if (!b) return py::none();
    NormalizeTotalResult r;
    const bool single = b->value == 'f';
    if (b->dense) {
      run_step("normalize total", [&] {
        if (single) r = normalize_total(context(), DenseView<float>{b->rows, b->cols, static_cast<float*>(b->data.mutable_data())}, o);
        else r = normalize_total(context(), DenseView<double>{b->rows, b->cols, static_cast<double*>(b->data.mutable_data())}, o);
      });
    } else {
      const auto ptr = indptr64(*b);
      run_step("normalize total", [&] {
        if (single) r = with_csr<float>(*b, ptr, [&](auto v) { return normalize_total(context(), v, o); });
        else r = with_csr<double>(*b, ptr, [&](auto v) { return normalize_total(context(), v, o); });
      });
    }
    write_normalize_total(d, r, o, single);
    py::array_t<double> counts(static_cast<py::ssize_t>(r.counts_per_cell.size()), r.counts_per_cell.data());
    return py::make_tuple(counts, r.target_sum);
  });
  // True when the matrix can be viewed and holds finite, non-negative values only.
  m.def("counts_ok_inplace", [](py::handle x) {
    auto b = buffers_of(x, true);
    if (!b) return false;
    const int64_t n = static_cast<int64_t>(b->data.size());
    py::gil_scoped_release release;
    return b->value == 'f' ? all_counts(static_cast<const float*>(b->data.data()), n)
                           : all_counts(static_cast<const double*>(b->data.data()), n);
  });
  // The read-only steps on X's buffers: calculate_qc_metrics writes its obs/var columns into `d`
  // (which holds obs/var names and the qc_vars columns only) as the Dataset overload does; the
  // filters write their count column and subset `d` (apply_filter_*), and return (keep, numbers,
  // counts) as the copying bindings do. Each returns False / None when the matrix is not viewable
  // (or, for QC, holds a value that is not a count).
  m.def("calculate_qc_metrics_view", [context](Dataset& d, py::handle x, const QcOptions& o) {
    auto b = readable(d, x, true);
    if (!b) return false;
    const auto masks = qc_var_masks(d, o);
    QcResult r;
    run_step("calculate qc metrics", [&] {
      with_const_view(*b, [&](const auto& v) { r = calculate_qc_metrics(context(), v, o, masks); });
    });
    write_qc_metrics(d, std::move(r), o, b->value == 'f');
    return true;
  });
  m.def("filter_cells_view", [context](Dataset& d, py::handle x, const FilterCellsOptions& o) -> py::object {
    auto b = readable(d, x, false);
    if (!b) return py::none();
    FilterCellsResult r;
    run_step("filter cells", [&] { with_const_view(*b, [&](const auto& v) { r = filter_cells(context(), v, o); }); });
    apply_filter_cells(d, r, b->value == 'f');
    return py::make_tuple(bools(r.keep), numbers(r.n_genes), numbers(r.n_counts));
  });
  m.def("filter_genes_view", [context](Dataset& d, py::handle x, const FilterGenesOptions& o) -> py::object {
    auto b = readable(d, x, false);
    if (!b) return py::none();
    FilterGenesResult r;
    run_step("filter genes", [&] { with_const_view(*b, [&](const auto& v) { r = filter_genes(context(), v, o); }); });
    apply_filter_genes(d, r, b->value == 'f');
    return py::make_tuple(bools(r.keep), numbers(r.n_cells), numbers(r.n_counts));
  });
  // log1p in place on the stored values (CSR, CSC or dense); writes uns['log1p'] into `d`.
  m.def("log1p_inplace", [context](Dataset& d, py::handle x, const Log1pOptions& o) {
    auto b = buffers_of(x, true);
    if (!b) return false;
    const int64_t n = static_cast<int64_t>(b->data.size());
    run_step("log1p", [&] {
      if (b->value == 'f') log1p(context(), static_cast<float*>(b->data.mutable_data()), n, o);
      else log1p(context(), static_cast<double*>(b->data.mutable_data()), n, o);
    });
    write_log1p(d, o);
    return true;
  });
  // scale of float32 data: dense in place; CSR centred into a new dense array (returned), CSR not
  // centred in place. Writes var['mean'], var['std'] into `d`. Returns False when not viewable,
  // None when done in place, else the new dense matrix.
  m.def("scale_inplace", [context](Dataset& d, py::handle x, const ScaleOptions& o) -> py::object {
    auto b = buffers_of(x, false);
    if (!b || b->value != 'f') return py::bool_(false);
    ScaleResult st;
    if (b->dense) {
      run_step("scale", [&] {
        st = scale_inplace(context(), DenseView<float>{b->rows, b->cols, static_cast<float*>(b->data.mutable_data())}, o);
      });
    } else {
      const auto ptr = indptr64(*b);
      run_step("scale", [&] {
        if (o.zero_center) st = with_csr<const float>(*b, ptr, [&](auto v) { return scale(context(), v, o); });
        else st = with_csr<float>(*b, ptr, [&](auto v) { return scale_inplace(context(), v, o); });
      });
    }
    write_scale(d, st);
    if (st.X.empty()) return py::none();
    return matrix_to_py(std::move(st.X));
  });
}

}  // namespace scurry::py_binding
