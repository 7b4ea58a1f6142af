// scurry: numpy .npy/.npz (see npz.hpp).
#include "io/npz.hpp"

#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/error.hpp"

namespace scurry {

namespace {

// ---- little-endian helpers ---------------------------------------------------------------------

void put16(std::string& s, uint32_t v) {
  s.push_back(static_cast<char>(v & 0xff));
  s.push_back(static_cast<char>((v >> 8) & 0xff));
}
void put32(std::string& s, uint32_t v) {
  put16(s, v & 0xffff);
  put16(s, v >> 16);
}
void put64(std::string& s, uint64_t v) {
  put32(s, static_cast<uint32_t>(v & 0xffffffffu));
  put32(s, static_cast<uint32_t>(v >> 32));
}
uint64_t get_le(const std::string& s, size_t at, int bytes, const std::string& where) {
  if (at + bytes > s.size()) fail_input(where, "truncated (a record runs past the end of the file)");
  uint64_t v = 0;
  for (int b = bytes - 1; b >= 0; --b) v = (v << 8) | static_cast<unsigned char>(s[at + b]);
  return v;
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input(path, "cannot open: ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp-scurry";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail_input(path, "cannot write: ", std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      fail_input(path, "write failed (disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail_input(path, "cannot rename the temporary file into place: ", std::strerror(errno));
  }
}

// ---- npy header --------------------------------------------------------------------------------

std::string shape_literal(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t q = 0; q < shape.size(); ++q) s += (q ? ", " : "") + std::to_string(shape[q]);
  if (shape.size() == 1) s += ",";
  return s + ")";
}

std::string npy_header(const std::string& descr, const std::vector<int64_t>& shape) {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_literal(shape) + ", }";
  // numpy pads magic(6) + version(2) + length(2) + header + '\n' to a multiple of 64.
  const size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  put16(out, static_cast<uint32_t>(h.size()));
  return out + h;
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

// ---- pickle writer (protocol 3, what numpy's np.save emits for object arrays) ------------------

void pk_int(std::string& p, int64_t v) {
  if (v >= 0 && v < 256) {
    p.push_back('K');
    p.push_back(static_cast<char>(v));
  } else if (v >= 0 && v < 65536) {
    p.push_back('M');
    put16(p, static_cast<uint32_t>(v));
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    p.push_back('J');
    put32(p, static_cast<uint32_t>(static_cast<int32_t>(v)));
  } else {  // LONG1: little-endian two's complement, 8 bytes
    p.push_back('\x8a');
    p.push_back('\x08');
    put64(p, static_cast<uint64_t>(v));
  }
}
void pk_str(std::string& p, const std::string& s) {
  p.push_back('X');
  put32(p, static_cast<uint32_t>(s.size()));
  p += s;
}

std::string pickle_object_array(const std::vector<int64_t>& shape, const std::vector<PyValue>& v) {
  std::string p = "\x80\x03";
  p += "cnumpy.core.multiarray\n_reconstruct\n";
  p += "cnumpy\nndarray\n";
  p += std::string("K\x00\x85", 3);  // (0,)
  p += "C\x01" "b";   // b'b'
  p += "\x87R";       // _reconstruct(ndarray, (0,), b'b')
  p += "(K\x01";      // state: (1, shape, dtype, is_fortran, list)
  p += "(";
  for (const int64_t d : shape) pk_int(p, d);
  p += "t";
  p += "cnumpy\ndtype\n";
  pk_str(p, "O8");
  p += "\x89\x88\x87R";  // dtype('O8', False, True)
  p += "(K\x03";
  pk_str(p, "|");
  p += "NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK?tb";
  p += "\x89";  // not Fortran
  p += "]";
  constexpr size_t kBatch = 1000;  // pickle's APPENDS batches
  for (size_t q = 0; q < v.size(); q += kBatch) {
    p += "(";
    for (size_t r = q; r < std::min(v.size(), q + kBatch); ++r) {
      const PyValue& x = v[r];
      switch (x.kind) {
        case PyValue::none: p += "N"; break;
        case PyValue::boolean: p += x.i ? "\x88" : "\x89"; break;
        case PyValue::integer: pk_int(p, x.i); break;
        case PyValue::real: {
          p.push_back('G');
          uint64_t bits;
          std::memcpy(&bits, &x.d, 8);
          for (int b = 7; b >= 0; --b) p.push_back(static_cast<char>((bits >> (8 * b)) & 0xff));  // big-endian
          break;
        }
        case PyValue::str: pk_str(p, x.s); break;
      }
    }
    p += "e";
  }
  p += "tb.";
  return p;
}

// ---- pickle reader -----------------------------------------------------------------------------

struct PObj;
using P = std::shared_ptr<PObj>;
struct PObj {
  enum Kind { none, boolean, integer, real, str, bytes, tuple, list, global, ndarray, dtype, scalar, mark } kind = none;
  int64_t i = 0;
  double d = 0;
  std::string s;         // str, bytes, global ("module.name"), dtype name
  std::vector<P> items;  // tuple, list
  // ndarray
  std::vector<int64_t> shape;
  P data;  // list of elements or bytes
};

P mk(PObj::Kind k) {
  auto p = std::make_shared<PObj>();
  p->kind = k;
  return p;
}

PyValue to_value(const P& o, const std::string& where) {
  switch (o->kind) {
    case PObj::none: return PyValue{};
    case PObj::boolean: return PyValue::of_bool(o->i != 0);
    case PObj::integer: return PyValue::of(o->i);
    case PObj::real: return PyValue::of(o->d);
    case PObj::str: return PyValue::of(o->s);
    case PObj::scalar: {
      const std::string& t = o->s;  // dtype name, o->data bytes
      const std::string& b = o->data ? o->data->s : std::string();
      if ((t == "i8" || t == "int64") && b.size() == 8) return PyValue::of(static_cast<int64_t>(get_le(b, 0, 8, where)));
      if ((t == "i4" || t == "int32") && b.size() == 4)
        return PyValue::of(static_cast<int64_t>(static_cast<int32_t>(get_le(b, 0, 4, where))));
      if ((t == "f8" || t == "float64") && b.size() == 8) {
        const uint64_t bits = get_le(b, 0, 8, where);
        double d;
        std::memcpy(&d, &bits, 8);
        return PyValue::of(d);
      }
      if ((t == "b1" || t == "bool") && b.size() == 1) return PyValue::of_bool(b[0] != 0);
      fail_input(where, "object array holds a numpy scalar of dtype '", t, "' that scurry does not read");
    }
    default: fail_input(where, "object array holds a Python object that is not a str, int, float or bool");
  }
}

P unpickle(const std::string& s, size_t at, const std::string& where) {
  std::vector<P> st;
  std::vector<size_t> marks;
  std::map<int64_t, P> memo;
  auto need = [&](size_t n) {
    if (at + n > s.size()) fail_input(where, "truncated pickle in an object array");
  };
  auto pop = [&]() {
    if (st.empty()) fail_input(where, "malformed pickle (stack underflow)");
    P p = st.back();
    st.pop_back();
    return p;
  };
  auto pop_mark = [&]() {
    if (marks.empty()) fail_input(where, "malformed pickle (no mark)");
    const size_t m = marks.back();
    marks.pop_back();
    std::vector<P> v(st.begin() + static_cast<std::ptrdiff_t>(m), st.end());
    st.resize(m);
    return v;
  };
  auto line = [&]() {
    const size_t e = s.find('\n', at);
    if (e == std::string::npos) fail_input(where, "malformed pickle (unterminated line)");
    std::string r = s.substr(at, e - at);
    at = e + 1;
    return r;
  };
  auto tup = [&](std::vector<P> v) {
    P t = mk(PObj::tuple);
    t->items = std::move(v);
    return t;
  };
  auto reduce = [&](const P& f, const P& args) -> P {
    if (f->kind != PObj::global || args->kind != PObj::tuple) fail_input(where, "pickle REDUCE of an unsupported callable");
    const std::string& g = f->s;
    if (g == "numpy.core.multiarray._reconstruct" || g == "numpy._core.multiarray._reconstruct") return mk(PObj::ndarray);
    if (g == "numpy.dtype") {
      P d = mk(PObj::dtype);
      if (!args->items.empty() && args->items[0]->kind == PObj::str) d->s = args->items[0]->s;
      return d;
    }
    if (g == "numpy.core.multiarray.scalar" || g == "numpy._core.multiarray.scalar") {
      if (args->items.size() != 2 || args->items[0]->kind != PObj::dtype) fail_input(where, "malformed numpy scalar in pickle");
      P sc = mk(PObj::scalar);
      sc->s = args->items[0]->s;
      sc->data = args->items[1];
      return sc;
    }
    fail_input(where, "pickle calls '", g, "', which a numpy array of str/int/float/bool never needs");
  };
  for (;;) {
    need(1);
    const unsigned char op = static_cast<unsigned char>(s[at++]);
    switch (op) {
      case 0x80: need(1); ++at; break;                 // PROTO
      case 0x95: need(8); at += 8; break;              // FRAME
      case '(': marks.push_back(st.size()); break;     // MARK
      case ')': st.push_back(tup({})); break;          // EMPTY_TUPLE
      case 0x85: { P a = pop(); st.push_back(tup({a})); break; }
      case 0x86: { P b = pop(), a = pop(); st.push_back(tup({a, b})); break; }
      case 0x87: { P c = pop(), b = pop(), a = pop(); st.push_back(tup({a, b, c})); break; }
      case 't': st.push_back(tup(pop_mark())); break;
      case ']': st.push_back(mk(PObj::list)); break;
      case 'a': { P v = pop(); P l = pop(); l->items.push_back(v); st.push_back(l); break; }
      case 'e': {
        std::vector<P> v = pop_mark();
        P l = pop();
        if (l->kind != PObj::list) fail_input(where, "malformed pickle (APPENDS to a non-list)");
        l->items.insert(l->items.end(), v.begin(), v.end());
        st.push_back(l);
        break;
      }
      case 'N': st.push_back(mk(PObj::none)); break;
      case 0x88: case 0x89: { P b = mk(PObj::boolean); b->i = op == 0x88; st.push_back(b); break; }
      case 'K': { need(1); P v = mk(PObj::integer); v->i = static_cast<unsigned char>(s[at]); at += 1; st.push_back(v); break; }
      case 'M': { P v = mk(PObj::integer); v->i = static_cast<int64_t>(get_le(s, at, 2, where)); at += 2; st.push_back(v); break; }
      case 'J': {
        P v = mk(PObj::integer);
        v->i = static_cast<int32_t>(static_cast<uint32_t>(get_le(s, at, 4, where)));
        at += 4;
        st.push_back(v);
        break;
      }
      case 0x8a: {  // LONG1
        need(1);
        const int n = static_cast<unsigned char>(s[at++]);
        if (n > 8) fail_input(where, "an integer in the pickle does not fit in 64 bits");
        need(n);
        uint64_t u = 0;
        for (int b = n - 1; b >= 0; --b) u = (u << 8) | static_cast<unsigned char>(s[at + b]);
        if (n > 0 && n < 8 && (static_cast<unsigned char>(s[at + n - 1]) & 0x80)) u |= ~0ull << (8 * n);  // sign-extend
        at += n;
        P v = mk(PObj::integer);
        v->i = static_cast<int64_t>(u);
        st.push_back(v);
        break;
      }
      case 'G': {  // BINFLOAT, big-endian
        need(8);
        uint64_t bits = 0;
        for (int b = 0; b < 8; ++b) bits = (bits << 8) | static_cast<unsigned char>(s[at + b]);
        at += 8;
        P v = mk(PObj::real);
        std::memcpy(&v->d, &bits, 8);
        st.push_back(v);
        break;
      }
      case 'X': case 0x8c: case 0x8d: case 'C': case 'B': case 0x8e: {
        const int lb = (op == 0x8c || op == 'C') ? 1 : (op == 0x8d || op == 0x8e) ? 8 : 4;
        const uint64_t n = get_le(s, at, lb, where);
        at += lb;
        need(n);
        P v = mk((op == 'C' || op == 'B' || op == 0x8e) ? PObj::bytes : PObj::str);
        v->s = s.substr(at, n);
        at += n;
        st.push_back(v);
        break;
      }
      case 'c': {  // GLOBAL module\nname\n
        P g = mk(PObj::global);
        const std::string m = line();
        g->s = m + "." + line();
        st.push_back(g);
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        P n = pop(), m = pop();
        P g = mk(PObj::global);
        g->s = m->s + "." + n->s;
        st.push_back(g);
        break;
      }
      case 'q': { need(1); memo[static_cast<unsigned char>(s[at])] = st.empty() ? nullptr : st.back(); at += 1; break; }
      case 'r': { memo[static_cast<int64_t>(get_le(s, at, 4, where))] = st.empty() ? nullptr : st.back(); at += 4; break; }
      case 0x94: { const int64_t id = static_cast<int64_t>(memo.size()); memo[id] = st.empty() ? nullptr : st.back(); break; }
      case 'h': case 'j': {
        const int lb = op == 'h' ? 1 : 4;
        const int64_t id = static_cast<int64_t>(get_le(s, at, lb, where));
        at += lb;
        auto it = memo.find(id);
        if (it == memo.end() || !it->second) fail_input(where, "malformed pickle (memo ", id, " unset)");
        st.push_back(it->second);
        break;
      }
      case 'R': { P args = pop(), f = pop(); st.push_back(reduce(f, args)); break; }
      case 'b': {  // BUILD
        P state = pop();
        P obj = pop();
        if (obj->kind == PObj::ndarray) {
          if (state->kind != PObj::tuple || state->items.size() != 5) fail_input(where, "malformed ndarray state in pickle");
          const P& shp = state->items[1];
          for (const P& d : shp->items) obj->shape.push_back(d->i);
          const P& dt = state->items[2];
          if (dt->kind != PObj::dtype || dt->s != "O8")
            fail_input(where, "pickled ndarray of dtype '", dt->s, "'; scurry reads pickled object arrays only");
          obj->data = state->items[4];
        }  // dtype states and others: nothing to keep
        st.push_back(obj);
        break;
      }
      case '.': return pop();
      default: {
        char hx[8];
        std::snprintf(hx, sizeof hx, "0x%02x", op);
        fail_input(where, "pickle opcode ", hx, " is not supported");
      }
    }
  }
}

}  // namespace

// ---- PyValue / NpyArray ------------------------------------------------------------------------

double PyValue::as_double() const {
  switch (kind) {
    case boolean: case integer: return static_cast<double>(i);
    case real: return d;
    case none: return std::nan("");
    default: fail_input("npz", "a value is the string '", s, "', not a number");
  }
}
std::string PyValue::as_string() const {
  switch (kind) {
    case str: return s;
    case integer: return std::to_string(i);
    case boolean: return i ? "True" : "False";
    case real: {
      std::ostringstream o;
      o.precision(17);
      o << d;
      return o.str();
    }
    default: return "None";
  }
}
int64_t NpyArray::size() const { return product(shape); }

// ---- npy ---------------------------------------------------------------------------------------

std::string npy_encode_f32(const std::vector<int64_t>& shape, const float* v) {
  std::string out = npy_header("<f4", shape);
  out.append(reinterpret_cast<const char*>(v), static_cast<size_t>(product(shape)) * 4);
  return out;
}
std::string npy_encode_f64(const std::vector<int64_t>& shape, const double* v) {
  std::string out = npy_header("<f8", shape);
  out.append(reinterpret_cast<const char*>(v), static_cast<size_t>(product(shape)) * 8);
  return out;
}
std::string npy_encode_i64(const std::vector<int64_t>& shape, const int64_t* v) {
  std::string out = npy_header("<i8", shape);
  out.append(reinterpret_cast<const char*>(v), static_cast<size_t>(product(shape)) * 8);
  return out;
}
std::string npy_encode_objects(const std::vector<int64_t>& shape, const std::vector<PyValue>& v) {
  if (static_cast<int64_t>(v.size()) != product(shape)) fail("npy_encode_objects: ", v.size(), " items for shape ", shape_literal(shape));
  return npy_header("|O", shape) + pickle_object_array(shape, v);
}

NpyArray npy_decode(const std::string& b, const std::string& where) {
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0) fail_input(where, "not a .npy array (bad magic)");
  const int major = static_cast<unsigned char>(b[6]);
  size_t hlen, at;
  if (major == 1) hlen = get_le(b, 8, 2, where), at = 10;
  else if (major == 2 || major == 3) hlen = get_le(b, 8, 4, where), at = 12;
  else fail_input(where, ".npy version ", major, " is not supported");
  if (at + hlen > b.size()) fail_input(where, "truncated .npy header");
  const std::string h = b.substr(at, hlen);
  at += hlen;
  NpyArray a;
  auto field = [&](const std::string& key) {
    const size_t p = h.find("'" + key + "'");
    if (p == std::string::npos) fail_input(where, ".npy header has no '", key, "': ", h);
    size_t q = h.find(':', p);
    if (q == std::string::npos) fail_input(where, "malformed .npy header: ", h);
    ++q;
    while (q < h.size() && h[q] == ' ') ++q;
    return q;
  };
  {
    size_t q = field("descr");
    if (q >= h.size() || (h[q] != '\'' && h[q] != '"')) fail_input(where, "the .npy dtype is not a simple one: ", h);
    const size_t e = h.find(h[q], q + 1);
    a.descr = h.substr(q + 1, e - q - 1);
  }
  const bool fortran = h.compare(field("fortran_order"), 4, "True") == 0;
  {
    size_t q = field("shape");
    const size_t e = h.find(')', q);
    std::string dims = h.substr(q + 1, e - q - 1);
    std::stringstream ss(dims);
    std::string tok;
    while (std::getline(ss, tok, ',')) {
      const size_t f = tok.find_first_not_of(' ');
      if (f == std::string::npos) continue;
      a.shape.push_back(std::stoll(tok.substr(f)));
    }
  }
  const int64_t n = a.size();
  if (a.descr == "|O") {
    const P o = unpickle(b, at, where);
    if (o->kind != PObj::ndarray || !o->data || o->data->kind != PObj::list)
      fail_input(where, "the object array's pickle is not a numpy array with a list of items");
    if (static_cast<int64_t>(o->data->items.size()) != n)
      fail_input(where, "the object array holds ", o->data->items.size(), " items for shape ", shape_literal(a.shape));
    a.objects.reserve(n);
    for (const P& it : o->data->items) a.objects.push_back(to_value(it, where));  // C order (see npz.hpp)
    return a;
  }
  // Numeric or fixed unicode.
  int width = 0;
  char kind = 0;
  if (a.descr.size() >= 3) {
    kind = a.descr[1];
    width = std::atoi(a.descr.c_str() + 2);
    if (a.descr[0] == '>') fail_input(where, "big-endian .npy data ('", a.descr, "') is not supported");
  }
  const int item = kind == 'U' ? 4 * width : width;
  if (!((kind == 'f' && (width == 4 || width == 8)) || (kind == 'i' && (width == 4 || width == 8)) ||
        (kind == 'u' && (width == 4 || width == 8)) || (kind == 'b' && width == 1) || (kind == 'U' && width > 0)))
    fail_input(where, ".npy dtype '", a.descr, "' is not supported");
  if (at + static_cast<size_t>(n) * item > b.size()) fail_input(where, "truncated .npy data");
  // Element e in file order -> C-order position.
  std::vector<int64_t> cpos;
  if (fortran && a.shape.size() > 1) {
    cpos.resize(n);
    std::vector<int64_t> idx(a.shape.size(), 0);
    for (int64_t e = 0; e < n; ++e) {
      int64_t c = 0;
      for (size_t d = 0; d < a.shape.size(); ++d) c = c * a.shape[d] + idx[d];
      cpos[e] = c;
      for (size_t d = 0; d < a.shape.size(); ++d) {  // first index fastest
        if (++idx[d] < a.shape[d]) break;
        idx[d] = 0;
      }
    }
  }
  if (kind == 'U') a.objects.resize(n);
  else a.numbers.resize(n);
  for (int64_t e = 0; e < n; ++e) {
    const int64_t dst = cpos.empty() ? e : cpos[e];
    const size_t p = at + static_cast<size_t>(e) * item;
    if (kind == 'U') {
      std::string u8;
      for (int c = 0; c < width; ++c) {
        const uint32_t cp = static_cast<uint32_t>(get_le(b, p + 4 * c, 4, where));
        if (cp == 0) break;
        if (cp < 0x80) u8.push_back(static_cast<char>(cp));
        else if (cp < 0x800) u8 += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
        else if (cp < 0x10000)
          u8 += {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                 static_cast<char>(0x80 | (cp & 0x3F))};
        else
          u8 += {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
                 static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
      }
      a.objects[dst] = PyValue::of(u8);
    } else if (kind == 'f' && width == 4) {
      float f;
      std::memcpy(&f, b.data() + p, 4);
      a.numbers[dst] = f;
    } else if (kind == 'f') {
      double d;
      std::memcpy(&d, b.data() + p, 8);
      a.numbers[dst] = d;
    } else if (kind == 'b') {
      a.numbers[dst] = b[p] != 0;
    } else {
      const uint64_t u = get_le(b, p, width, where);
      a.numbers[dst] = kind == 'u' ? static_cast<double>(u)
                       : width == 4 ? static_cast<double>(static_cast<int32_t>(u))
                                    : static_cast<double>(static_cast<int64_t>(u));
    }
  }
  return a;
}

// ---- zip ---------------------------------------------------------------------------------------

void write_zip(const std::string& path, const std::vector<std::pair<std::string, std::string>>& members) {
  std::string out, central;
  for (const auto& [name, data] : members) {
    // Deflate (raw, level 6).
    z_stream zs{};
    if (deflateInit2(&zs, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) fail("zlib deflateInit2 failed");
    std::string comp;
    comp.resize(deflateBound(&zs, static_cast<uLong>(std::min<size_t>(data.size(), 0xffffffffu))) + 64);
    size_t done_in = 0, done_out = 0;
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      const size_t chunk_in = std::min<size_t>(data.size() - done_in, 1u << 30);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + done_in));
      zs.avail_in = static_cast<uInt>(chunk_in);
      const bool last = done_in + chunk_in == data.size();
      do {
        if (comp.size() - done_out < (1u << 16)) comp.resize(comp.size() * 2 + (1u << 16));
        zs.next_out = reinterpret_cast<Bytef*>(&comp[done_out]);
        const size_t room = std::min<size_t>(comp.size() - done_out, 1u << 30);
        zs.avail_out = static_cast<uInt>(room);
        rc = deflate(&zs, last ? Z_FINISH : Z_NO_FLUSH);
        if (rc == Z_STREAM_ERROR) {
          deflateEnd(&zs);
          fail("zlib deflate failed");
        }
        done_out += room - zs.avail_out;
      } while (zs.avail_out == 0 || (last && rc != Z_STREAM_END));
      done_in += chunk_in;
      if (last) break;
    }
    deflateEnd(&zs);
    comp.resize(done_out);
    uLong crc = crc32(0L, Z_NULL, 0);
    for (size_t q = 0; q < data.size(); q += (1u << 30))
      crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + q),
                  static_cast<uInt>(std::min<size_t>(data.size() - q, 1u << 30)));
    const uint64_t offset = out.size();
    const bool z64 = data.size() >= 0xffffffffu || comp.size() >= 0xffffffffu || offset >= 0xffffffffu;
    // Local header.
    put32(out, 0x04034b50);
    put16(out, z64 ? 45 : 20);
    put16(out, 0);      // flags
    put16(out, 8);      // deflate
    put16(out, 0);      // time 00:00
    put16(out, 0x21);   // date 1980-01-01 (numpy's: zipfile's default for written members)
    put32(out, static_cast<uint32_t>(crc));
    put32(out, z64 ? 0xffffffffu : static_cast<uint32_t>(comp.size()));
    put32(out, z64 ? 0xffffffffu : static_cast<uint32_t>(data.size()));
    put16(out, static_cast<uint32_t>(name.size()));
    put16(out, z64 ? 20 : 0);
    out += name;
    if (z64) {
      put16(out, 1);
      put16(out, 16);
      put64(out, data.size());
      put64(out, comp.size());
    }
    out += comp;
    // Central directory entry.
    put32(central, 0x02014b50);
    put16(central, (3 << 8) | (z64 ? 45 : 20));  // made by: Unix
    put16(central, z64 ? 45 : 20);
    put16(central, 0);
    put16(central, 8);
    put16(central, 0);
    put16(central, 0x21);
    put32(central, static_cast<uint32_t>(crc));
    put32(central, z64 ? 0xffffffffu : static_cast<uint32_t>(comp.size()));
    put32(central, z64 ? 0xffffffffu : static_cast<uint32_t>(data.size()));
    put16(central, static_cast<uint32_t>(name.size()));
    put16(central, z64 ? 28 : 0);
    put16(central, 0);  // comment
    put16(central, 0);  // disk
    put16(central, 0);  // internal attributes
    put32(central, 0600u << 16);  // external: -rw-------
    put32(central, z64 ? 0xffffffffu : static_cast<uint32_t>(offset));
    central += name;
    if (z64) {
      put16(central, 1);
      put16(central, 24);
      put64(central, data.size());
      put64(central, comp.size());
      put64(central, offset);
    }
  }
  const uint64_t cd_offset = out.size(), cd_size = central.size(), n = members.size();
  out += central;
  const bool z64 = cd_offset >= 0xffffffffu || n >= 0xffff;
  if (z64) {
    const uint64_t z64_at = out.size();
    put32(out, 0x06064b50);
    put64(out, 44);
    put16(out, 45);
    put16(out, 45);
    put32(out, 0);
    put32(out, 0);
    put64(out, n);
    put64(out, n);
    put64(out, cd_size);
    put64(out, cd_offset);
    put32(out, 0x07064b50);
    put32(out, 0);
    put64(out, z64_at);
    put32(out, 1);
  }
  put32(out, 0x06054b50);
  put16(out, 0);
  put16(out, 0);
  put16(out, z64 ? 0xffff : static_cast<uint32_t>(n));
  put16(out, z64 ? 0xffff : static_cast<uint32_t>(n));
  put32(out, z64 ? 0xffffffffu : static_cast<uint32_t>(cd_size));
  put32(out, z64 ? 0xffffffffu : static_cast<uint32_t>(cd_offset));
  put16(out, 0);
  write_atomic(path, out);
}

