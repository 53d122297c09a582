// What the caller asks the forward pass to compute, and the execution plan derived from it.
//
// A Batch is a list of rows (token, position, sequence, and which outputs the row needs). The plan
// splits it into micro-batches and, for each, decides which rows survive the KV-shared tail (`keep`):
// only rows that need logits or a hidden state. Each optimisation is a switch in PlanSwitches so that
// `gem4 bench` can measure what it buys and tests can compare the plans.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace gem4 {

struct BatchRow {
  int32_t token = 0;
  int32_t pos = 0;
  int32_t seq = 0;
  bool logits = false;  // the caller wants this row's logits
  bool hidden = false;  // the caller wants this row's post-final-norm hidden state (MTP drafter)
  // A media row (an image or audio soft token): its input embedding (d_model floats, owned by the
  // caller, used as it is: not scaled by sqrt(d_model) as token embeddings are); `token` then only picks
  // the per-layer-embedding row, the <pad> token (0) for soft tokens as llama.cpp does.
  const float* embd = nullptr;
  // Rows of one sequence with the same span >= 0 (consecutive rows: one image) see each other: causal
  // masking is off among them (the sliding window still hides keys too far back). Audio stays causal
  // (-1). A span is never split between micro-batches.
  int32_t span = -1;
};
using Batch = std::vector<BatchRow>;

struct PlanSwitches {
  bool prune = true;      // drop rows without outputs right after the last KV-owning layer's K/V write
  bool mask_crop = true;  // attention visits only the keys a row can see (window band / causal prefix)
  bool ple_crop = true;   // PLE context projection of tail layers only for kept rows
  bool optimal_cut = true;  // cut inside layer K-1 (after its K/V write) rather than at the input of layer K
  // Numerics, not plan: GELU by the exact tanh formula instead of llama.cpp's f16 table (ops.h).
  bool exact_gelu = false;
  // Numerics: products with F32 weights and attention over an F32 cache in llama.cpp's summation
  // order (kernels/llama_order.h), as its CPU backend runs a micro-batch of the same rows: its logits
  // to the last bits or so, far slower. Other weight and cache types are unaffected.
  bool llama_f32_order = false;
};

// A point in the decoder stack: the input of `layer`, or inside it right after its K/V write (spec
// 3.2). {n_layer, false} is the end of the stack, before the head.
struct StackPoint {
  int layer = 0;
  bool after_kv = false;
  // The stack as a sequence of half layers: 2l is layer l up to its K/V write, 2l + 1 the rest of it.
  int half() const { return 2 * layer + int(after_kv); }
};

// A micro-batch runs in two stages with the pruning cut between them: every row runs the stack up to
// `cut` (the cut never comes before the last K/V write: spec 3.1), then only the rows of `keep` run
// from `cut` through the head. A micro-batch without kept rows ends at the cut.
struct MicroBatchPlan {
  int first = 0;           // first row of the batch
  int count = 0;           // rows in this micro-batch
  std::vector<int> keep;   // rows (local index) that need an output, in order
  StackPoint cut;          // {n_layer, false}: no pruning inside the stack, only before the head
  int ple_split = 0;       // per-layer inputs of layers >= ple_split are computed after the cut, for `keep`
  bool has_outputs() const { return !keep.empty(); }
};

std::vector<MicroBatchPlan> plan_batch(const Batch& batch, int ubatch, const ModelConfig& c, const PlanSwitches& sw);

}  // namespace gem4
