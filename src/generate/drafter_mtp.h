// The MTP drafter: a Gemma 4 assistant (model/assistant.h) chained over the target's KV cache and
// hidden state, as llama.cpp's draft-mtp does (spec 5.2). Step 1 reads (last, the target's hidden
// state); step i+1 reads (draft i, step i's h_next). Every step uses the position of `last`.
//
// Greedy drafts take the assistant's argmax. Sampled drafts (temperature > 0) draw from
// q = softmax(logits / T) over the assistant's top_k logits (10, as llama.cpp's MTP sampler); that q is
// what the verifier's acceptance rule divides by. With p_min > 0 drafting stops early when the
// top candidate's probability under softmax(logits) (top_k-truncated) falls below p_min.
#pragma once
#include <memory>
#include <vector>

#include "generate/drafter.h"
#include "model/assistant.h"

namespace gem4::generate {

class MtpDrafter : public Drafter {
 public:
  MtpDrafter(const Model& assistant, const Model& target, ThreadPool* pool);
  const char* name() const override { return "mtp"; }
  bool needs_hidden() const override { return true; }
  void draft(const DraftRequest& req, Draft& out) override;

  Assistant& assistant() { return asst_; }
  int top_k = 10;
  float p_min = 0.0f;

 private:
  Assistant asst_;
  std::vector<float> logits_, h_, h_next_;
};

}  // namespace gem4::generate
