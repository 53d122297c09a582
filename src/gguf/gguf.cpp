// GGUF reader. The file is mapped read-only and parsed front to back by a bounds-checked cursor: every
// length or count read from the file is compared with the bytes that remain before anything is read or
// allocated, so a truncated or hostile file ends in a GgufError, never in a crash or a huge allocation.
// Tensor data is never touched here; only its extent is checked against the file size.
#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>

namespace gem4::gguf {
static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
// Smallest possible encodings, used to bound counts before reserving memory:
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;                  // key length, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, ne[0], type, offset

// Keys and tensor names come from the file; quote them printable and short in messages.
std::string quoted(const std::string& s) {
  constexpr size_t kMaxShown = 96;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > kMaxShown) out += "...";
  return out + "'";
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::FLOAT64); }

size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL:
      return 1;
    case ValueType::UINT16:
    case ValueType::INT16:
      return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32:
      return 4;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64:
      return 8;
    case ValueType::STRING:
      return 8;  // the length prefix
    case ValueType::ARRAY:
      return 12;  // element type + count
  }
  return 1;
}

// Bounds-checked reading position within the image. `context` says what is being parsed (a key, a
// tensor) so that every error names it.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& file) : data_(data), size_(size), file_(file) {}

  size_t pos() const { return pos_; }
  void seek(size_t pos) { pos_ = pos < size_ ? pos : size_; }
  size_t remaining() const { return size_ - pos_; }
  void set_context(std::string c) { context_ = std::move(c); }

  [[noreturn]] void fail(size_t offset, const std::string& msg) const {
    std::string where = context_.empty() ? "" : context_ + ": ";
    throw GgufError(file_ + ": " + where + msg + " [at offset " + std::to_string(offset) + ", file size " +
                    std::to_string(size_) + "]");
  }

  void need(uint64_t n, const char* what) const {
    if (n > remaining()) {
      fail(pos_, std::string(what) + " needs " + std::to_string(n) + " bytes but only " +
                     std::to_string(remaining()) + " remain (truncated file?)");
    }
  }

  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char* what) { return std::string(read_string_view(what)); }

  // The next n bytes inside the image (valid while the image lives).
  const uint8_t* read_bytes(uint64_t n, const char* what) {
    need(n, what);
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }

  // The string's bytes inside the image (valid while the image lives).
  std::string_view read_string_view(const char* what) {
    size_t at = pos_;
    uint64_t len = read<uint64_t>(what);
    if (len > remaining()) {
      fail(at, std::string(what) + " claims " + std::to_string(len) + " bytes but only " +
                   std::to_string(remaining()) + " remain");
    }
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& file_;
  std::string context_;
};

// A scalar's three fields as Value keeps them: integers mirrored into u, i and f; floats in f only.
struct ScalarFields {
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
};

template <class T>
ScalarFields unsigned_fields(T x) {
  return {x, static_cast<int64_t>(x), static_cast<double>(x)};
}

