// Writes a seed corpus for gguf_fuzz: small files covering every value type, nested arrays, every
// tensor type and a custom alignment, plus shrunk copies of real GGUFs (their keys and tensor names
// with arrays cut to a few elements and tensors cut to one block), so mutations start from realistic
// headers without megabytes of tensor data.
// Usage: gguf_seeds OUT_DIR [REAL.gguf ...]
#include <cstdio>
#include <exception>
#include <string>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"

using namespace gem4;
using namespace gem4::gguf;

namespace {

Value scalar(ValueType t, uint64_t u, int64_t i, double f) {
  Value v;
  v.type = t;
  v.u = u;
  v.i = i;
  v.f = f;
  return v;
}

Value array(ValueType elem_type, std::vector<Value> elems) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = elem_type;
  v.elems = std::move(elems);
  return v;
}

GgufWriter every_value_type() {
  GgufWriter w;
  w.set_string("general.architecture", "gemma4");
  w.set_u32("gemma4.block_count", 2);
  w.set_i32("t.i32", -5);
  w.set_u64("t.u64", 1ull << 40);
  w.set_f32("t.f32", 0.5f);
  w.set_bool("t.bool", true);
  w.set_u32_array("t.u32s", {1, 2, 3});
  w.set_i32_array("t.i32s", {-1, 1});
  w.set_f32_array("t.f32s", {-1000.0f, 0.0f});
  w.set_bool_array("t.bools", {true, false});
  w.set_string_array("tokenizer.ggml.tokens", {"<pad>", "<eos>", "<bos>", "\xe2\x96\x81"});
  w.set_value("t.u8", scalar(ValueType::UINT8, 7, 7, 7));
  w.set_value("t.i8", scalar(ValueType::INT8, 0, -7, 0));
  w.set_value("t.u16", scalar(ValueType::UINT16, 700, 700, 0));
  w.set_value("t.i16", scalar(ValueType::INT16, 0, -700, 0));
  w.set_value("t.i64", scalar(ValueType::INT64, 0, -70000000000, 0));
  w.set_value("t.f64", scalar(ValueType::FLOAT64, 0, 0, 2.5));
  w.set_value("t.nested",
              array(ValueType::ARRAY, {array(ValueType::UINT8, {scalar(ValueType::UINT8, 1, 1, 1)}),
                                       array(ValueType::STRING, {})}));
  w.add_tensor("token_embd.weight", {4, 2}, GgmlType::F32, std::vector<uint8_t>(32, 1));
  return w;
}

GgufWriter every_tensor_type() {
  GgufWriter w;
  w.set_u32("general.alignment", 64);
  for (uint32_t id = 0; id < 64; ++id) {
    std::optional<GgmlTypeInfo> info = ggml_type_info(id);
    if (!info) continue;
    w.add_tensor(std::string("blk.0.") + info->name, {info->block_elems, 1}, static_cast<GgmlType>(id),
                 std::vector<uint8_t>(info->block_bytes, 0x11));
  }
  return w;
}

Value shrink(const Value& v) {
  Value out = v;
  if (v.type == ValueType::ARRAY) {
    out.elems.clear();
    for (size_t k = 0; k < v.elems.size() && k < 4; ++k) out.elems.push_back(shrink(v.elems[k]));
  }
  if (out.s.size() > 64) out.s.resize(64);
  return out;
}

GgufWriter shrunk_copy(const GgufFile& f) {
  GgufWriter w;
  for (const auto& [key, v] : f.metadata()) w.set_value(key, shrink(v));
  for (const TensorInfo& t : f.tensors()) {
    int64_t block = ggml_block_elems(t.type);
    std::vector<int64_t> ne(t.ne.size(), 1);
    ne[0] = block;
    w.add_tensor(t.name, ne, t.type, std::vector<uint8_t>(ggml_row_bytes(t.type, block), 0x22));
  }
  return w;
}

void save(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* out = std::fopen(path.c_str(), "wb");
  if (!out || std::fwrite(bytes.data(), 1, bytes.size(), out) != bytes.size() || std::fclose(out) != 0) {
    throw std::runtime_error("cannot write " + path);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR [REAL.gguf ...]\n", argv[0]);
    return 2;
  }
  try {
    std::string dir = argv[1];
    std::vector<uint8_t> values = every_value_type().to_bytes();
    save(dir + "/values.gguf", values);
    values[4] = 2;  // the same file as GGUF v2 (identical layout)
    save(dir + "/values-v2.gguf", values);
    save(dir + "/types.gguf", every_tensor_type().to_bytes());
    save(dir + "/empty.gguf", GgufWriter().to_bytes());
    for (int k = 2; k < argc; ++k) {
      auto f = GgufFile::open(argv[k]);
      std::string base = argv[k];
      base = base.substr(base.find_last_of('/') + 1);
      save(dir + "/shrunk-" + base, shrunk_copy(*f).to_bytes());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gguf_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
