#include "media/clamped_linear.h"

#include <algorithm>

#include "media/encoder_matmul.h"
#include "media/mmproj_file.h"

namespace gem4::media {

void ClampRange::apply(float* x, int64_t rows, int64_t cols, int64_t ld) const {
  if (!active()) return;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * ld;
    // The order of ggml_clamp: the upper bound first, then the lower.
    for (int64_t i = 0; i < cols; ++i) row[i] = std::max(std::min(row[i], hi), lo);
  }
}

void ClampedLinear::forward(float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                            ThreadPool* pool) const {
  input.apply(x, rows, w.in, ldx);
  encoder_matmul(w, x, rows, ldx, y, ldy, pool);
  output.apply(y, rows, w.out, ldy);
}

ClampedLinear load_clamped_linear(const MmprojFile& f, const std::string& base, int64_t in, int64_t out,
                                  bool clamps_allowed) {
  ClampedLinear l;
  l.name = base;
  l.w = f.matrix(base + ".weight", in, out);
  const auto bound = [&](const char* suffix, float& dst) {
    const std::string name = base + "." + suffix;
    if (!f.find_tensor(name)) return;
    if (!clamps_allowed) f.fail_tensor(name, "is a clamp scalar on a linear that has none in Gemma 4");
    dst = f.scalar(name);
  };
  bound("input_min", l.input.lo);
  bound("input_max", l.input.hi);
  bound("output_min", l.output.lo);
  bound("output_max", l.output.hi);
  return l;
}

}  // namespace gem4::media
