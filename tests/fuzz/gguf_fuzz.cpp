// libFuzzer target for the GGUF reader (built by scripts/fuzz.sh, not part of gem4_tests).
// Any input must either parse or throw GgufError. A parsed file must also survive a round trip
// through the writer: re-parsing what the writer makes must give the same metadata and tensors. So
// the fuzzer checks the reader's validation and the writer/reader agreement at the same time.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"

using namespace gem4;
using namespace gem4::gguf;

namespace {

// Reads every field a parsed value holds, so that ASan sees any bad memory the parser left behind.
uint64_t touch(const Value& v) {
  uint64_t h = static_cast<uint64_t>(v.type) + v.u + static_cast<uint64_t>(v.i) + v.s.size();
  if (!v.s.empty()) h += static_cast<uint8_t>(v.s.front()) + static_cast<uint8_t>(v.s.back());
  if (v.is_integer() || v.type == ValueType::BOOL) {
    try {
      h += static_cast<uint64_t>(v.as_int());
    } catch (const GgufError&) {
    }
  }
  if (v.is_integer() || v.is_float()) h += std::isnan(v.as_double()) ? 1 : 0;
  for (const Value& e : v.elems) h += touch(e);
  return h;
}

bool same_value(const Value& a, const Value& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case ValueType::FLOAT32:
    case ValueType::FLOAT64:
      return std::memcmp(&a.f, &b.f, sizeof a.f) == 0;
    case ValueType::STRING:
      return a.s == b.s;
    case ValueType::ARRAY:
      if (a.elem_type != b.elem_type || a.elems.size() != b.elems.size()) return false;
      for (size_t k = 0; k < a.elems.size(); ++k) {
        if (!same_value(a.elems[k], b.elems[k])) return false;
      }
      return true;
    default:
      return a.u == b.u && a.i == b.i;
  }
}

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void round_trip(const GgufFile& f, size_t input_size) {
  // Tensors may overlap in a hostile file; skip copies far larger than the input itself.
  uint64_t total = 0;
  for (const TensorInfo& t : f.tensors()) total += t.nbytes;
  if (total > 4 * input_size + (1u << 20) || f.alignment() > (1u << 30)) return;

  GgufWriter w;
  for (const auto& [key, v] : f.metadata()) w.set_value(key, v);
  for (const TensorInfo& t : f.tensors()) {
    const uint8_t* p = f.tensor_data(t);
    w.add_tensor(t.name, t.ne, t.type, std::vector<uint8_t>(p, p + t.nbytes));
  }
  std::vector<uint8_t> bytes = w.to_bytes();
  auto g = GgufFile::from_memory(bytes.data(), bytes.size(), "roundtrip.gguf");
  check(g->metadata().size() == f.metadata().size());
  for (size_t k = 0; k < f.metadata().size(); ++k) {
    check(g->metadata()[k].first == f.metadata()[k].first);
    check(same_value(g->metadata()[k].second, f.metadata()[k].second));
  }
  check(g->alignment() == f.alignment());
  check(g->tensors().size() == f.tensors().size());
  for (size_t k = 0; k < f.tensors().size(); ++k) {
    const TensorInfo& a = f.tensors()[k];
    const TensorInfo& b = g->tensors()[k];
    check(a.name == b.name && a.ne == b.ne && a.type == b.type && a.nbytes == b.nbytes);
    check(a.nbytes == 0 || std::memcmp(f.tensor_data(a), g->tensor_data(b), a.nbytes) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<GgufFile> f;
  try {
    f = GgufFile::from_memory(data, size, "fuzz.gguf");
  } catch (const GgufError& e) {
    check(std::strstr(e.what(), "fuzz.gguf") != nullptr);
    return 0;
  }
  volatile uint64_t sink = f->version() + f->alignment() + f->data_offset();
  for (const auto& [key, v] : f->metadata()) {
    sink = sink + key.size() + touch(v) + v.to_string(4).size();
    check(f->find(key) == &v);
    // The typed getters either answer or throw GgufError; nothing else.
    try {
      sink = sink + static_cast<uint64_t>(f->get_int(key));
    } catch (const GgufError&) {
    }
    try {
      sink = sink + static_cast<uint64_t>(f->get_float(key) != 0);
    } catch (const GgufError&) {
    }
    try {
      sink = sink + f->get_bool(key);
    } catch (const GgufError&) {
    }
    try {
      sink = sink + f->get_string(key).size();
    } catch (const GgufError&) {
    }
    try {
      sink = sink + f->get_int_array(key).size();
    } catch (const GgufError&) {
    }
    try {
      sink = sink + f->get_float_array(key).size();
    } catch (const GgufError&) {
    }
    try {
      sink = sink + f->get_string_array(key).size();
    } catch (const GgufError&) {
    }
  }
  for (const TensorInfo& t : f->tensors()) {
    check(f->find_tensor(t.name) == &t);
    check(t.ne.size() >= 1 && t.ne.size() <= 4);
    check(t.offset % f->alignment() == 0);
    check(f->data_offset() + t.offset + t.nbytes <= f->file_size());
    std::optional<GgmlTypeInfo> info = ggml_type_info(static_cast<uint32_t>(t.type));
    check(info.has_value());
    uint64_t rows = t.ne[0] == 0 ? 0 : static_cast<uint64_t>(t.n_elements() / t.ne[0]);
    check(t.nbytes == ggml_row_bytes(t.type, t.ne[0]) * rows);
    const uint8_t* p = f->tensor_data(t);
    if (t.nbytes) sink = sink + p[0] + p[t.nbytes - 1];
  }
  (void)sink;
  try {
    round_trip(*f, size);
  } catch (const GgufError&) {
    __builtin_trap();  // the writer must accept anything the reader accepted
  }
  return 0;
}