std::map<std::string, std::string> read_zip(const std::string& path) {
  const std::string z = read_file_bytes(path);
  // End of central directory: the last signature within 64 KiB + 22 of the end.
  if (z.size() < 22) fail_input(path, "not a zip (.npz) archive: too short");
  size_t eocd = std::string::npos;
  for (size_t p = z.size() - 22 + 1; p-- > 0 && z.size() - p <= 65557;)
    if (get_le(z, p, 4, path) == 0x06054b50) {
      eocd = p;
      break;
    }
  if (eocd == std::string::npos) fail_input(path, "not a zip (.npz) archive: no end-of-central-directory record");
  uint64_t n = get_le(z, eocd + 10, 2, path), cd_size = get_le(z, eocd + 12, 4, path),
           cd_off = get_le(z, eocd + 16, 4, path);
  if ((n == 0xffff || cd_off == 0xffffffffu || cd_size == 0xffffffffu) && eocd >= 20 &&
      get_le(z, eocd - 20, 4, path) == 0x07064b50) {
    const uint64_t rec = get_le(z, eocd - 20 + 8, 8, path);
    if (get_le(z, rec, 4, path) != 0x06064b50) fail_input(path, "bad zip64 end-of-central-directory record");
    n = get_le(z, rec + 32, 8, path);
    cd_size = get_le(z, rec + 40, 8, path);
    cd_off = get_le(z, rec + 48, 8, path);
  }
  std::map<std::string, std::string> out;
  size_t p = cd_off;
  for (uint64_t e = 0; e < n; ++e) {
    if (get_le(z, p, 4, path) != 0x02014b50) fail_input(path, "corrupt zip central directory");
    const int method = static_cast<int>(get_le(z, p + 10, 2, path));
    const uint32_t crc = static_cast<uint32_t>(get_le(z, p + 16, 4, path));
    uint64_t csize = get_le(z, p + 20, 4, path), usize = get_le(z, p + 24, 4, path);
    const size_t nlen = get_le(z, p + 28, 2, path), xlen = get_le(z, p + 30, 2, path), clen = get_le(z, p + 32, 2, path);
    uint64_t loff = get_le(z, p + 42, 4, path);
    const std::string name = z.substr(p + 46, nlen);
    // zip64 extra: the fields that are 0xffffffff, in order usize, csize, offset.
    for (size_t x = p + 46 + nlen; x + 4 <= p + 46 + nlen + xlen;) {
      const uint64_t id = get_le(z, x, 2, path), len = get_le(z, x + 2, 2, path);
      if (id == 1) {
        size_t f = x + 4;
        if (usize == 0xffffffffu) usize = get_le(z, f, 8, path), f += 8;
        if (csize == 0xffffffffu) csize = get_le(z, f, 8, path), f += 8;
        if (loff == 0xffffffffu) loff = get_le(z, f, 8, path), f += 8;
      }
      x += 4 + len;
    }
    p += 46 + nlen + xlen + clen;
    if (get_le(z, loff, 4, path) != 0x04034b50) fail_input(path, "corrupt zip local header for '", name, "'");
    const size_t data_at = loff + 30 + get_le(z, loff + 26, 2, path) + get_le(z, loff + 28, 2, path);
    if (data_at + csize > z.size()) fail_input(path, "zip member '", name, "' runs past the end of the file");
    std::string data;
    if (method == 0) {
      data = z.substr(data_at, csize);
    } else if (method == 8) {
      data.resize(usize);
      z_stream zs{};
      if (inflateInit2(&zs, -15) != Z_OK) fail("zlib inflateInit2 failed");
      size_t in_done = 0, out_done = 0;
      int rc = Z_OK;
      while (rc != Z_STREAM_END) {
        const size_t ci = std::min<size_t>(csize - in_done, 1u << 30), co = std::min<size_t>(usize - out_done, 1u << 30);
        zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(z.data() + data_at + in_done));
        zs.avail_in = static_cast<uInt>(ci);
        zs.next_out = reinterpret_cast<Bytef*>(data.data() + out_done);
        zs.avail_out = static_cast<uInt>(co);
        rc = inflate(&zs, Z_NO_FLUSH);
        in_done += ci - zs.avail_in;
        out_done += co - zs.avail_out;
        if (rc != Z_OK && rc != Z_STREAM_END) {
          inflateEnd(&zs);
          fail_input(path, "zip member '", name, "' does not inflate (corrupt deflate data)");
        }
        if (rc == Z_OK && ci == 0 && co == 0) {
          inflateEnd(&zs);
          fail_input(path, "zip member '", name, "' is longer than its recorded size");
        }
      }
      inflateEnd(&zs);
      if (out_done != usize) fail_input(path, "zip member '", name, "' inflates to ", out_done, " bytes, not ", usize);
    } else {
      fail_input(path, "zip member '", name, "' uses compression method ", method, " (only stored and deflate are read)");
    }
    uLong c = crc32(0L, Z_NULL, 0);
    for (size_t q = 0; q < data.size(); q += (1u << 30))
      c = crc32(c, reinterpret_cast<const Bytef*>(data.data() + q), static_cast<uInt>(std::min<size_t>(data.size() - q, 1u << 30)));
    if (static_cast<uint32_t>(c) != crc) fail_input(path, "zip member '", name, "' fails its CRC-32 check");
    out[name] = std::move(data);
  }
  return out;
}

