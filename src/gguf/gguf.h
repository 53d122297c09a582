// GGUF (v2, v3) reader: memory-maps a file, parses metadata and tensor infos, and validates every
// offset and size against the file. Errors are GgufError exceptions that name the file, the key or
// tensor, and the byte offset.
#pragma once
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/ggml_types.h"
#include "gguf/large_alloc.h"

namespace gem4::gguf {

class GgufError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// clang-format off
enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
// clang-format on
const char* value_type_name(ValueType t);

// Deepest nesting of arrays the reader accepts (1 = a plain array, 2 = an array of arrays, ...). The
// bound keeps a hostile file from driving the recursive parser into a stack overflow.
inline constexpr int kMaxArrayNesting = 16;

struct Value;

// The elements of an ARRAY value, read like a std::vector<Value> (size, [], iteration: each element
// is made as a Value on the fly) and built with push_back.
//
// Why not a vector of Values: a tokenizer's arrays (262144 tokens, scores and types, ~500k merges
// in the real Gemma 4 vocabulary) made ~1.3 M Values of ~100 bytes each, so parsing a model's
// metadata wrote ~130 MB of fresh memory and took 0.15-0.35 s of every start. Elements of one
// scalar or string type are packed instead (strings in one buffer, scalars as their three fields);
// arrays of arrays, or of mixed types (built by hand, for the writer's checks), keep Values.
class ValueArray {
 public:
  size_t size() const;
  bool empty() const { return size() == 0; }
  Value operator[](size_t k) const;
  // Element k's string, without a copy (valid while the array lives and is not changed).
  std::string_view string_at(size_t k) const;
  bool holds_strings() const { return packed_ && count_ > 0 && type_ == ValueType::STRING; }
  // A 64-bit hash of an array of strings: their bytes and lengths, in order (equal arrays hash equal,
  // packed or not). For keys of caches made from them (a tokenizer's merge table, text/vocab_cache.cpp):
  // packed, the 262144 tokens and ~500k merges of the real vocabulary hash in a few milliseconds.
  // Throws std::out_of_range if an element is not a string.
  uint64_t strings_hash() const;
  // Element k as Value::as_int gives it, without making a Value (a tokenizer's 262144 token types
  // through operator[] were an eighth of its build time).
  int64_t int_at(size_t k) const;

  void reserve(size_t n);
  void reserve_strings(size_t n, size_t bytes);  // room for n strings of `bytes` in all
  void push_back(const Value& v);
  void push_string(std::string_view s);  // a STRING element
  // A scalar element (not STRING or ARRAY) given its three fields as Value holds them.
  void push_scalar(ValueType type, uint64_t u, int64_t i, double f);
  // n scalar elements of `type` stored as a GGUF file stores them (n x the type's size in bytes).
  void push_scalars(ValueType type, const uint8_t* bytes, size_t n);
  void clear();
  ValueArray& operator=(std::vector<Value> values);

  class const_iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Value;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = Value;
    const_iterator(const ValueArray* a, size_t k) : a_(a), k_(k) {}
    Value operator*() const;
    const_iterator& operator++() {
      ++k_;
      return *this;
    }
    bool operator==(const const_iterator& o) const { return k_ == o.k_; }
    bool operator!=(const const_iterator& o) const { return k_ != o.k_; }

   private:
    const ValueArray* a_;
    size_t k_;
  };
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size()}; }

 private:
  void unpack();  // to generic Values (an element that cannot be packed arrived)

  bool packed_ = true;                 // empty arrays start packed
  ValueType type_ = ValueType::UINT8;  // packed: the elements' type
  size_t count_ = 0;                   // packed: element count
  // In huge pages when large (gguf/large_alloc.h): a tokenizer's arrays are 10-30 MB.
  LargeVector<uint8_t> raw_;       // packed scalars, as the file stores them (the type's size each)
  LargeString pool_;               // packed strings, back to back
  LargeVector<uint64_t> offsets_;  // packed strings: string k is pool_[offsets_[k], offsets_[k + 1])
  std::vector<Value> values_;      // generic
};

// One metadata value. Scalars use the field that matches `type`; arrays keep their element type
// and elements (nested arrays are arrays of Values).
struct Value {
  ValueType type = ValueType::UINT32;
  uint64_t u = 0;  // UINT8..UINT64 and BOOL
  int64_t i = 0;   // INT8..INT64 (also mirrored into u/f where lossless is not needed)
  double f = 0;    // FLOAT32, FLOAT64
  std::string s;   // STRING
  ValueType elem_type = ValueType::UINT32;  // ARRAY
  ValueArray elems;                         // ARRAY

  bool is_integer() const;
  bool is_float() const;
  int64_t as_int() const;                             // any integer or bool; throws on other types
  double as_double() const;                           // any number
  std::string to_string(size_t max_elems = 8) const;  // for `gem4 inspect`
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ne[0] is the contiguous (input) dimension
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;  // relative to the start of the data section
  uint64_t nbytes = 0;
  int64_t n_elements() const;
};

class GgufFile {
 public:
  // Opens and validates `path` (mmap). Throws GgufError.
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Parses an in-memory image (copied); `name` is used in error messages. For fuzzing and tests.
  static std::unique_ptr<GgufFile> from_memory(const void* data, size_t size, const std::string& name);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  // Typed getters: throw GgufError naming the file and key when missing or of the wrong type.
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  int64_t get_int_or(const std::string& key, int64_t fallback) const;
  double get_float_or(const std::string& key, double fallback) const;
  bool get_bool_or(const std::string& key, bool fallback) const;
  std::string get_string_or(const std::string& key, const std::string& fallback) const;
  // Arrays: throw when missing, not an array, or of incompatible element type.
  std::vector<int64_t> get_int_array(const std::string& key) const;  // ints or bools
  std::vector<float> get_float_array(const std::string& key) const;  // any numbers
  std::vector<std::string> get_string_array(const std::string& key) const;

  // Tensors, in file order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;
  // Pointer to the tensor bytes inside the mapping (valid while this object lives).
  const uint8_t* tensor_data(const TensorInfo& t) const;
  // The whole file image (file_size() bytes): the mapping, or the in-memory copy.
  const uint8_t* image() const { return base_; }

 private:
  GgufFile() = default;
  void parse();
  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::vector<uint8_t> owned_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// The name llama.cpp gives the file type the file states in general.file_type ("Q4_0", "Q4_K_M");
// nullptr when the key is absent or the id unknown.
const char* stated_file_type_name(const GgufFile& f);

}  // namespace gem4::gguf
