// GGUF (v2, v3) reader: memory-maps a file, parses metadata and tensor infos, and validates every
// offset and size against the file. Errors are GgufError exceptions that name the file, the key or
// tensor, and the byte offset.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/ggml_types.h"

namespace gem4::gguf {

class GgufError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* value_type_name(ValueType t);

// Deepest nesting of arrays the reader accepts (1 = a plain array, 2 = an array of arrays, ...). The
// bound keeps a hostile file from driving the recursive parser into a stack overflow.
inline constexpr int kMaxArrayNesting = 16;

// One metadata value. Scalars use the field that matches `type`; arrays keep their element type
// and elements (nested arrays are arrays of Values).
struct Value {
  ValueType type = ValueType::UINT32;
  uint64_t u = 0;  // UINT8..UINT64 and BOOL
  int64_t i = 0;   // INT8..INT64 (also mirrored into u/f where lossless is not needed)
  double f = 0;    // FLOAT32, FLOAT64
  std::string s;   // STRING
  ValueType elem_type = ValueType::UINT32;  // ARRAY
  std::vector<Value> elems;                 // ARRAY

  bool is_integer() const;
  bool is_float() const;
  int64_t as_int() const;    // any integer or bool; throws on other types
  double as_double() const;  // any number
  std::string to_string(size_t max_elems = 8) const;  // for `gem4 inspect`
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ne[0] is the contiguous (input) dimension
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;      // relative to the start of the data section
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
  std::vector<int64_t> get_int_array(const std::string& key) const;     // ints or bools
  std::vector<float> get_float_array(const std::string& key) const;     // any numbers
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
