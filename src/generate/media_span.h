// Media in a sequence's history: a run of soft-token rows (an image's or an audio clip's projector
// output, media/vision_encoder.h, media/audio_encoder.h) at token positions [first, first + count).
// The token history holds the <pad> id (0) there, the per-layer-embedding row llama.cpp gives soft
// tokens; the rows' input embeddings come from `embd`. An image's rows attend to each other
// (bidirectional, one micro-batch); audio rows are causal.
//
// Prefix reuse compares token ids, which are all <pad> here, so it also compares the spans: a cached
// prefix is reused only up to the first span whose content (hash) or place differs.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace gem4::generate {

struct MediaSpan {
  int first = 0;                                   // position of the first soft token in the sequence
  int count = 0;                                   // soft tokens
  bool bidirectional = false;                      // an image: its rows see each other
  std::shared_ptr<const std::vector<float>> embd;  // count x d_model, row-major
  uint64_t hash = 0;  // of the content (the embeddings' bytes): what prefix reuse compares

  bool same_as(const MediaSpan& o) const {
    return first == o.first && count == o.count && bidirectional == o.bidirectional && hash == o.hash;
  }
};

// The placeholder id of soft-token positions in the token history (<pad>).
inline constexpr int32_t kMediaPlaceholderToken = 0;

// FNV-1a over the embeddings' bytes.
uint64_t media_hash(const std::vector<float>& embd);

// How much of a cached history holding `cached` spans can be reused for a prompt with `wanted` spans,
// given that their tokens agree on the first `n`: n, or less where a span differs.
int media_common_prefix(const std::vector<MediaSpan>& cached, const std::vector<MediaSpan>& wanted, int n);

// The token history as the prefix store and the prompt cache on disk key it: each soft-token position carries
// an id made from its span's content hash, place and kind and its index in the span, with the sign bit set so
// that it is never a vocabulary id. A stored chunk holding media rows is then found only by a prompt with the
// same media at the same place (a chunk's rows depend on every position before it, and an image's on
// all of the image). Positions before the first span keep their token ids, so text-only chunks are
// shared with prompts without media.
std::vector<int32_t> media_keyed_tokens(const std::vector<int32_t>& tokens,
                                        const std::vector<MediaSpan>& spans);

}  // namespace gem4::generate
