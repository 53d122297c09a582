#include "model/config.h"

#include <algorithm>
#include <stdexcept>

#include "gguf/gguf.h"

namespace gem4 {

namespace {

std::runtime_error config_error(const gguf::GgufFile& f, const std::string& key, const std::string& what) {
  return std::runtime_error(f.path() + ": key '" + key + "': " + what);
}

// A key that may be a scalar or a per-layer array (spec 4.2).
std::vector<int64_t> per_layer_ints(const gguf::GgufFile& f, const std::string& key, int n_layer,
                                    bool required, int64_t fallback) {
  const gguf::Value* v = f.find(key);
  if (!v) {
    if (required) throw config_error(f, key, "missing");
    return std::vector<int64_t>(n_layer, fallback);
  }
  if (v->type == gguf::ValueType::ARRAY) {
    std::vector<int64_t> a = f.get_int_array(key);
    if (int(a.size()) != n_layer)
      throw config_error(f, key, "has " + std::to_string(a.size()) + " entries, expected one per layer (" +
                                     std::to_string(n_layer) + ")");
    return a;
  }
  return std::vector<int64_t>(n_layer, f.get_int(key));
}

}  // namespace

int ModelConfig::max_ff() const {
  int m = 0;
  for (const auto& l : layers) m = std::max(m, l.n_ff);
  return m;
}

int ModelConfig::max_q_width() const {
  int m = 0;
  for (const auto& l : layers) m = std::max(m, n_head * l.head_dim);
  return m;
}

int ModelConfig::n_kv_layers() const {
  int n = 0;
  for (const auto& l : layers) n += l.owns_kv ? 1 : 0;
  return n;
}

ModelConfig ModelConfig::from_gguf(const gguf::GgufFile& f) {
  ModelConfig c;
  c.arch = f.get_string("general.architecture");
  if (c.arch != "gemma4" && c.arch != "gemma4-assistant")
    throw config_error(f, "general.architecture", "is '" + c.arch + "'; gem4 runs 'gemma4' and 'gemma4-assistant'");
  const std::string p = c.arch + ".";
  c.name = f.get_string_or("general.name", "");
  c.n_layer = int(f.get_int(p + "block_count"));
  if (c.n_layer <= 0 || c.n_layer > 1024) throw config_error(f, p + "block_count", "out of range");
  c.d_model = int(f.get_int(p + "embedding_length"));
  if (c.d_model <= 0 || c.d_model % 32 != 0) throw config_error(f, p + "embedding_length", "must be a positive multiple of 32");
  c.n_ctx_train = int(f.get_int_or(p + "context_length", 131072));
  c.rms_eps = float(f.get_float_or(p + "attention.layer_norm_rms_epsilon", 1e-6));
  c.final_softcap = float(f.get_float_or(p + "final_logit_softcapping", c.arch == "gemma4" ? 30.0 : 0.0));
  if (c.arch == "gemma4-assistant") c.final_softcap = 0.0f;  // spec 5.1: no softcap on the drafter
  c.sliding_window = int(f.get_int_or(p + "attention.sliding_window", 512));
  c.ple_dim = int(f.get_int_or(p + "embedding_length_per_layer_input", 0));
  c.n_kv_shared = int(f.get_int_or(p + "attention.shared_kv_layers", 0));
  if (c.n_kv_shared < 0 || c.n_kv_shared > c.n_layer)
    throw config_error(f, p + "attention.shared_kv_layers", "out of range");
  c.first_shared = c.n_layer - c.n_kv_shared;
  c.d_backbone = int(f.get_int_or(p + "embedding_length_out", 0));
  c.n_expert = int(f.get_int_or(p + "expert_count", 0));
  c.n_expert_used = int(f.get_int_or(p + "expert_used_count", 0));
  c.n_ff_exp = int(f.get_int_or(p + "expert_feed_forward_length", 0));
  if (c.n_expert < 0 || c.n_expert > 4096) throw config_error(f, p + "expert_count", "out of range");
  if (c.n_expert > 0) {
    if (c.n_expert_used < 1 || c.n_expert_used > c.n_expert)
      throw config_error(f, p + "expert_used_count", "must be between 1 and expert_count (" +
                                                         std::to_string(c.n_expert) + ")");
    if (c.n_ff_exp <= 0 || c.n_ff_exp % 32 != 0)
      throw config_error(f, p + "expert_feed_forward_length", "must be a positive multiple of 32");
    if (f.has(p + "expert_gating_func") && f.get_int(p + "expert_gating_func") != 1)
      throw config_error(f, p + "expert_gating_func", "gem4 runs softmax gating (1) only, as Gemma 4 uses");
  } else if (c.n_expert_used != 0 || c.n_ff_exp != 0) {
    throw config_error(f, p + "expert_used_count", "set without expert_count");
  }

  const auto heads = per_layer_ints(f, p + "attention.head_count", c.n_layer, true, 0);
  c.n_head = int(heads[0]);
  for (auto h : heads)
    if (h != c.n_head || h <= 0) throw config_error(f, p + "attention.head_count", "must be the same positive value on every layer");
  const auto kv_heads = per_layer_ints(f, p + "attention.head_count_kv", c.n_layer, true, 0);
  const auto n_ff = per_layer_ints(f, p + "feed_forward_length", c.n_layer, true, 0);
  const int hd_full = int(f.get_int(p + "attention.key_length"));
  const int hd_swa = int(f.get_int_or(p + "attention.key_length_swa", hd_full));
  if (f.get_int_or(p + "attention.value_length", hd_full) != hd_full ||
      f.get_int_or(p + "attention.value_length_swa", hd_swa) != hd_swa)
    throw config_error(f, p + "attention.value_length", "must equal key_length (Gemma 4)");
  const int rot_full = int(f.get_int_or(p + "rope.dimension_count", hd_full));
  const int rot_swa = int(f.get_int_or(p + "rope.dimension_count_swa", hd_swa));
  const float base_full = float(f.get_float_or(p + "rope.freq_base", 1e6));
  const float base_swa = float(f.get_float_or(p + "rope.freq_base_swa", 1e4));

  std::vector<int64_t> swa_pattern;
  if (f.has(p + "attention.sliding_window_pattern")) {
    swa_pattern = f.get_int_array(p + "attention.sliding_window_pattern");
    if (int(swa_pattern.size()) != c.n_layer)
      throw config_error(f, p + "attention.sliding_window_pattern", "must have one entry per layer");
  } else {
    swa_pattern.assign(c.n_layer, 0);
  }

  c.layers.resize(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    LayerConfig& L = c.layers[l];
    L.sliding = swa_pattern[l] != 0;
    L.head_dim = L.sliding ? hd_swa : hd_full;
    L.n_rot = L.sliding ? rot_swa : rot_full;
    L.rope_base = L.sliding ? base_swa : base_full;
    L.n_kv_heads = int(kv_heads[l]);
    L.n_ff = int(n_ff[l]);
    L.owns_kv = c.arch == "gemma4" && l < c.first_shared;
    if (L.head_dim <= 0 || L.head_dim % 2 != 0 || L.head_dim > 4096)
      throw config_error(f, p + "attention.key_length", "invalid head dimension " + std::to_string(L.head_dim));
    if (L.n_rot != L.head_dim)
      throw config_error(f, p + "rope.dimension_count", "must equal the head dimension (Gemma 4 rotates whole heads)");
    if (L.n_kv_heads <= 0 || c.n_head % L.n_kv_heads != 0)
      throw config_error(f, p + "attention.head_count_kv", "layer " + std::to_string(l) + ": must divide head_count");
    if (L.n_ff <= 0 || L.n_ff % 32 != 0)
      throw config_error(f, p + "feed_forward_length", "layer " + std::to_string(l) + ": must be a positive multiple of 32");
  }
  // KV sharing map (spec 1.2): a shared layer reads the last KV-owning layer of its own type.
  int slot = 0;
  for (int l = 0; l < c.n_layer; ++l) {
    LayerConfig& L = c.layers[l];
    if (L.owns_kv) {
      L.kv_source = l;
      L.kv_slot = slot++;
      continue;
    }
    if (c.arch != "gemma4") continue;  // the assistant's layers are mapped onto the target by the drafter
    for (int d = c.first_shared - 1; d >= 0; --d) {
      if (c.layers[d].sliding == L.sliding) {
        L.kv_source = d;
        break;
      }
    }
    if (L.kv_source < 0)
      throw config_error(f, p + "attention.shared_kv_layers",
                         "layer " + std::to_string(l) + " has no earlier KV-owning layer of its type to read");
    const LayerConfig& D = c.layers[L.kv_source];
    if (D.head_dim != L.head_dim || D.n_kv_heads != L.n_kv_heads)
      throw config_error(f, p + "attention.shared_kv_layers", "layer " + std::to_string(l) + " and its KV donor differ in shape");
    L.kv_slot = D.kv_slot;
  }
  return c;
}

}  // namespace gem4