// ---- DataFrames --------------------------------------------------------------------------------

namespace {

std::string encode_labels(const std::vector<std::string>& v, bool as_int, const std::string& what) {
  const std::vector<int64_t> shape{static_cast<int64_t>(v.size())};
  if (as_int) {
    std::vector<int64_t> x(v.size());
    for (size_t q = 0; q < v.size(); ++q) {
      size_t used = 0;
      try {
        x[q] = std::stoll(v[q], &used);
      } catch (...) {
        used = 0;
      }
      if (used != v[q].size() || v[q].empty()) fail("write_df_npz: ", what, " label '", v[q], "' is not an integer");
    }
    return npy_encode_i64(shape, x.data());
  }
  std::vector<PyValue> o;
  o.reserve(v.size());
  for (const auto& s : v) o.push_back(PyValue::of(s));
  return npy_encode_objects(shape, o);
}

void check_shape(const std::vector<std::string>& index, const std::vector<std::string>& columns, int64_t r, int64_t c) {
  if (static_cast<int64_t>(index.size()) != r || static_cast<int64_t>(columns.size()) != c)
    fail("write_df_npz: ", r, " x ", c, " values with ", index.size(), " index and ", columns.size(), " column labels");
}

}  // namespace

void write_df_npz(const std::string& path, const std::vector<std::string>& index, bool index_int,
                  const std::vector<std::string>& columns, bool columns_int, const DenseD& data, NpzDtype dtype) {
  check_shape(index, columns, data.n_rows, data.n_cols);
  const std::vector<int64_t> shape{data.n_rows, data.n_cols};
  std::string d;
  if (dtype == NpzDtype::f64) {
    d = npy_encode_f64(shape, data.data.data());
  } else {
    std::vector<float> f(data.data.begin(), data.data.end());
    d = npy_encode_f32(shape, f.data());
  }
  write_zip(path, {{"data.npy", std::move(d)},
                   {"index.npy", encode_labels(index, index_int, "index")},
                   {"columns.npy", encode_labels(columns, columns_int, "column")}});
}

