// GGUF v3 writer. The header (metadata + tensor infos) is built in memory; tensor data is written
// straight to its place in the file, and lazy tensors are filled directly inside a shared mapping of
// the output file, so a multi-GB model never has to exist in memory.
#include "gguf/gguf_writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

namespace gem4::gguf {
namespace {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;

void append_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

template <class T>
void append(std::vector<uint8_t>& out, T v) {
  append_bytes(out, &v, sizeof v);
}

void append_string(std::vector<uint8_t>& out, const std::string& s) {
  append<uint64_t>(out, s.size());
  append_bytes(out, s.data(), s.size());
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// The alignment a general.alignment value asks for; 0 when it is not a usable (nonzero power of two
// integer) alignment.
uint64_t alignment_value(const Value& v) {
  uint64_t a = 0;
  if (v.type == ValueType::UINT8 || v.type == ValueType::UINT16 || v.type == ValueType::UINT32 ||
      v.type == ValueType::UINT64) {
    a = v.u;
  } else if (v.is_integer() && v.i > 0) {
    a = static_cast<uint64_t>(v.i);
  }
  return (a & (a - 1)) == 0 ? a : 0;
}

[[noreturn]] void fail_key(const std::string& key, const std::string& msg) {
  throw GgufError("GGUF writer: key '" + key + "': " + msg);
}

// Checks that `v` is well formed (element types agree, integers fit their type, nesting bounded) so
// the writer never produces a file the reader would reject.
void check_value(const std::string& key, const Value& v, int depth) {
  auto range = [&](bool ok) {
    if (!ok) fail_key(key, std::string("value out of range for ") + value_type_name(v.type));
  };
  switch (v.type) {
    case ValueType::UINT8:
      range(v.u <= std::numeric_limits<uint8_t>::max());
      break;
    case ValueType::UINT16:
      range(v.u <= std::numeric_limits<uint16_t>::max());
      break;
    case ValueType::UINT32:
      range(v.u <= std::numeric_limits<uint32_t>::max());
      break;
    case ValueType::INT8:
      range(v.i >= INT8_MIN && v.i <= INT8_MAX);
      break;
    case ValueType::INT16:
      range(v.i >= INT16_MIN && v.i <= INT16_MAX);
      break;
    case ValueType::INT32:
      range(v.i >= INT32_MIN && v.i <= INT32_MAX);
      break;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT32:
    case ValueType::FLOAT64:
    case ValueType::BOOL:
    case ValueType::STRING:
      break;
    case ValueType::ARRAY:
      if (depth >= kMaxArrayNesting) fail_key(key, "arrays nested too deeply");
      if (static_cast<uint32_t>(v.elem_type) > static_cast<uint32_t>(ValueType::FLOAT64)) {
        fail_key(key, "invalid array element type");
      }
      for (const Value& e : v.elems) {
        if (e.type != v.elem_type) {
          fail_key(key, std::string("array of ") + value_type_name(v.elem_type) + " holds a " +
                            value_type_name(e.type) + " element");
        }
        check_value(key, e, depth + 1);
      }
      break;
    default:
      fail_key(key, "invalid value type " + std::to_string(static_cast<uint32_t>(v.type)));
  }
}

// Scalars are taken from the field that matches their type: u for unsigned and bool, i for signed,
// f for floats.
void append_value(std::vector<uint8_t>& out, const Value& v) {
  switch (v.type) {
    case ValueType::UINT8:
      append<uint8_t>(out, static_cast<uint8_t>(v.u));
      break;
    case ValueType::UINT16:
      append<uint16_t>(out, static_cast<uint16_t>(v.u));
      break;
    case ValueType::UINT32:
      append<uint32_t>(out, static_cast<uint32_t>(v.u));
      break;
    case ValueType::UINT64:
      append<uint64_t>(out, v.u);
      break;
    case ValueType::INT8:
      append<int8_t>(out, static_cast<int8_t>(v.i));
      break;
    case ValueType::INT16:
      append<int16_t>(out, static_cast<int16_t>(v.i));
      break;
    case ValueType::INT32:
      append<int32_t>(out, static_cast<int32_t>(v.i));
      break;
    case ValueType::INT64:
      append<int64_t>(out, v.i);
      break;
    case ValueType::FLOAT32:
      append<float>(out, static_cast<float>(v.f));
      break;
    case ValueType::FLOAT64:
      append<double>(out, v.f);
      break;
    case ValueType::BOOL:
      append<uint8_t>(out, v.u != 0 ? 1 : 0);
      break;
    case ValueType::STRING:
      append_string(out, v.s);
      break;
    case ValueType::ARRAY:
      append<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
      append<uint64_t>(out, v.elems.size());
      for (const Value& e : v.elems) append_value(out, e);
      break;
  }
}

Value scalar(ValueType t) {
  Value v;
  v.type = t;
  return v;
}

template <class T, class Make>
Value array_of(ValueType elem_type, const std::vector<T>& xs, Make make) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = elem_type;
  v.elems.reserve(xs.size());
  for (const T& x : xs) v.elems.push_back(make(x));
  return v;
}

Value u_value(ValueType t, uint64_t x) {
  Value v = scalar(t);
  v.u = x;
  v.i = static_cast<int64_t>(x);
  v.f = static_cast<double>(x);
  return v;
}
Value i_value(ValueType t, int64_t x) {
  Value v = scalar(t);
  v.i = x;
  v.u = static_cast<uint64_t>(x);
  v.f = static_cast<double>(x);
  return v;
}
Value f_value(ValueType t, double x) {
  Value v = scalar(t);
  v.f = x;
  return v;
}
Value s_value(const std::string& s) {
  Value v = scalar(ValueType::STRING);
  v.s = s;
  return v;
}

void write_all(int fd, const uint8_t* p, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    ssize_t w = pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw GgufError(path + ": write failed: " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

}  // namespace

// ---- metadata ----

void GgufWriter::put(const std::string& key, Value v) {
  check_value(key, v, 0);
  if (key == "general.alignment") {
    // Bounded so that offset arithmetic cannot overflow; real files use 32.
    constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
    uint64_t a = alignment_value(v);
    if (a == 0 || a > kMaxAlignment) fail_key(key, "must be a power of two in 1..2^30");
  }
  for (auto& kv : kv_) {
    if (kv.first == key) {  // setting a key again replaces its value in place
      kv.second = std::move(v);
      return;
    }
  }
  kv_.emplace_back(key, std::move(v));
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) { put(key, u_value(ValueType::UINT32, v)); }
void GgufWriter::set_i32(const std::string& key, int32_t v) { put(key, i_value(ValueType::INT32, v)); }
void GgufWriter::set_u64(const std::string& key, uint64_t v) { put(key, u_value(ValueType::UINT64, v)); }
void GgufWriter::set_f32(const std::string& key, float v) { put(key, f_value(ValueType::FLOAT32, v)); }
void GgufWriter::set_bool(const std::string& key, bool v) { put(key, u_value(ValueType::BOOL, v ? 1 : 0)); }
void GgufWriter::set_string(const std::string& key, const std::string& v) { put(key, s_value(v)); }

void GgufWriter::set_u32_array(const std::string& key, const std::vector<uint32_t>& v) {
  put(key, array_of(ValueType::UINT32, v, [](uint32_t x) { return u_value(ValueType::UINT32, x); }));
}
void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  put(key, array_of(ValueType::INT32, v, [](int32_t x) { return i_value(ValueType::INT32, x); }));
}
void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& v) {
  put(key, array_of(ValueType::FLOAT32, v, [](float x) { return f_value(ValueType::FLOAT32, x); }));
}
void GgufWriter::set_bool_array(const std::string& key, const std::vector<bool>& v) {
  put(key, array_of(ValueType::BOOL, v, [](bool x) { return u_value(ValueType::BOOL, x ? 1 : 0); }));
}
void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  put(key, array_of(ValueType::STRING, v, [](const std::string& x) { return s_value(x); }));
}
void GgufWriter::set_value(const std::string& key, const Value& v) { put(key, v); }

