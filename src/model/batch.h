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
};
using Batch = std::vector<BatchRow>;

struct PlanSwitches {
  bool prune = true;      // drop rows without outputs right after the last KV-owning layer's K/V write
  bool mask_crop = true;  // attention visits only the keys a row can see (window band / causal prefix)
  bool ple_crop = true;   // PLE context projection of tail layers only for kept rows
  bool optimal_cut = true;  // cut inside layer K-1 (after its K/V write) rather than at the input of layer K
  // Numerics, not plan: GELU by the exact tanh formula instead of llama.cpp's f16 table (ops.h).
  bool exact_gelu = false;
};

struct MicroBatchPlan {
  int first = 0;           // first row of the batch
  int count = 0;           // rows in this micro-batch
  std::vector<int> keep;   // rows (local index) that need an output, in order
  int cut_layer = 0;       // layer where rows are pruned to `keep` (n_layer: only before the head)
  bool cut_after_kv = true;  // prune inside cut_layer after its K/V write (else at its input)
  bool has_outputs() const { return !keep.empty(); }
};

std::vector<MicroBatchPlan> plan_batch(const Batch& batch, int ubatch, const ModelConfig& c, const PlanSwitches& sw);

}  // namespace gem4
