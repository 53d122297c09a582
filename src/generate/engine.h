// The decoding step: one forward pass over every sequence that has work (generate/sequence.h).
//
// A step batches, for each generating sequence, the verify rows [last, d1..dk] of its draft (k = 0
// for plain decoding, so plain decoding is the speculative step with no drafter), plus one chunk of
// at most one prompt. After the pass each generating sequence accepts the longest passing prefix of
// its draft and one more token (generate/speculative.h gives the rule), rolls the rejected rows back
// and lists what it emitted; a prompt that ended samples its first token.
//
// Prompts start through start(), which reuses the longest cached prefix it can find: the sequence's
// own cells, another sequence's (server slots), the PrefixStore's chunks in memory, or the prompt
// cache on disk.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "generate/prefix_store.h"
#include "generate/sequence.h"
#include "model/forward.h"
#include "model/kv_cache.h"

namespace gem4::generate {

class PromptCacheDir;

// Where start() found the prefix it reused.
enum class PrefixSource { None, Own, OtherSequence, Store, Disk };
const char* prefix_source_name(PrefixSource s);

struct StartInfo {
  int reused = 0;  // prompt tokens whose K/V were not recomputed
  PrefixSource source = PrefixSource::None;
  int disk_tokens = 0;  // of those, read from the prompt cache on disk
};

class Engine {
 public:
  // store and disk may be null. They must outlive the engine.
  Engine(Forward& forward, KvCache& kv, PrefixStore* store = nullptr, PromptCacheDir* disk = nullptr);

  Forward& forward() { return forward_; }
  KvCache& kv() { return kv_; }
  PrefixStore* store() { return store_; }
  PromptCacheDir* disk() { return disk_; }
  void set_disk(PromptCacheDir* disk) { disk_ = disk; }

  // Makes `prompt` the sequence's tokens, reusing the longest prefix that `seq` itself, one of
  // `others` (read, never changed), the store or the disk cache can supply. The last prompt token is
  // always recomputed (its logits are needed). Resets the per-request state (stats, emitted, hidden);
  // the sampler, if any, accepts the prompt tokens when seq.penalize_prompt. Throws
  // std::invalid_argument for an empty prompt or one longer than the context. `media`: the prompt's
  // soft-token spans (generate/media_span.h); a prefix is reused only as far as the spans agree, and
  // the prefix store and disk cache (keyed on token ids) serve nothing past the first span.
  StartInfo start(Sequence& seq, const std::vector<int32_t>& prompt, std::span<Sequence* const> others = {},
                  const std::vector<MediaSpan>& media = {});

  // One forward pass: every sequence of `decoding` (each generating) drafts and verifies, and
  // `prefill` (if not null) processes its next `prefill_rows` prompt tokens. On an exception from the
  // pass the sequences involved are emptied (their cells may be half-written) and it is rethrown.
  void step(std::span<Sequence* const> decoding, Sequence* prefill = nullptr, int prefill_rows = 0);

  // Runs the rest of seq's prompt, ubatch rows per step.
  void prefill(Sequence& seq);

  // Keeps the first n tokens of a generating sequence's history (a stop inside a step's emitted
  // tokens: the cache then holds the tokens before the last one kept, which becomes `last`).
  void keep(Sequence& seq, int n);
  // Ends generation: the sequence holds exactly its cached tokens (the unfed `last` is dropped).
  void finish(Sequence& seq);
  // Forgets the sequence's cells and tokens.
  void clear(Sequence& seq);

  // The outputs of the last step's forward pass (row order: the decoding sequences' verify rows in
  // the order given, then the prompt chunk).
  const ForwardOutputs& last_outputs() const { return out_; }

  // Saves the cached prompt prefix of seq to the disk cache (whole chunks from the store).
  void save_prompt(const Sequence& seq, int n_prompt);

 private:
  int32_t choose(Sequence& seq, const float* logits);
  void accept_verify(Sequence& seq, int first_row, int n_before, double draft_s, double verify_s);

  Forward& forward_;
  KvCache& kv_;
  PrefixStore* store_;
  PromptCacheDir* disk_;
  Batch batch_;
  ForwardOutputs out_;
};

}  // namespace gem4::generate
