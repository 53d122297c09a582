// Classic draft-model speculation: a smaller Gemma 4 with the same vocabulary runs its own Session,
// kept in step with the target's sequence. Each round it catches up on the tokens accepted since the
// last round (rejected drafts are rolled back through Session::set_tokens' prefix reuse, which
// truncates its KV cache) and then decodes its proposals one at a time.
//
// Greedy drafts take its argmax; sampled drafts draw from softmax(logits / T) over its top_k logits.
#pragma once
#include <vector>

#include "generate/drafter.h"
#include "generate/session.h"

namespace gem4::generate {

class ModelDrafter : public Drafter {
 public:
  // Throws std::invalid_argument when the vocabularies differ.
  ModelDrafter(const Model& draft_model, const Model& target, ThreadPool* pool, const SessionOptions& opt);
  const char* name() const override { return "draft"; }
  void draft(const DraftRequest& req, Draft& out) override;
  void reset() override { session_.reset(); }

  Session& session() { return session_; }
  int top_k = 10;

 private:
  Session session_;
  std::vector<int32_t> context_;
};

}  // namespace gem4::generate