template <class T>
ScalarFields signed_fields(T x) {
  return {static_cast<uint64_t>(static_cast<int64_t>(x)), x, static_cast<double>(x)};
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The fields of a scalar stored as in the file (scalar_size(type) little-endian bytes at p). Any type
// but STRING and ARRAY; `type` is valid.
ScalarFields fields_of_bytes(ValueType type, const uint8_t* p) {
  switch (type) {
    case ValueType::UINT8:
      return unsigned_fields(load<uint8_t>(p));
    case ValueType::UINT16:
      return unsigned_fields(load<uint16_t>(p));
    case ValueType::UINT32:
      return unsigned_fields(load<uint32_t>(p));
    case ValueType::UINT64:
      return unsigned_fields(load<uint64_t>(p));
    case ValueType::INT8:
      return signed_fields(load<int8_t>(p));
    case ValueType::INT16:
      return signed_fields(load<int16_t>(p));
    case ValueType::INT32:
      return signed_fields(load<int32_t>(p));
    case ValueType::INT64:
      return signed_fields(load<int64_t>(p));
    case ValueType::BOOL:
      return unsigned_fields(load<uint8_t>(p) != 0 ? 1u : 0u);
    case ValueType::FLOAT32:
      return {0, 0, load<float>(p)};
    case ValueType::FLOAT64:
      return {0, 0, load<double>(p)};
    case ValueType::STRING:
    case ValueType::ARRAY:
      break;
  }
  return {};
}

bool is_scalar(ValueType t) {
  return valid_value_type(uint32_t(t)) && t != ValueType::STRING && t != ValueType::ARRAY;
}

// Any type but STRING and ARRAY.
ScalarFields read_scalar(Cursor& c, ValueType type) {
  if (!is_scalar(type)) c.fail(c.pos(), "invalid value type " + std::to_string(static_cast<uint32_t>(type)));
  return fields_of_bytes(type, c.read_bytes(scalar_size(type), "scalar value"));
}

Value read_array(Cursor& c, int depth) {
  size_t at = c.pos();
  if (depth >= kMaxArrayNesting) {
    c.fail(at, "arrays nested deeper than " + std::to_string(kMaxArrayNesting) + " levels");
  }
  uint32_t elem_type = c.read<uint32_t>("array element type");
  if (!valid_value_type(elem_type))
    c.fail(at, "array element type " + std::to_string(elem_type) + " is invalid");
  uint64_t count = c.read<uint64_t>("array length");
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = static_cast<ValueType>(elem_type);
  // Every element takes at least scalar_size bytes, so a count the rest of the file cannot hold is
  // rejected before any memory is reserved for it.
  uint64_t min_elem = scalar_size(v.elem_type);
  if (count > c.remaining() / min_elem) {
    c.fail(at, "array of " + std::to_string(count) + " " + value_type_name(v.elem_type) +
                   " elements needs at least " + std::to_string(count) + " x " + std::to_string(min_elem) +
                   " bytes but only " + std::to_string(c.remaining()) + " remain");
  }
  if (v.elem_type == ValueType::STRING) {
    // Two passes: the lengths first, so the pool is allocated once at its size (a tokenizer's
    // ~800k strings otherwise regrow it, copying and faulting in twice the memory).
    const size_t first = c.pos();
    size_t bytes = 0;
    for (uint64_t k = 0; k < count; ++k) bytes += c.read_string_view("string value").size();
    c.seek(first);
    v.elems.reserve_strings(static_cast<size_t>(count), bytes);
    for (uint64_t k = 0; k < count; ++k) v.elems.push_string(c.read_string_view("string value"));
  } else if (v.elem_type == ValueType::ARRAY) {
    v.elems.reserve(static_cast<size_t>(count));
    for (uint64_t k = 0; k < count; ++k) v.elems.push_back(read_array(c, depth + 1));
  } else {  // stored as the file has them: a tokenizer's 262144 scores take 1 MB, not 6
    const size_t bytes = static_cast<size_t>(count) * scalar_size(v.elem_type);
    v.elems.push_scalars(v.elem_type, c.read_bytes(bytes, "array elements"), static_cast<size_t>(count));
  }
  return v;
}

Value read_value(Cursor& c, ValueType type, int depth) {
  Value v;
  v.type = type;
  if (type == ValueType::ARRAY) return read_array(c, depth);
  if (type == ValueType::STRING) {
    v.s = c.read_string("string value");
    return v;
  }
  const ScalarFields x = read_scalar(c, type);
  v.u = x.u, v.i = x.i, v.f = x.f;
  return v;
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
bool checked_add(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }

std::string format_double(double d) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", d);
  return buf;
}

std::string escaped(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace

// ---- Value ----

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
      return "uint8";
    case ValueType::INT8:
      return "int8";
    case ValueType::UINT16:
      return "uint16";
    case ValueType::INT16:
      return "int16";
    case ValueType::UINT32:
      return "uint32";
    case ValueType::INT32:
      return "int32";
    case ValueType::FLOAT32:
      return "float32";
    case ValueType::BOOL:
      return "bool";
    case ValueType::STRING:
      return "string";
    case ValueType::ARRAY:
      return "array";
    case ValueType::UINT64:
      return "uint64";
    case ValueType::INT64:
      return "int64";
    case ValueType::FLOAT64:
      return "float64";
  }
  return "invalid";
}

