// Gemma 4 weights bound by name (spec 4.4), with shapes checked. Matrices stay where they are (mmap or
// generated memory) and are used through MatrixView; small 1-D tensors (norms, scalars) are copied to f32.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "gguf/ggml_types.h"
#include "kernels/matmul.h"
#include "model/config.h"

namespace gem4::gguf {
class GgufFile;
}

namespace gem4 {

// Where tensor bytes live: a name -> (type, shape, bytes) table over a GGUF mapping or generated memory.
struct TensorRef {
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
};
using TensorTable = std::unordered_map<std::string, TensorRef>;
TensorTable tensor_table_from_gguf(const gguf::GgufFile& f);

struct LayerWeights {
  std::vector<float> attn_norm;             // [d]
  MatrixView attn_q;                        // d -> n_head*hd
  MatrixView attn_k, attn_v;                // d -> n_kv*hd (KV-owning layers only)
  bool has_v = false;                       // absent: V = raw K projection (k_eq_v models)
  std::vector<float> attn_q_norm;           // [hd]
  std::vector<float> attn_k_norm;           // [hd]
  MatrixView attn_output;                   // n_head*hd -> d
  std::vector<float> post_attention_norm;   // [d]
  std::vector<float> ffn_norm;              // [d]
  MatrixView ffn_gate, ffn_up;              // d -> n_ff
  MatrixView ffn_down;                      // n_ff -> d
  std::vector<float> post_ffw_norm;         // [d]
  float layer_output_scale = 1.0f;
  // Mixture of experts (26B-A4B layout), beside the dense MLP above:
  //   h += post_ffw_norm(post_ffw_norm_1(dense MLP) + post_ffw_norm_2(sum_e w_e expert_e(pre_ffw_norm_2(h))))
  std::vector<float> post_ffw_norm_1, pre_ffw_norm_2, post_ffw_norm_2;  // [d]
  MatrixView router;                        // d -> n_expert (ffn_gate_inp)
  std::vector<float> router_scale;          // [d] (ffn_gate_inp.scale)
  std::vector<MatrixView> expert_gate_up;   // per expert: d -> 2*n_ff_exp, the gate rows then the up rows
  // Files with separate ffn_gate_exps / ffn_up_exps (llama.cpp reads both forms): per expert d -> n_ff_exp
  // each, and expert_gate_up empty.
  std::vector<MatrixView> expert_gate, expert_up;
  std::vector<MatrixView> expert_down;      // per expert: n_ff_exp -> d
  std::vector<float> expert_scale;          // [n_expert] (ffn_down_exps.scale, HF per_expert_scale)
  MatrixView ple_inp_gate;                  // d -> P   (PLE models)
  MatrixView ple_proj;                      // P -> d
  std::vector<float> ple_post_norm;         // [d]
};

struct ModelWeights {
  MatrixView token_embd;            // d -> n_vocab (rows are embeddings; tied LM head)
  MatrixView ple_token_embd;        // rows of L*P per token (PLE models)
  MatrixView ple_model_proj;        // d -> L*P
  std::vector<float> ple_proj_norm; // [P]
  std::vector<float> output_norm;   // [d]
  std::vector<float> rope_freqs;    // divisors for full layers (may be empty)
  // Assistant only:
  MatrixView nextn_pre_proj;        // 2*d_backbone -> d
  MatrixView nextn_post_proj;       // d -> d_backbone
  std::vector<LayerWeights> layers;
  // RoPE per layer (kernels/ops.h rope_neox): pair i turns by pos * theta_scale^i / factors[i].
  struct Rope {
    float theta_scale = 1.0f;    // rope_base^(-2 / n_rot)
    std::vector<float> factors;  // head_dim/2 divisors: rope_freqs on full layers, else 1
  };
  std::vector<Rope> rope;

  // Binds every tensor the config needs; errors name the file and the tensor.
  static ModelWeights bind(const ModelConfig& c, const TensorTable& t, const std::string& file_name);
  // Parameters and bytes as llama.cpp counts them (every tensor in the table).
};

struct ParamCount {
  int64_t params = 0;
  int64_t bytes = 0;
};
ParamCount count_params(const TensorTable& t);

}  // namespace gem4