// ---- tensors ----

namespace {

size_t tensor_bytes(const std::string& name, const std::vector<int64_t>& ne, GgmlType type) {
  auto fail = [&](const std::string& msg) -> size_t {
    throw GgufError("GGUF writer: tensor '" + name + "': " + msg);
  };
  std::optional<GgmlTypeInfo> info = ggml_type_info(static_cast<uint32_t>(type));
  if (!info) return fail("unknown ggml type id " + std::to_string(static_cast<uint32_t>(type)));
  if (ne.empty() || ne.size() > kMaxDims)
    return fail("must have 1.." + std::to_string(kMaxDims) + " dimensions");
  uint64_t rows = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 0) return fail("negative dimension");
    if (d > 0 && __builtin_mul_overflow(rows, static_cast<uint64_t>(ne[d]), &rows))
      return fail("size overflows");
  }
  if (ne[0] % info->block_elems != 0) {
    return fail("ne[0] = " + std::to_string(ne[0]) + " is not a multiple of the " + info->name +
                " block size");
  }
  uint64_t row_bytes = static_cast<uint64_t>(ne[0] / info->block_elems) * info->block_bytes;
  uint64_t total;
  if (__builtin_mul_overflow(row_bytes, rows, &total) || total > std::numeric_limits<int64_t>::max()) {
    return fail("size overflows");
  }
  return static_cast<size_t>(total);
}

}  // namespace

void GgufWriter::add_tensor(const std::string& name, const std::vector<int64_t>& ne, GgmlType type,
                            std::vector<uint8_t> data) {
  size_t nbytes = tensor_bytes(name, ne, type);
  if (data.size() != nbytes) {
    throw GgufError("GGUF writer: tensor '" + name + "': " + std::to_string(data.size()) +
                    " data bytes given, shape and type need " + std::to_string(nbytes));
  }
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) throw GgufError("GGUF writer: tensor '" + name + "' added twice");
  }
  tensors_.push_back(PendingTensor{name, ne, type, nbytes, std::move(data), nullptr});
}

