#include "model/batch.h"

#include <algorithm>

namespace gem4 {

std::vector<MicroBatchPlan> plan_batch(const Batch& batch, int ubatch, const ModelConfig& c, const PlanSwitches& sw) {
  std::vector<MicroBatchPlan> plans;
  ubatch = std::max(1, ubatch);
  for (int first = 0; first < int(batch.size()); first += ubatch) {
    MicroBatchPlan p;
    p.first = first;
    p.count = std::min<int>(ubatch, int(batch.size()) - first);
    for (int i = 0; i < p.count; ++i) {
      const BatchRow& r = batch[first + i];
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
