#include "generate/drafter_model.h"

#include <stdexcept>
#include <string>

#include "gguf/gguf.h"

namespace gem4::generate {

ModelDrafter::ModelDrafter(const Model& draft_model, const Model& target, ThreadPool* pool, const SessionOptions& opt)
    : session_(draft_model, pool, opt) {
  if (draft_model.config.arch != "gemma4")
    throw std::invalid_argument("draft model " + (draft_model.file ? draft_model.file->path() : std::string()) +
                                ": architecture '" + draft_model.config.arch + "' is not gemma4");
  if (draft_model.weights.token_embd.out != target.weights.token_embd.out)
    throw std::invalid_argument("draft model " + (draft_model.file ? draft_model.file->path() : std::string()) +
                                ": vocabulary of " + std::to_string(draft_model.weights.token_embd.out) +
                                " tokens differs from the target's " + std::to_string(target.weights.token_embd.out));
}

void ModelDrafter::draft(const DraftRequest& req, Draft& out) {
  out.source = name();
  if (req.n_max <= 0) return;
  const int V = session_.n_vocab();
  // Catch up: reuses the cached prefix, rolls back what the target rejected, computes `last`.
  session_.set_tokens(*req.tokens);
  for (int i = 0; i < req.n_max; ++i) {
    int32_t next;
    if (req.temperature > 0) {
      std::vector<TokenProb> q = proposal_distribution(session_.logits(), V, req.temperature, top_k);
      next = draw(q, *req.rng);
      out.q.push_back(std::move(q));
    } else {
      next = argmax_token(session_.logits(), V);
    }
    out.tokens.push_back(next);
    if (i + 1 < req.n_max) session_.push(next);
  }
}

}  // namespace gem4::generate
