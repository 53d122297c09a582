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

const float* ClampedLinear::clamp_input(float* x, int64_t rows, int64_t ldx, std::vector<float>& scratch,
                                        int64_t* ld) const {
  *ld = ldx;
  if (!input.active()) return x;
  if (clamp_in_place) {
    input.apply(x, rows, w.in, ldx);
    return x;
  }
  scratch.resize(size_t(rows * w.in));
  for (int64_t r = 0; r < rows; ++r) std::copy(x + r * ldx, x + r * ldx + w.in, scratch.data() + r * w.in);
  input.apply(scratch.data(), rows, w.in, w.in);
  *ld = w.in;
  return scratch.data();
}

void ClampedLinear::forward(float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                            ThreadPool* pool) const {
  std::vector<float> scratch;
  int64_t ld = 0;
  const float* in = clamp_input(x, rows, ldx, scratch, &ld);
  encoder_matmul(w, in, rows, ld, y, ldy, pool);
  output.apply(y, rows, w.out, ldy);
}

ClampedLinear load_clamped_linear(const MmprojFile& f, const std::string& base, int64_t in, int64_t out,
                                  bool clamps_allowed) {
  ClampedLinear l;
  l.name = base;
  l.w = f.matrix(base + ".weight", in, out);
  l.clamp_in_place = f.clamp_semantics() == ClampSemantics::kLlamaCppInPlace;
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