void write_df_npz(const std::string& path, const std::vector<std::string>& index, bool index_int,
                  const std::vector<std::string>& columns, bool columns_int, const DenseF& data) {
  check_shape(index, columns, data.n_rows, data.n_cols);
  write_zip(path, {{"data.npy", npy_encode_f32({data.n_rows, data.n_cols}, data.data.data())},
                   {"index.npy", encode_labels(index, index_int, "index")},
                   {"columns.npy", encode_labels(columns, columns_int, "column")}});
}

void write_df_npz_objects(const std::string& path, const std::vector<std::string>& index, bool index_int,
                          const std::vector<std::string>& columns, bool columns_int, int64_t n_rows,
                          const std::vector<PyValue>& values) {
  check_shape(index, columns, n_rows, static_cast<int64_t>(columns.size()));
  write_zip(path, {{"data.npy", npy_encode_objects({n_rows, static_cast<int64_t>(columns.size())}, values)},
                   {"index.npy", encode_labels(index, index_int, "index")},
                   {"columns.npy", encode_labels(columns, columns_int, "column")}});
}

DfNpz read_df_npz(const std::string& path) {
  const auto members = read_zip(path);
  auto get = [&](const std::string& key) {
    auto it = members.find(key + ".npy");
    if (it == members.end()) fail_input(path, "has no '", key, "' array (expected cNMF's data/index/columns .df.npz)");
    return npy_decode(it->second, path + ":" + key + ".npy");
  };
  const NpyArray data = get("data"), index = get("index"), columns = get("columns");
  DfNpz df;
  auto labels = [&](const NpyArray& a, std::vector<std::string>& out, bool& is_int, const char* what) {
    if (a.shape.size() != 1) fail_input(path, what, " is not one-dimensional");
    is_int = !a.is_object();
    if (is_int) {
      for (const double v : a.numbers) {
        std::ostringstream o;
        if (v == std::floor(v) && std::fabs(v) < 9.2e18) o << static_cast<int64_t>(v);
        else o << v;
        out.push_back(o.str());
      }
    } else {
      for (const auto& v : a.objects) out.push_back(v.as_string());
    }
  };
  labels(index, df.index, df.index_int, "index");
  labels(columns, df.columns, df.columns_int, "columns");
  const int64_t r = static_cast<int64_t>(df.index.size()), c = static_cast<int64_t>(df.columns.size());
  if (data.shape.size() != 2 || data.shape[0] != r || data.shape[1] != c)
    fail_input(path, "data has shape ", shape_literal(data.shape), ", not ", r, " x ", c, " as its labels say");
  df.data_descr = data.descr;
  df.data = DenseD(r, c);
  if (data.is_object()) {
    df.objects = data.objects;
    for (size_t q = 0; q < data.objects.size(); ++q) {
      if (data.objects[q].kind == PyValue::str)
        fail_input(path, "value ", q, " is the string '", data.objects[q].s, "', not a number");
      df.data.data[q] = data.objects[q].as_double();
    }
  } else {
    df.data.data = data.numbers;
  }
  return df;
}

}  // namespace scurry
