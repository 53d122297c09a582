// Media in a prompt: the chat format writes one placeholder token per medium (<|image|>, <|audio|>,
// text/chat_format.h); the model reads the begin marker, one row per soft token and the end marker
// there (<|image> ... <image|>, <|audio> ... <audio|>, as llama.cpp's mtmd and Gemma's processor do).
// This expands the placeholders of a tokenized prompt and gives the spans the engine decodes the soft
// tokens from (generate/media_span.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "generate/media_span.h"
#include "text/tokenizer.h"

namespace gem4::generate {

// One encoded medium: its soft-token embeddings (rows x d_model), from media/vision_encoder.h or
// media/audio_encoder.h.
struct MediaInput {
  bool image = true;  // false: audio
  std::shared_ptr<const std::vector<float>> embd;
  int rows = 0;
  uint64_t hash = 0;  // media_hash(*embd)
};

// A MediaInput over `embd` (rows x n_embd), hashed.
MediaInput make_media_input(bool image, std::vector<float> embd, int n_embd);

// Replaces, in order, the i-th <|image|> / <|audio|> placeholder of `tokens` by begin marker + rows
// <pad> tokens + end marker for media[i] (images take image placeholders, audio audio placeholders).
// Placeholders missing for some media are inserted after a leading BOS (or at the start). Throws
// std::invalid_argument when the vocabulary lacks the marker tokens or there are more placeholders
// than media.
std::vector<MediaSpan> expand_media(std::vector<int32_t>& tokens, const text::Tokenizer& tok,
                                    const std::vector<MediaInput>& media);

}  // namespace gem4::generate
