#include "model/batch.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gem4 {

std::vector<MicroBatchPlan> plan_batch(const Batch& batch, int ubatch, const ModelConfig& c, const PlanSwitches& sw) {
  std::vector<MicroBatchPlan> plans;
  ubatch = std::max(1, ubatch);
  for (int first = 0; first < int(batch.size());) {
    MicroBatchPlan p;
    p.first = first;
    p.count = std::min<int>(ubatch, int(batch.size()) - first);
    // A bidirectional span (an image) must be decoded in one micro-batch: end this one before it.
    const int end = first + p.count;
    if (end < int(batch.size()) && batch[end].span >= 0 && batch[end - 1].span == batch[end].span &&
        batch[end - 1].seq == batch[end].seq) {
      int start = end - 1;
      while (start > first && batch[start - 1].span == batch[end].span &&
             batch[start - 1].seq == batch[end].seq)
        --start;
      if (start == first)
        throw std::invalid_argument("batch rows " + std::to_string(first) +
                                    "..: an image span longer than the micro-batch (" + std::to_string(ubatch) +
                                    " rows)");
      p.count = start - first;
    }
    first += p.count;
    for (int i = 0; i < p.count; ++i) {
      const BatchRow& r = batch[p.first + i];
      if (r.logits || r.hidden) p.keep.push_back(i);
    }
    if (sw.prune && c.n_kv_shared > 0) {
      // The optimal cut: inside the last KV-owning layer, after its K/V write; the simple one: at the
      // input of the first shared layer.
      p.cut = sw.optimal_cut ? StackPoint{c.prune_layer(), true} : StackPoint{c.first_shared, false};
    } else {
      p.cut = StackPoint{c.n_layer, false};
    }
    // A layer reads its per-layer input after any K/V write, so from the cut layer on only kept rows need it.
    p.ple_split = sw.ple_crop ? p.cut.layer : c.n_layer;
    plans.push_back(std::move(p));
  }
  return plans;
}

}  // namespace gem4