// --- ValueArray ------------------------------------------------------------------------------

size_t ValueArray::size() const { return packed_ ? count_ : values_.size(); }

Value ValueArray::operator[](size_t k) const {
  if (!packed_) return values_.at(k);
  if (k >= count_) throw std::out_of_range("gguf array index " + std::to_string(k));
  Value v;
  v.type = type_;
  if (type_ == ValueType::STRING) {
    v.s = string_at(k);
  } else {
    const ScalarFields x = fields_of_bytes(type_, raw_.data() + k * scalar_size(type_));
    v.u = x.u, v.i = x.i, v.f = x.f;
  }
  return v;
}

int64_t ValueArray::int_at(size_t k) const {
  const bool plain_int = type_ != ValueType::UINT64 && type_ != ValueType::FLOAT32 &&
                         type_ != ValueType::FLOAT64 && type_ != ValueType::STRING &&
                         type_ != ValueType::ARRAY;
  if (!packed_ || k >= count_ || !plain_int) return (*this)[k].as_int();  // as_int's checks and errors
  const ScalarFields x = fields_of_bytes(type_, raw_.data() + k * scalar_size(type_));
  return x.i;
}

uint64_t ValueArray::strings_hash() const {
  const std::hash<std::string_view> hash;
  const size_t n = size();
  if (holds_strings()) {  // the buffer of bytes and the lengths (offsets from 0) as they are kept
    const uint64_t bytes = hash(std::string_view(pool_.data() + offsets_[0], offsets_[n] - offsets_[0]));
    uint64_t lengths = n;
    for (size_t k = 0; k < n; ++k) lengths = lengths * 0x100000001B3ull + (offsets_[k + 1] - offsets_[k]);
    return bytes ^ (hash(std::string_view(reinterpret_cast<const char*>(&lengths), sizeof lengths)) * 3);
  }
  std::string all;  // the same two parts, gathered
  uint64_t lengths = n;
  for (size_t k = 0; k < n; ++k) {
    const std::string_view s = string_at(k);
    all += s;
    lengths = lengths * 0x100000001B3ull + s.size();
  }
  return hash(all) ^ (hash(std::string_view(reinterpret_cast<const char*>(&lengths), sizeof lengths)) * 3);
}

std::string_view ValueArray::string_at(size_t k) const {
  if (!packed_) {
    const Value& v = values_.at(k);
    if (v.type != ValueType::STRING)
      throw std::out_of_range("gguf array: no string element " + std::to_string(k));
    return v.s;
  }
  if (!holds_strings() || k >= count_)
    throw std::out_of_range("gguf array: no string element " + std::to_string(k));
  return std::string_view(pool_).substr(offsets_[k], offsets_[k + 1] - offsets_[k]);
}

Value ValueArray::const_iterator::operator*() const { return (*a_)[k_]; }

void ValueArray::reserve(size_t n) {
  // Room for scalars (or Values once generic); a string array's buffer grows with what it holds.
  if (!packed_) {
    values_.reserve(n);
  } else if (count_ == 0) {
    raw_.reserve(n * 8);  // the widest scalar
  }
}

void ValueArray::reserve_strings(size_t n, size_t bytes) {
  if (!packed_ || (count_ > 0 && type_ != ValueType::STRING)) return reserve(n);
  pool_.reserve(pool_.size() + bytes);
  offsets_.reserve(count_ + n + 1);
}

void ValueArray::push_scalar(ValueType type, uint64_t u, int64_t i, double f) {
  if (packed_ && is_scalar(type) && (count_ == 0 || type == type_)) {
    uint8_t b[8];
    switch (type) {
      case ValueType::FLOAT32: {
        const float x = static_cast<float>(f);
        std::memcpy(b, &x, 4);
        break;
      }
      case ValueType::FLOAT64:
        std::memcpy(b, &f, 8);
        break;
      case ValueType::INT8:
      case ValueType::INT16:
      case ValueType::INT32:
      case ValueType::INT64:
        std::memcpy(b, &i, 8);  // little-endian: the low bytes first
        break;
      default:
        std::memcpy(b, &u, 8);
        break;
    }
    // Only what the stored bytes give back exactly: a value built in code may carry fields that do
    // not mirror each other or be out of its type's range (the writer reports that), and stays whole.
    const ScalarFields x = fields_of_bytes(type, b);
    if (x.u == u && x.i == i && std::memcmp(&x.f, &f, sizeof f) == 0) {
      push_scalars(type, b, 1);
      return;
    }
  }
  Value v;
  v.type = type;
  v.u = u, v.i = i, v.f = f;
  if (packed_) unpack();
  values_.push_back(v);
}

