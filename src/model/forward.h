// The Gemma 4 forward pass (spec section 2), executing a plan (model/batch.h) over micro-batches.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gguf/large_alloc.h"
#include "kernels/byte_span.h"
#include "model/batch.h"
#include "model/block.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace gem4 {

class ThreadPool;

struct ForwardOutputs {
  int n_vocab = 0;
  int d_model = 0;
  std::vector<int> logit_rows;   // batch row of each logits row, in batch order
  std::vector<float> logits;     // [logit_rows.size(), n_vocab], after the final softcap
  std::vector<int> hidden_rows;  // batch row of each hidden row
  std::vector<float> hidden;     // [hidden_rows.size(), d_model], post-final-norm (spec 2.5 step 18)
  void clear();
  // Logits of a batch row, or nullptr if that row did not ask for them.
  const float* logits_of(int batch_row) const;
  const float* hidden_of(int batch_row) const;
};

// Work done, for `gem4 bench` (FLOPs per token of the plan that ran).
struct ForwardStats {
  double matmul_macs = 0;
  double matmul_seconds = 0;  // wall time inside matrix products
  double weight_bytes = 0;    // weight bytes the matrix products streamed
  // The subset that runs on the int8 GEMM kernels: quantized weights, more than 4 rows (fewer rows
  // take the bandwidth-bound GEMV path; F32/F16/BF16 weights the float kernels).
  double int8_gemm_macs = 0;
  double int8_gemm_seconds = 0;
  double attention_macs = 0;
  int64_t rows = 0;       // rows entering layer 0
  int64_t tail_rows = 0;  // rows that went through the KV-shared tail
  int64_t micro_batches = 0;
  int64_t skipped_tails = 0;  // micro-batches that stopped after the last K/V write
  void reset() { *this = ForwardStats(); }
};

// Time and weight bytes of the matrix products by kind, for `gem4 bench --products`: the key names
// the first product at a barrier (type, out x in) and how many ran there, e.g. "q4_0 2816x2112 (9)".
// It says where a token's time goes when the totals above do not (which barrier streams slower).
struct ProductTime {
  double seconds = 0;
  double weight_bytes = 0;
  int64_t calls = 0;
  // While Forward::streamed is also set: the weight bytes those calls streamed, in the order they ran
  // (for `gem4 bench --products --roofline` to read plainly, kind by kind).
  std::vector<ByteSpan> spans;
};
using ProductBreakdown = std::map<std::string, ProductTime>;

class Forward {
 public:
  Forward(const Model& model, ThreadPool* pool);

  PlanSwitches switches;
  int ubatch = 512;
  const ModelConfig& config() const { return c_; }
  ForwardStats stats;
  // When set, every product's time and bytes are also added here under its kind, and while `streamed`
  // is set too its spans (the caller owns it; nullptr, the default, records nothing).
  ProductBreakdown* breakdown = nullptr;
  // When set, every product appends the weight bytes it streams, in the order it runs (what one decoded
  // token reads, for `gem4 bench --roofline` to read plainly; the caller owns it).
  std::vector<ByteSpan>* streamed = nullptr;

  // Runs every row of `batch` (appending K/V to `kv`) and fills `out` with the requested outputs.
  // Rows of one sequence must have consecutive positions continuing that sequence's cache.
  // Throws std::invalid_argument naming the row and field for a bad batch.
  void run(const Batch& batch, KvCache& kv, ForwardOutputs& out);

 private:
  void run_micro_batch(const Batch& batch, const MicroBatchPlan& plan, KvCache& kv, ForwardOutputs& out);
  DecoderBlock block();
  void compute_ple(int first_layer, int n_layers, int n);
  void run_stage(StackPoint from, StackPoint to, KvCache& kv, const DecoderBlock& blk);
  void prune_rows(const MicroBatchPlan& plan);
  void layer_input(int l, KvCache& kv, bool with_query, const DecoderBlock& blk);
  void layer_rest(int l, const KvCache& kv, bool query_projected, const DecoderBlock& blk);
  void ple_block(int l, const DecoderBlock& blk);
  void head(const Batch& batch, ForwardOutputs& out, const DecoderBlock& blk);
  void matmul(const MatrixView& w, const float* x, int rows, int ldx, float* y, int ldy);
  // Products sharing the input x (matmul_shared_input), timed and counted as one.
  void matmul_shared(const MatmulTarget* targets, int count, const float* x, int rows, int ldx);
  // Independent products at one barrier (matmul_group), timed as one and counted per job.
  void matmul_group(const MatmulJob* jobs, int count);
  // Counts the weight bytes the kernels stream for w (stats, `streamed`); returns them.
  double count_streamed(const MatrixView& w);
  void count_product_time(double secs, double macs, bool int8_gemm);
  // `first_span`: where this barrier's spans start in *streamed (when set).
  void add_to_breakdown(const MatrixView& first, int count, double secs, double bytes, size_t first_span);

  const Model& model_;
  const ModelConfig& c_;
  const ModelWeights& w_;
  ThreadPool* pool_;

  // State of the current micro-batch; row i of every buffer is the i-th active row.
  int n_ = 0;           // active rows
  int llama_cols_ = 0;  // llama_f32_order: activation columns llama.cpp's products have, else 0
  std::vector<int32_t> tok_, pos_, seq_, row_;  // token, position, sequence, batch row
  std::vector<int32_t> hi_;   // last visible position: pos, or the end of the row's image span
  bool has_spans_ = false;    // some row sees past its own position
  std::vector<int> kv_len_;   // per sequence: cached positions after this micro-batch
  LargeVector<float> x0_;     // [n, d] scaled token embeddings (PLE projection input)
  LargeVector<float> h_;      // [n, d] residual stream
  LargeVector<float> ple_;    // [n, L*P] per-layer inputs
  LargeVector<float> k_, v_;  // [n, Hk*hd] keys and values of a KV-owning layer
  LargeVector<float> pg_;     // [n, P] PLE gate
  BlockBuffers buf_;          // the decoder layer's intermediates (a: the normed input of a branch)
};

}  // namespace gem4
