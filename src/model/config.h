// Gemma 4 hyper-parameters, read from the `gemma4.*` GGUF keys (spec sections 1 and 4.2), and the
// derived layer plan: which layers are sliding, which own a KV cache, which donor a shared layer reads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gem4::gguf {
class GgufFile;
}

namespace gem4 {

struct LayerConfig {
  bool sliding = false;   // sliding-window attention (else full attention)
  int head_dim = 0;       // 256 sliding / 512 full in E2B/E4B
  int n_kv_heads = 0;
  int n_ff = 0;           // FFN width of this layer (E2B doubles it on shared layers)
  bool owns_kv = false;   // layer < first_shared: computes and stores K/V
  int kv_source = -1;     // the layer whose cache this layer reads (itself when it owns KV)
  int kv_slot = -1;       // index of that cache among the KV-owning layers
  int n_rot = 0;          // rotary dims (== head_dim; proportional RoPE zeroes the unrotated pairs)
  float rope_base = 0;
};

struct ModelConfig {
  std::string arch;          // "gemma4" or "gemma4-assistant"
  std::string name;
  int n_layer = 0;
  int d_model = 0;
  int n_head = 0;            // query heads (same on every layer)
  int n_vocab = 0;
  int n_ctx_train = 0;
  int sliding_window = 0;
  int ple_dim = 0;           // per-layer embedding width P (0: no PLE)
  int n_kv_shared = 0;       // layers at the end that read another layer's KV
  int first_shared = 0;      // K = n_layer - n_kv_shared
  float rms_eps = 1e-6f;
  float final_softcap = 30.0f;  // 0: none
  int d_backbone = 0;        // assistant only: the target's d_model (embedding_length_out)
  // Mixture of experts (26B-A4B layout): every layer has n_expert experts of width n_ff_exp beside
  // its dense MLP, and each row uses the n_expert_used its router picks. 0: a dense model.
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;
  std::vector<LayerConfig> layers;

  int max_ff() const;
  int max_q_width() const;   // n_head * max head_dim
  int n_kv_layers() const;   // layers that own a KV cache
  // The layer at which rows whose outputs are not needed can be dropped: the last KV-owning layer
  // (K-1). Its K/V write runs on all rows, everything after on kept rows only. n_layer if no sharing.
  int prune_layer() const { return n_kv_shared > 0 ? first_shared - 1 : n_layer; }

  // Reads and validates the keys; errors name the file and key.
  static ModelConfig from_gguf(const gguf::GgufFile& f);
};

}  // namespace gem4
