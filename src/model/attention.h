// Causal (and sliding-window) attention of query rows over a KV cache slot, with Gemma 4's scale of
// 1.0 (Q and K are RMS-normalised instead, spec 2.4) and GQA. With `crop` each row visits only the keys
// it can see (the window band or the causal prefix); without it, every cached key of the sequence is
// scored and the mask applied afterwards, as a dense-mask engine does (kept to measure the gain).
#pragma once
#include <cstdint>

#include "model/kv_cache.h"

namespace gem4 {

class ThreadPool;

struct AttentionShape {
  int n_head = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int window = 0;  // 0: full attention; else a key is visible iff 0 <= q_pos - k_pos < window
};

// q: [n, n_head*head_dim]; out: same shape. pos/seq: per query row. kv_len[seq]: number of cached
// positions of each sequence that exist (only used without crop). hi_pos (may be null: pos): per row,
// the last position it sees, past its own for the rows of an image, which attend to the whole image
// (the window still counts back from pos). Returns multiply-adds performed.
double attend(const float* q, int n, const int32_t* pos, const int32_t* seq, const AttentionShape& s,
              const KvCache& kv, int slot, bool crop, const int* kv_len, float* out, ThreadPool* pool,
              const int32_t* hi_pos = nullptr, int llama_cols = 0);

}  // namespace gem4
