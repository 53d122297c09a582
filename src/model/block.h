// The decoder-layer math of spec 2.4, written once for the two stacks that run it: the target's
// forward pass (model/forward.cpp) and the assistant drafter (model/assistant.cpp, spec 5.1).
// What only one of them does stays with it: the target's K/V projections and cache writes, its
// pruning and its PLE block; the assistant's reading of another model's cache (the keys, mask
// positions and window are the caller's, see AttentionKeys).
//
// Every step works on the first n rows of its buffers: row i of each is the i-th row of the call,
// and the residual stream h is [n, d_model].
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "gguf/large_alloc.h"
#include "kernels/matmul.h"
#include "model/attention.h"
#include "model/kv_cache.h"
#include "model/weights.h"

namespace gem4 {

class ThreadPool;

// Runs the products that share the input x [rows, ldx] (count 1: a plain product). Each stack passes
// its own, so that the work is counted where its owner reports it (ForwardStats,
// Assistant::matmul_macs).
using MatmulHook =
    std::function<void(const MatmulTarget* targets, int count, const float* x, int rows, int ldx)>;

// Runs independent products at one barrier (matmul_group): a mixture-of-experts layer's experts.
using MatmulGroupHook = std::function<void(const MatmulJob* jobs, int count)>;

// The products of `targets` on x: merged into one call (one quantization of x, one barrier) when
// there are several. Returns the multiply-adds done.
double run_products(const MatmulTarget* targets, int count, const float* x, int rows, int ldx,
                    ThreadPool* pool);
// The jobs through matmul_group. Returns the multiply-adds done.
double run_group(const MatmulJob* jobs, int count, ThreadPool* pool);

// A layer's intermediates, kept by the caller so that they are sized once.
struct BlockBuffers {
  LargeVector<float> a;         // [n, d] normed input of the current branch
  LargeVector<float> q;         // [n, H*hd] queries, normed and rotated
  LargeVector<float> attn;      // [n, H*hd] attention output, heads concatenated
  LargeVector<float> o;         // [n, d] a branch's output before its residual add
  LargeVector<float> gate, up;  // [n, n_ff] MLP; the activation gelu(gate) * up replaces gate
  // Mixture of experts: the dense branch, the router's input and logits, the experts' input and sum,
  // and every used expert's rows gathered one expert after the other (input, gate|up, activation,
  // output).
  LargeVector<float> dense, router_in, router_logits, expert_in, expert_sum;
  LargeVector<float> ex_x, ex_gu, ex_act, ex_y;
  // Room for n rows of every layer of c (no-op once large enough).
  void resize(int n, const ModelConfig& c);
};

// The cached keys a layer's queries read (model/attention.h).
struct AttentionKeys {
  const KvCache* kv = nullptr;
  int slot = 0;
  AttentionShape shape;
  const int32_t* mask_pos = nullptr;  // per row: the position the causal and window mask ends at
  const int32_t* seq = nullptr;       // per row: the sequence of the cache
  bool crop = true;
  const int* kv_len = nullptr;       // per sequence: cached positions (only without crop)
  const int32_t* mask_hi = nullptr;  // per row: the last visible position (null: mask_pos; images see ahead)
  int llama_cols = 0;  // > 0, F32 cache: llama.cpp's order (attention.h) for a batch of this many rows
};

class DecoderBlock {
 public:
  // Holds references only: build one per call of the stack (the hook may point into its owner).
  DecoderBlock(const ModelConfig& c, const ModelWeights& w, ThreadPool* pool, MatmulHook matmul,
               MatmulGroupHook group, BlockBuffers& buf);

  // y = rmsnorm(x, w) row by row (x, y: [n, d]; may be the same buffer).
  void norm_rows(const float* x, const float* w, int n, float* y) const;

  // Step 1: a = rmsnorm(h, attn_norm).
  void attention_norm(int l, const float* h, int n) const;
  // Step 2: q = rope(qnorm(W_q a)) at pos. `projected`: W_q a is already in q (the target computes it
  // with K and V, sharing their input).
  void query(int l, const int32_t* pos, int n, bool projected) const;
  // Steps 4-7: h += rmsnorm(W_o attention(q, keys), post_attention_norm). Returns the attention's
  // multiply-adds.
  double attention(int l, const AttentionKeys& keys, float* h, int n) const;
  // Steps 8-11: h += rmsnorm(W_down(gelu(W_gate m) * W_up m), post_ffw_norm), m = rmsnorm(h, ffn_norm).
  // `exact_gelu`: the tanh formula instead of llama.cpp's f16 table (kernels/ops.h).
  void mlp(int l, bool exact_gelu, float* h, int n) const;
  // The 26B-A4B MLP: the dense branch of mlp() beside the mixture of experts (weights.h gives the
  // formula). The router: softmax over every expert of W_router (rmsnorm(h) / sqrt(d) * router_scale),
  // the top n_expert_used (lower id first on ties), their weights renormalised to sum 1 and scaled by
  // expert_scale. Each expert runs once on all the rows that picked it (one product per expert per
  // micro-batch, reading only the experts some row uses), all experts' gate|up products at one
  // barrier (with the dense branch's down product), then all their down products at another.
  void moe_mlp(int l, bool exact_gelu, float* h, int n) const;
  // Step 17: h *= layer_scalar (the whole residual stream).
  void scale(int l, float* h, int n) const;

  // The close of every branch: o = rmsnorm(o, w); h += o.
  void add_normed(const float* w, float* h, int n) const;

 private:
  const ModelConfig& c_;
  const ModelWeights& w_;
  ThreadPool* pool_;
  MatmulHook matmul_;
  MatmulGroupHook group_;
  BlockBuffers& buf_;
};

}  // namespace gem4