void ValueArray::push_scalars(ValueType type, const uint8_t* bytes, size_t n) {
  if (n == 0) return;
  if (!packed_ || !is_scalar(type) || (count_ > 0 && type != type_)) {
    for (size_t k = 0; k < n; ++k) {
      const ScalarFields x = fields_of_bytes(type, bytes + k * scalar_size(type));
      Value v;
      v.type = type;
      v.u = x.u, v.i = x.i, v.f = x.f;
      push_back(v);
    }
    return;
  }
  type_ = type;
  const size_t at = raw_.size(), len = n * scalar_size(type);
  raw_.resize(at + len);
  std::memcpy(raw_.data() + at, bytes, len);
  count_ += n;
}

void ValueArray::push_back(const Value& v) {
  const bool packable = v.type != ValueType::ARRAY;
  if (packed_ && packable && (count_ == 0 || v.type == type_)) {
    if (v.type == ValueType::STRING) {
      push_string(v.s);
      return;
    }
    push_scalar(v.type, v.u, v.i, v.f);
    return;
  }
  if (packed_) unpack();
  values_.push_back(v);
}

void ValueArray::push_string(std::string_view s) {
  if (packed_ && (count_ == 0 || type_ == ValueType::STRING)) {
    if (count_ == 0) {
      type_ = ValueType::STRING;
      offsets_.assign(1, 0);
      raw_ = {};  // what reserve() set aside for scalars
    }
    pool_.append(s);
    offsets_.push_back(pool_.size());
    ++count_;
    return;
  }
  Value v;
  v.type = ValueType::STRING;
  v.s = s;
  push_back(v);
}

void ValueArray::clear() { *this = ValueArray(); }

ValueArray& ValueArray::operator=(std::vector<Value> values) {
  clear();
  for (const Value& v : values) push_back(v);
  return *this;
}

void ValueArray::unpack() {
  std::vector<Value> values;
  values.reserve(count_ + 1);
  for (size_t k = 0; k < count_; ++k) values.push_back((*this)[k]);
  packed_ = false;
  count_ = 0;
  raw_ = {};
  pool_ = {};
  offsets_ = {};
  values_ = std::move(values);
}

// --- Value -----------------------------------------------------------------------------------

bool Value::is_integer() const {
  switch (type) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::UINT16:
    case ValueType::INT16:
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::UINT64:
    case ValueType::INT64:
      return true;
    default:
      return false;
  }
}

bool Value::is_float() const { return type == ValueType::FLOAT32 || type == ValueType::FLOAT64; }

int64_t Value::as_int() const {
  switch (type) {
    case ValueType::UINT8:
    case ValueType::UINT16:
    case ValueType::UINT32:
    case ValueType::BOOL:
      return static_cast<int64_t>(u);
    case ValueType::UINT64:
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        throw GgufError("uint64 value " + std::to_string(u) + " does not fit in int64");
      }
      return static_cast<int64_t>(u);
    case ValueType::INT8:
    case ValueType::INT16:
    case ValueType::INT32:
    case ValueType::INT64:
      return i;
    default:
      throw GgufError(std::string("value of type ") + value_type_name(type) + " is not an integer");
  }
}

double Value::as_double() const {
  if (is_float()) return f;
  if (type == ValueType::UINT64) return static_cast<double>(u);
  if (is_integer()) return static_cast<double>(as_int());
  throw GgufError(std::string("value of type ") + value_type_name(type) + " is not a number");
}

