// One sequence: its place in a KV cache, its token history, its sampler and its drafter, owned in one
// place. Every front end (gem4 run / chat through Session and generate(), the server's slots, the
// bench) drives sequences through the same Engine::step (generate/engine.h).
//
// The token history is one vector. Its first n_cached tokens have their K/V in the cache (always
// equal to KvCache::seq_len(id)); the rest is either the part of the prompt still to be processed
// or, while generating, the one token sampled last (`last`), which the next step feeds.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "generate/constraint.h"
#include "generate/drafter.h"
#include "generate/media_span.h"
#include "generate/sampler.h"
#include "generate/speculative.h"

namespace gem4::generate {

class Sequence {
 public:
  explicit Sequence(int id = 0) : id(id) {}

  int id = 0;                   // sequence id in the KvCache
  std::vector<int32_t> tokens;  // the sequence: cached tokens, then the prompt's rest or `last`
  std::vector<MediaSpan> media;  // soft-token spans of `tokens` (their ids are the <pad> placeholder)
  int n_cached = 0;             // == kv.seq_len(id)
  bool generating = false;      // tokens.back() was sampled and is not in the cache yet
  // After the prompt's last token, sample the first token (generation) or only keep the prompt's
  // last logits in `logits` (Session::set_tokens: scoring, a draft model catching up).
  bool sample_after_prompt = true;

  std::optional<Sampler> sampler;  // empty: greedy argmax without penalties
  // Whether the sampler's penalties also see the prompt: yes in gem4 run / chat (as llama.cpp's CLI),
  // no in the server (OpenAI's penalties count the completion's tokens).
  bool penalize_prompt = true;
  // A grammar the generated tokens must follow (null: none). The engine masks the logits with it
  // before the sampler chain and advances it with every emitted token (generate/constraint.h).
  std::shared_ptr<GrammarConstraint> constraint;

  // Speculation: the drafter (owned by the front end; null for plain decoding), the draft length.
  void speculate(Drafter* drafter, const SpecOptions& opt, int max_ubatch);
  Drafter* drafter() const { return drafter_; }
  DraftLengthController& length() { return length_; }
  bool wants_hidden() const { return keep_hidden || (drafter_ && drafter_->needs_hidden()); }
  bool keep_hidden = false;  // keep the hidden state even without a drafter that reads it

  // What the last step gave: the tokens it emitted (accepted drafts and one sampled token), the last
  // row's logits (only at the end of a prompt with sample_after_prompt = false), the hidden state of
  // the row that produced `last` (when the drafter needs it).
  std::vector<int32_t> emitted;
  std::vector<float> logits;
  std::vector<float> hidden;
  Draft draft;
  std::mt19937_64 rng{0x9e3779b97f4a7c15ull};
  SpecStats stats;  // since the last start(): rounds, drafts, acceptance, times

  bool prefilling() const { return !generating && n_cached < int(tokens.size()); }
  int prompt_left() const { return generating ? 0 : int(tokens.size()) - n_cached; }
  // The tokens whose K/V are cached.
  const int32_t* cached() const { return tokens.data(); }

 private:
  Drafter* drafter_ = nullptr;
  DraftLengthController length_{0, false};
};

}  // namespace gem4::generate
