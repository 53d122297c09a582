// One sequence in a KV cache of its own: what gem4 run / chat, the bench and a draft model use. The
// sequence (generate/sequence.h) and the decoding step (generate/engine.h) are the server's too; a
// Session only owns the cache, the forward pass and, optionally, the prefix store beside them.
//
// A new prompt reuses the longest cached prefix (multi-turn chat; with a prefix store also one the
// sliding rings have moved past), and only new tokens are processed.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "generate/engine.h"
#include "generate/prefix_store.h"
#include "generate/sequence.h"
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
  // Bytes of K/V chunks kept to resume prefixes the rings moved past (0: no prefix store).
  size_t prefix_store_bytes = 0;
};

class Session {
 public:
  Session(const Model& model, ThreadPool* pool, const SessionOptions& opt);

  // Makes the sequence equal to `tokens`, reusing the common prefix with what is cached, and computes
  // the logits of the last token. Returns the number of tokens processed (the rest were reused).
  // Throws std::invalid_argument when the tokens do not fit the context. `media`: soft-token spans of
  // `tokens` (generate/media_span.h).
  int set_tokens(const std::vector<int32_t>& tokens, const std::vector<generate::MediaSpan>& media = {});
  // Appends tokens and computes the logits of the last one. Returns the number processed.
  int append(const std::vector<int32_t>& tokens);
  void push(int32_t token) { append({token}); }
  // Forgets the tokens after the first n (recomputing if the sliding windows cannot roll back).
  void truncate(int n);
  void reset();

  const float* logits() const { return seq_.logits.data(); }  // of the last token (n_vocab values)
  const float* hidden() const { return seq_.hidden.data(); }  // of the last token, with want_hidden
  // The cached tokens (outside generate(), every token of the sequence is cached).
  const std::vector<int32_t>& tokens() const { return seq_.tokens; }
  int n_ctx() const { return kv_.n_ctx(); }
  int n_vocab() const { return int(model_.weights.token_embd.out); }
  const Model& model() const { return model_; }
  Forward& forward() { return forward_; }
  KvCache& kv() { return kv_; }
  generate::Engine& engine() { return engine_; }
  generate::Sequence& sequence() { return seq_; }
  generate::PrefixStore* store() { return store_.get(); }
  // Speculative decoding for generate() on this session (drafter null: plain decoding).
  void speculate(generate::Drafter* drafter, const generate::SpecOptions& opt);
  bool want_hidden = false;  // set_tokens/append also keep the last token's hidden state

 private:
  void run_prompt();
  const Model& model_;
  KvCache kv_;
  Forward forward_;
  std::unique_ptr<generate::PrefixStore> store_;
  generate::Engine engine_;
  generate::Sequence seq_;
};

}  // namespace gem4