std::string Value::to_string(size_t max_elems) const {
  switch (type) {
    case ValueType::BOOL:
      return u ? "true" : "false";
    case ValueType::UINT8:
    case ValueType::UINT16:
    case ValueType::UINT32:
    case ValueType::UINT64:
      return std::to_string(u);
    case ValueType::INT8:
    case ValueType::INT16:
    case ValueType::INT32:
    case ValueType::INT64:
      return std::to_string(i);
    case ValueType::FLOAT32:
    case ValueType::FLOAT64:
      return format_double(f);
    case ValueType::STRING:
      return escaped(s);
    case ValueType::ARRAY: {
      std::string out = "[";
      size_t shown = std::min(max_elems, elems.size());
      for (size_t k = 0; k < shown; ++k) {
        if (k) out += ", ";
        out += elems[k].to_string(max_elems);
      }
      if (shown < elems.size()) {
        out += (shown ? ", ... " : "... ") + std::to_string(elems.size() - shown) + " more";
      }
      return out + "]";
    }
  }
  return "<invalid>";
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

// ---- GgufFile ----

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw GgufError(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw GgufError(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw GgufError(path + ": not a regular file");
  }
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ == 0) {
    ::close(fd);
    throw GgufError(path + ": empty file, not a GGUF file");
  }
  // MAP_PRIVATE + PROT_READ: pages are loaded only when a tensor is read, so opening a multi-GB model
  // costs nothing beyond parsing its header.
  void* map = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);
  if (map == MAP_FAILED) throw GgufError(path + ": mmap failed: " + std::strerror(map_err));
  file->base_ = static_cast<const uint8_t*>(map);
  file->mapped_ = true;
  file->parse();
  return file;
}

std::unique_ptr<GgufFile> GgufFile::from_memory(const void* data, size_t size, const std::string& name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = name;
  // Over-allocate so the image can start on a 64-byte boundary: tensor data then has the same
  // alignment as in a mapped file (whose base is page aligned).
  constexpr size_t kBaseAlign = 64;
  file->owned_.resize(size + kBaseAlign);
  uintptr_t raw = reinterpret_cast<uintptr_t>(file->owned_.data());
  size_t skip = (kBaseAlign - raw % kBaseAlign) % kBaseAlign;
  uint8_t* base = file->owned_.data() + skip;
  if (size) std::memcpy(base, data, size);
  file->base_ = base;
  file->size_ = size;
  file->parse();
  return file;
}

GgufFile::~GgufFile() {
  if (mapped_) munmap(const_cast<uint8_t*>(base_), size_);
}

