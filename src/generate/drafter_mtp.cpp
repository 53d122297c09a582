#include "generate/drafter_mtp.h"

namespace gem4::generate {

MtpDrafter::MtpDrafter(const Model& assistant, const Model& target, ThreadPool* pool)
    : asst_(assistant, target, pool) {}

void MtpDrafter::draft(const DraftRequest& req, Draft& out) {
  out.source = name();
  if (!req.hidden || req.n_max <= 0 || req.last_pos() < 1) return;
  const int V = asst_.n_vocab(), db = asst_.d_backbone();
  logits_.resize(V);
  h_.assign(req.hidden, req.hidden + db);
  h_next_.resize(db);
  int32_t tok = req.last();
  const int32_t pos = req.last_pos();
  const int32_t seq = req.seq;
  for (int i = 0; i < req.n_max; ++i) {
    asst_.step(&tok, &pos, &seq, h_.data(), 1, *req.target_kv, logits_.data(), h_next_.data());
    int32_t next;
    if (req.temperature > 0) {
      std::vector<TokenProb> q = proposal_distribution(logits_.data(), V, req.temperature, top_k);
      next = draw(q, *req.rng);
      out.q.resize(out.tokens.size());
      out.q.push_back(std::move(q));
    } else {
      next = argmax_token(logits_.data(), V);
    }
    if (p_min > 0) {
      const std::vector<TokenProb> conf = proposal_distribution(logits_.data(), V, 1.0f, top_k);
      if (conf.front().p < p_min) {
        if (!out.q.empty()) out.q.resize(out.tokens.size());
        break;
      }
    }
    out.tokens.push_back(next);
    tok = next;
    std::swap(h_, h_next_);
  }
}

}  // namespace gem4::generate
