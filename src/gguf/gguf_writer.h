// GGUF v3 writer, for tests, `gem4 make-model` and tools. Tensors are written in the order added,
// each aligned to `general.alignment` (32 unless set).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace gem4::gguf {

class GgufWriter {
 public:
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_u32_array(const std::string& key, const std::vector<uint32_t>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_bool_array(const std::string& key, const std::vector<bool>& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_value(const std::string& key, const Value& v);  // any value, e.g. copied from another file

  // Adds a tensor whose bytes are `data` (size must equal ggml_row_bytes(type, ne0) * rows).
  void add_tensor(const std::string& name, const std::vector<int64_t>& ne, GgmlType type,
                  std::vector<uint8_t> data);
  // Adds a tensor whose bytes are produced at write time by `fill(dst, nbytes)` (for huge tensors).
  void add_tensor_lazy(const std::string& name, const std::vector<int64_t>& ne, GgmlType type,
                       std::function<void(uint8_t* dst, size_t nbytes)> fill);

  // Writes the file; throws GgufError naming the path on I/O failure.
  void write(const std::string& path) const;
  // The whole file image in memory (small files only).
  std::vector<uint8_t> to_bytes() const;

 private:
  struct PendingTensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    size_t nbytes;
    std::vector<uint8_t> data;
    std::function<void(uint8_t*, size_t)> fill;
  };
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<PendingTensor> tensors_;
  void put(const std::string& key, Value v);
};

}  // namespace gem4::gguf
