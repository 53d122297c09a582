// One sequence being generated: its token history and KV cache. A new prompt reuses the longest
// prefix already in the cache (only new tokens are processed: multi-turn chat, server prefix reuse),
// and decoding appends one token at a time. Sampling and stopping belong to the caller.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace gem4 {

class ThreadPool;

struct SessionOptions {
  int n_ctx = 4096;
  int ubatch = 512;
  KvType kv_type = KvType::F16;
  PlanSwitches switches;
};

class Session {
 public:
  Session(const Model& model, ThreadPool* pool, const SessionOptions& opt);

  // Makes the sequence equal to `tokens`, reusing the common prefix with what is cached, and computes
  // the logits of the last token. Returns the number of tokens processed (the rest were reused).
  // Throws std::invalid_argument when the tokens do not fit the context.
  int set_tokens(const std::vector<int32_t>& tokens);
  // Appends tokens and computes the logits of the last one. Returns the number processed.
  int append(const std::vector<int32_t>& tokens);
  // Appends one generated token (decode step).
  void push(int32_t token) { append({token}); }
  // Forgets the tokens after the first n (recomputing if the sliding windows cannot roll back).
  void truncate(int n);
  void reset();

  const float* logits() const { return logits_.data(); }  // of the last token (n_vocab values)
  const float* hidden() const { return hidden_.data(); }  // post-norm hidden state of the last token
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int n_ctx() const { return kv_.n_ctx(); }
  int n_vocab() const { return int(model_.weights.token_embd.out); }
  const Model& model() const { return model_; }
  Forward& forward() { return forward_; }
  KvCache& kv() { return kv_; }
  bool want_hidden = false;  // also keep the hidden state of the last token (MTP drafting)

 private:
  const Model& model_;
  KvCache kv_;
  Forward forward_;
  std::vector<int32_t> tokens_;
  std::vector<float> logits_, hidden_;
};

}  // namespace gem4
