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
      p.cut_layer = sw.optimal_cut ? c.prune_layer() : c.first_shared;
      p.cut_after_kv = sw.optimal_cut;
    } else {
      p.cut_layer = c.n_layer;
      p.cut_after_kv = false;
    }
    plans.push_back(std::move(p));
  }
  return plans;
}

}  // namespace gem4
