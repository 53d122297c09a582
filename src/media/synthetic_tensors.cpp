#include "media/synthetic_tensors.h"

#include <cmath>
#include <cstring>

#include "gguf/gguf_writer.h"
#include "tensor/quant.h"

namespace gem4::media {

namespace {

// splitmix64: a fast, seedable stream of uniform bits (hundreds of millions of weights at E2B size).
struct Uniform {
  uint64_t state;
  explicit Uniform(uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ull + 1) {}
  double next() {  // in [-1, 1)
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return double(z >> 11) * (2.0 / 9007199254740992.0) - 1.0;
  }
};

uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (char c : name) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return h;
}

}  // namespace

void SyntheticTensors::tensor(const std::string& name, const std::vector<int64_t>& ne, GgmlType type,
                              double center, double spread) {
  const uint64_t seed = name_seed(seed_, name);
  const int64_t row = ne[0];
  w_.add_tensor_lazy(name, ne, type, [=](uint8_t* dst, size_t nbytes) {
    Uniform u(seed);
    const size_t row_bytes = ggml_row_bytes(type, row);
    std::vector<float> tmp(size_t(row), 0.0f);
    for (size_t off = 0; off + row_bytes <= nbytes; off += row_bytes) {
      for (float& v : tmp) v = float(center + spread * u.next());
      if (type == GgmlType::F32)
        std::memcpy(dst + off, tmp.data(), row_bytes);
      else
        quantize_row(type, tmp.data(), dst + off, row);
    }
  });
}

void SyntheticTensors::matrix(const std::string& base, int64_t in, int64_t out, bool clamped) {
  tensor(base + ".weight", {in, out}, matrix_type_, 0.0, std::sqrt(3.0 / double(in)));
  if (!clamped || !clamps_) return;
  scalar(base + ".input_min", -3.0f);
  scalar(base + ".input_max", 3.0f);
  scalar(base + ".output_min", -4.0f);
  scalar(base + ".output_max", 4.0f);
}

void SyntheticTensors::norm(const std::string& name, int64_t n) {
  tensor(name, {n}, GgmlType::F32, 1.0, 0.2);
}

void SyntheticTensors::scalar(const std::string& name, float v) {
  std::vector<uint8_t> b(4);
  std::memcpy(b.data(), &v, 4);
  w_.add_tensor(name, {1}, GgmlType::F32, std::move(b));
}

}  // namespace gem4::media
