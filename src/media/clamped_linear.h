// Gemma 4's "clippable" linear layer of the projector towers: y = clamp(W * clamp(x, in), out), with
// the bounds in optional 1-element F32 tensors T.input_min, T.input_max, T.output_min, T.output_max
// beside T.weight (a missing one means no bound). E2B/E4B files carry them on the vision q/k/v/o and
// FFN linears and on most audio linears.
//
// Linears that read the same tensor each clamp it for themselves (ClampSemantics::kIndependent), or,
// as llama.cpp 3f545be did with an in-place ggml_clamp, see the input clamps of every linear executed
// before them (kLlamaCppInPlace; vision: q, then k, then v; FFN: gate, then up; audio attention: v,
// then k, then q). clamp_input() does either; call the linears sharing an input in llama.cpp's order
// on one buffer, and the in-place mode reproduces it.
#pragma once
#include <cfloat>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/matmul.h"

namespace gem4 {
class ThreadPool;
}

namespace gem4::media {

class MmprojFile;

struct ClampRange {
  float lo = -FLT_MAX;
  float hi = FLT_MAX;
  bool active() const { return lo != -FLT_MAX || hi != FLT_MAX; }
  void apply(float* x, int64_t rows, int64_t cols, int64_t ld) const;  // x = min(max(x, lo), hi)
};

struct ClampedLinear {
  std::string name;  // the weight's base name ("v.blk.0.attn_q")
  MatrixView w;      // w.in inputs, w.out outputs
  ClampRange input, output;
  bool clamp_in_place = false;  // ClampSemantics::kLlamaCppInPlace

  int64_t in() const { return w.in; }
  int64_t out() const { return w.out; }
  // x (rows x in, leading dimension ldx) clamped to `input`: x itself, clamped in place, or a copy in
  // `scratch` (rows x in, packed) when the clamps are independent and active.
  const float* clamp_input(float* x, int64_t rows, int64_t ldx, std::vector<float>& scratch,
                           int64_t* ld) const;
  // y: rows x out (ldy) = W clamp_input(x), then clamped to `output`. The product is encoder_matmul (the
  // kernel sets, in slices).
  void forward(float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy, ThreadPool* pool) const;
};

// Reads BASE.weight (shape [in, out]) and its optional clamp scalars. `clamps_allowed` false: a clamp
// scalar beside this weight is an error (llama.cpp ignores them there, so a file with them is not one
// gem4 knows).
ClampedLinear load_clamped_linear(const MmprojFile& f, const std::string& base, int64_t in, int64_t out,
                                  bool clamps_allowed = true);

}  // namespace gem4::media