void GgufFile::parse() {
  Cursor c(base_, size_, path_);
  c.set_context("header");
  uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08x", magic);
    c.fail(0, std::string("bad magic ") + buf + " (expected \"GGUF\"): not a GGUF file");
  }
  version_ = c.read<uint32_t>("version");
  if (version_ == 1) c.fail(4, "GGUF version 1 is not supported (only versions 2 and 3)");
  if (version_ != 2 && version_ != 3) {
    std::string hint = (version_ & 0xffff) == 0 ? " (a big-endian file?)" : "";
    c.fail(4, "unsupported GGUF version " + std::to_string(version_) + hint + " (only versions 2 and 3)");
  }
  uint64_t n_tensors = c.read<uint64_t>("tensor count");
  uint64_t n_kv = c.read<uint64_t>("metadata count");
  if (n_kv > c.remaining() / kMinKvBytes) {
    c.fail(16, "metadata count " + std::to_string(n_kv) + " cannot fit in the " +
                   std::to_string(c.remaining()) + " remaining bytes");
  }
  if (n_tensors > c.remaining() / kMinTensorInfoBytes) {
    c.fail(8, "tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                  std::to_string(c.remaining()) + " remaining bytes");
  }

  kv_.reserve(static_cast<size_t>(n_kv));
  size_t alignment_key_at = 0;
  for (uint64_t k = 0; k < n_kv; ++k) {
    size_t at = c.pos();
    c.set_context("metadata entry " + std::to_string(k));
    std::string key = c.read_string("key");
    c.set_context("key " + quoted(key));
    if (kv_index_.count(key)) c.fail(at, "duplicate key");
    size_t type_at = c.pos();
    uint32_t type = c.read<uint32_t>("value type");
    if (!valid_value_type(type)) c.fail(type_at, "invalid value type " + std::to_string(type));
    Value v = read_value(c, static_cast<ValueType>(type), 0);
    if (key == "general.alignment") alignment_key_at = at;
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(std::move(key), std::move(v));
  }

  alignment_ = 32;
  if (const Value* a = find("general.alignment")) {
    c.set_context("key 'general.alignment'");
    if (!a->is_integer())
      c.fail(alignment_key_at, std::string("must be an integer, not ") + value_type_name(a->type));
    bool negative = a->type != ValueType::UINT64 && a->as_int() < 0;
    uint64_t align =
        negative ? 0 : (a->type == ValueType::UINT64 ? a->u : static_cast<uint64_t>(a->as_int()));
    if (align == 0 || (align & (align - 1)) != 0) {
      c.fail(alignment_key_at, "alignment " + a->to_string() + " is not a nonzero power of two");
    }
    alignment_ = align;
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    size_t at = c.pos();
    c.set_context("tensor info " + std::to_string(k));
    TensorInfo t;
    t.name = c.read_string("tensor name");
    c.set_context("tensor " + quoted(t.name));
    if (tensor_index_.count(t.name)) c.fail(at, "duplicate tensor name");
    size_t dims_at = c.pos();
    uint32_t n_dims = c.read<uint32_t>("n_dims");
    if (n_dims < 1 || n_dims > kMaxDims) {
      c.fail(dims_at, "n_dims " + std::to_string(n_dims) + " is outside 1.." + std::to_string(kMaxDims));
    }
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      size_t ne_at = c.pos();
      int64_t ne = c.read<int64_t>("dimension");
      if (ne < 0) c.fail(ne_at, "ne[" + std::to_string(d) + "] = " + std::to_string(ne) + " is negative");
      if (!checked_mul(n_elements, static_cast<uint64_t>(ne), &n_elements) ||
          n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        c.fail(ne_at, "element count overflows int64");
      }
      t.ne.push_back(ne);
    }
    size_t type_at = c.pos();
    uint32_t type_id = c.read<uint32_t>("ggml type");
    std::optional<GgmlTypeInfo> info = ggml_type_info(type_id);
    if (!info) c.fail(type_at, "unknown ggml type id " + std::to_string(type_id));
    t.type = static_cast<GgmlType>(type_id);
    if (t.ne[0] % info->block_elems != 0) {
      c.fail(dims_at, "ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " + info->name +
                          " block size " + std::to_string(info->block_elems));
    }
    uint64_t rows = t.ne[0] == 0 ? 0 : n_elements / static_cast<uint64_t>(t.ne[0]);
    uint64_t row_bytes = static_cast<uint64_t>(t.ne[0] / info->block_elems) * info->block_bytes;
    if (!checked_mul(row_bytes, rows, &t.nbytes)) c.fail(dims_at, "byte size overflows");
    size_t offset_at = c.pos();
    t.offset = c.read<uint64_t>("data offset");
    if (t.offset % alignment_ != 0) {
      c.fail(offset_at, "data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                            std::to_string(alignment_));
    }
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment after the tensor infos.
  c.set_context("");
  uint64_t end_of_infos = c.pos();
  uint64_t padded;
  if (!checked_add(end_of_infos, alignment_ - 1, &padded))
    c.fail(end_of_infos, "data section offset overflows");
  data_offset_ = padded / alignment_ * alignment_;
  for (const TensorInfo& t : tensors_) {
    uint64_t start, end;
    if (!checked_add(data_offset_, t.offset, &start) || !checked_add(start, t.nbytes, &end) || end > size_) {
      throw GgufError(path_ + ": tensor " + quoted(t.name) + " data [offset " + std::to_string(start) + ", " +
                      std::to_string(t.nbytes) + " bytes] extends past end of file (size " +
                      std::to_string(size_) + ")");
    }
  }
}

// ---- lookups ----

const Value* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

namespace {

[[noreturn]] void key_error(const std::string& file, const std::string& key, const std::string& msg) {
  throw GgufError(file + ": key " + quoted(key) + ": " + msg);
}

const Value& require(const GgufFile& f, const std::string& key) {
  const Value* v = f.find(key);
  if (!v) key_error(f.path(), key, "not found");
  return *v;
}

std::string type_desc(const Value& v) {
  if (v.type != ValueType::ARRAY) return value_type_name(v.type);
  return std::string("array of ") + value_type_name(v.elem_type);
}

int64_t int_of(const GgufFile& f, const std::string& key, const Value& v) {
  if (!v.is_integer() && v.type != ValueType::BOOL)
    key_error(f.path(), key, "is " + type_desc(v) + ", not an integer");
  try {
    return v.as_int();
  } catch (const GgufError& e) {
    key_error(f.path(), key, e.what());
  }
}

double float_of(const GgufFile& f, const std::string& key, const Value& v) {
  if (!v.is_integer() && !v.is_float()) key_error(f.path(), key, "is " + type_desc(v) + ", not a number");
  return v.as_double();
}

const Value& require_array(const GgufFile& f, const std::string& key) {
  const Value& v = require(f, key);
  if (v.type != ValueType::ARRAY) key_error(f.path(), key, "is " + type_desc(v) + ", not an array");
  return v;
}

}  // namespace

int64_t GgufFile::get_int(const std::string& key) const { return int_of(*this, key, require(*this, key)); }

double GgufFile::get_float(const std::string& key) const { return float_of(*this, key, require(*this, key)); }

bool GgufFile::get_bool(const std::string& key) const {
  const Value& v = require(*this, key);
  if (v.type != ValueType::BOOL) key_error(path_, key, "is " + type_desc(v) + ", not a bool");
  return v.u != 0;
}

const std::string& GgufFile::get_string(const std::string& key) const {
  const Value& v = require(*this, key);
  if (v.type != ValueType::STRING) key_error(path_, key, "is " + type_desc(v) + ", not a string");
  return v.s;
}

int64_t GgufFile::get_int_or(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}
double GgufFile::get_float_or(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}
bool GgufFile::get_bool_or(const std::string& key, bool fallback) const {
  return has(key) ? get_bool(key) : fallback;
}
std::string GgufFile::get_string_or(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const Value& v = require_array(*this, key);
  Value probe;
  probe.type = v.elem_type;
  if (!probe.is_integer() && v.elem_type != ValueType::BOOL) {
    key_error(path_, key, "is " + type_desc(v) + ", not an array of integers or bools");
  }
  std::vector<int64_t> out;
  out.reserve(v.elems.size());
  for (const Value& e : v.elems) out.push_back(int_of(*this, key, e));
  return out;
}

std::vector<float> GgufFile::get_float_array(const std::string& key) const {
  const Value& v = require_array(*this, key);
  Value probe;
  probe.type = v.elem_type;
  if (!probe.is_integer() && !probe.is_float())
    key_error(path_, key, "is " + type_desc(v) + ", not an array of numbers");
  std::vector<float> out;
  out.reserve(v.elems.size());
  for (const Value& e : v.elems) out.push_back(static_cast<float>(float_of(*this, key, e)));
  return out;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const Value& v = require_array(*this, key);
  if (v.elem_type != ValueType::STRING)
    key_error(path_, key, "is " + type_desc(v) + ", not an array of strings");
  std::vector<std::string> out;
  out.reserve(v.elems.size());
  for (size_t k = 0; k < v.elems.size(); ++k) out.emplace_back(v.elems.string_at(k));
  return out;
}

const TensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t* GgufFile::tensor_data(const TensorInfo& t) const {
  // parse() proved this for the file's own infos; the check guards against a TensorInfo from elsewhere.
  uint64_t start, end;
  if (!checked_add(data_offset_, t.offset, &start) || !checked_add(start, t.nbytes, &end) || end > size_) {
    throw GgufError(path_ + ": tensor " + quoted(t.name) + " data lies outside the file");
  }
  return base_ + start;
}

const char* stated_file_type_name(const GgufFile& f) {
  const int64_t id = f.get_int_or("general.file_type", -1);
  return id >= 0 && id <= INT64_C(0xFFFFFFFF) ? llama_file_type_name(uint32_t(id)) : nullptr;
}

}  // namespace gem4::gguf