void GgufWriter::add_tensor_lazy(const std::string& name, const std::vector<int64_t>& ne, GgmlType type,
                                 std::function<void(uint8_t* dst, size_t nbytes)> fill) {
  size_t nbytes = tensor_bytes(name, ne, type);
  if (!fill) throw GgufError("GGUF writer: tensor '" + name + "': empty fill function");
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) throw GgufError("GGUF writer: tensor '" + name + "' added twice");
  }
  tensors_.push_back(PendingTensor{name, ne, type, nbytes, {}, std::move(fill)});
}

// ---- output ----

namespace {

struct Layout {
  std::vector<uint8_t> header;    // everything before the data section, padding included
  std::vector<uint64_t> offsets;  // absolute file offset of each tensor
  uint64_t total = 0;             // file size (the last tensor is padded too, as ggml does)
};

// Serializes the header and assigns each tensor its aligned place. `tensors` are PendingTensors.
Layout make_layout(const std::vector<std::pair<std::string, Value>>& kv, const auto& tensors) {
  uint64_t alignment = kDefaultAlignment;
  for (const auto& [key, v] : kv) {
    if (key == "general.alignment") alignment = alignment_value(v);
  }
  Layout l;
  std::vector<uint8_t>& h = l.header;
  append<uint32_t>(h, 0x46554747);  // "GGUF"
  append<uint32_t>(h, kVersion);
  append<uint64_t>(h, tensors.size());
  append<uint64_t>(h, kv.size());
  for (const auto& [key, v] : kv) {
    append_string(h, key);
    append<uint32_t>(h, static_cast<uint32_t>(v.type));
    append_value(h, v);
  }
  uint64_t rel = 0;  // offset within the data section
  std::vector<uint64_t> rel_offsets;
  for (const auto& t : tensors) {
    append_string(h, t.name);
    append<uint32_t>(h, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) append<int64_t>(h, d);
    append<uint32_t>(h, static_cast<uint32_t>(t.type));
    append<uint64_t>(h, rel);
    rel_offsets.push_back(rel);
    rel = align_up(rel + t.nbytes, alignment);
  }
  h.resize(align_up(h.size(), alignment), 0);
  for (uint64_t r : rel_offsets) l.offsets.push_back(h.size() + r);
  l.total = h.size() + rel;
  return l;
}

}  // namespace

std::vector<uint8_t> GgufWriter::to_bytes() const {
  Layout l = make_layout(kv_, tensors_);
  std::vector<uint8_t> out = std::move(l.header);
  out.resize(l.total, 0);
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const PendingTensor& t = tensors_[k];
    uint8_t* dst = out.data() + l.offsets[k];
    if (t.fill) {
      if (t.nbytes) t.fill(dst, t.nbytes);
    } else if (t.nbytes) {
      std::memcpy(dst, t.data.data(), t.nbytes);
    }
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  Layout l = make_layout(kv_, tensors_);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw GgufError(path + ": cannot create: " + std::strerror(errno));
  try {
    // Reserve the whole file up front: filling a mapping of a sparse file on a full disk would end in
    // SIGBUS instead of an error we can report.
    int err = posix_fallocate(fd, 0, static_cast<off_t>(l.total));
    if (err != 0 && err != EOPNOTSUPP && err != EINVAL) {
      throw GgufError(path + ": cannot allocate " + std::to_string(l.total) +
                      " bytes: " + std::strerror(err));
    }
    if (ftruncate(fd, static_cast<off_t>(l.total)) != 0) {
      throw GgufError(path + ": cannot size file: " + std::strerror(errno));
    }
    write_all(fd, l.header.data(), l.header.size(), 0, path);
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    for (size_t k = 0; k < tensors_.size(); ++k) {
      const PendingTensor& t = tensors_[k];
      if (t.nbytes == 0) continue;
      uint64_t at = l.offsets[k];
      if (!t.fill) {
        write_all(fd, t.data.data(), t.nbytes, at, path);
        continue;
      }
      uint64_t map_start = at / page * page;
      size_t map_len = static_cast<size_t>(at + t.nbytes - map_start);
      void* map =
          mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(map_start));
      if (map == MAP_FAILED) {
        throw GgufError(path + ": tensor '" + t.name + "': mmap for writing failed: " + std::strerror(errno));
      }
      try {
        t.fill(static_cast<uint8_t*>(map) + (at - map_start), t.nbytes);
      } catch (...) {
        munmap(map, map_len);
        throw;
      }
      munmap(map, map_len);
    }
    if (::close(fd) != 0) {
      fd = -1;
      throw GgufError(path + ": close failed: " + std::strerror(errno));
    }
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(path.c_str());
    throw;
  }
}

}  // namespace gem4::gguf
