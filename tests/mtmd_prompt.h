// The text prompts of llama.cpp's multimodal reference cases (../shared/testdata/mtmd-ref/dumps/*/
// info.json) as batch rows, for the tests that compare the text model's logits with media in the
// prompt (media_prompt_test.cpp: images, audio_prompt_test.cpp: audio).
#pragma once
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/thread_pool.h"
#include "model/batch.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "test_util.h"

namespace gem4::test {

inline nlohmann::json mtmd_info(const std::string& id) {
  std::ifstream f(mtmd("dumps/" + id + "/info.json"));
  nlohmann::json j;
  f >> j;
  return j;
}

// Text ids, then the media's soft tokens (`span` -1: causal rows; 0: one span whose rows see each
// other), then the text after it. Soft-token rows carry <pad> (id 0) as their per-layer-embedding
// token. Logits for the rows of the last text chunk when `tail`, else for the last row only.
inline Batch mtmd_prompt(const nlohmann::json& info, const std::vector<float>& embd, int d, bool tail,
                         int span) {
  Batch b;
  int32_t pos = 0;
  const auto& chunks = info["chunks"];
  for (size_t c = 0; c < chunks.size(); ++c) {
    const auto& ch = chunks[c];
    if (ch["type"] == "text") {
      for (int id : ch["ids"].get<std::vector<int>>()) {
        BatchRow r;
        r.token = id;
        r.pos = pos++;
        r.logits = tail && c + 1 == chunks.size();
        b.push_back(r);
      }
    } else {
      const int n = ch["n_tokens"].get<int>();
      for (int i = 0; i < n; ++i) {
        BatchRow r;
        r.token = 0;
        r.pos = pos++;
        r.embd = embd.data() + size_t(i) * d;
        r.span = span;
        b.push_back(r);
      }
    }
  }
  b.back().logits = true;
  return b;
}

// One sequence, F32 KV, micro-batches of `ubatch` rows.
inline ForwardOutputs run_prompt(const Model& m, const Batch& b, int ubatch, ThreadPool* pool,
                                 PlanSwitches sw = {}) {
  KvCache kv(m.config, 256, 1, ubatch, KvType::F32);
  Forward f(m, pool);
  f.ubatch = ubatch;
  f.switches = sw;
  ForwardOutputs out;
  f.run(b, kv, out);
  return out;
}

}  // namespace gem4::test
