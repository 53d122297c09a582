// Random projector tensors for the synthetic towers (audio_synthetic.h, vision_synthetic.h): values
// drawn per tensor from a seeded stream (the tensor's name and the seed pick it, so a tower's weights
// do not depend on what else is in the file), stored as the tower's matrix type, and the 1-element
// clamp scalars of Gemma 4's clippable linears. The bytes are produced when the writer writes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/ggml_types.h"

namespace gem4::gguf {
class GgufWriter;
}

namespace gem4::media {

class SyntheticTensors {
 public:
  // `matrix_type`: the type of the 2-D weights matrix() adds; `clamps`: whether clamped linears get
  // their four scalars.
  SyntheticTensors(gguf::GgufWriter& w, uint64_t seed, GgmlType matrix_type, bool clamps)
      : w_(w), seed_(seed), matrix_type_(matrix_type), clamps_(clamps) {}

  // Values uniform in [center - spread, center + spread], stored as `type` (rows of ne[0]).
  void tensor(const std::string& name, const std::vector<int64_t>& ne, GgmlType type, double center,
              double spread);
  // BASE.weight with `in` inputs and `out` outputs, uniform with variance 1/in, of the matrix type;
  // with `clamped` (and clamps on) also BASE.input_min/input_max (-3, 3) and output_min/output_max
  // (-4, 4): bounds that cut the tails of O(1) activations, so the clamps act.
  void matrix(const std::string& base, int64_t in, int64_t out, bool clamped);
  // A norm weight of n values near 1 (F32, as the converter keeps 1-D tensors).
  void norm(const std::string& name, int64_t n);
  void scalar(const std::string& name, float v);

 private:
  gguf::GgufWriter& w_;
  uint64_t seed_;
  GgmlType matrix_type_;
  bool clamps_;
};

}  // namespace gem4::media
