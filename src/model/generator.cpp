#include "model/generator.h"

#include <sys/mman.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "kernels/fnv1a.h"
#include "kernels/thread_pool.h"
#include "tensor/quant.h"

namespace gem4 {

namespace {

struct Shape {
  int n_layer, d, n_head, n_kv_head, hd_swa, hd_full, n_ff, ple, window, n_shared, n_vocab, n_ctx;
  bool double_wide;
  int period;  // every `period`-th layer is full attention; the last layer is always full
  // The 26B-A4B / 31B layouts: KV heads of the full layers (0: n_kv_head), no V projection on full
  // layers (V reuses K, attention_k_eq_v), and the experts beside each layer's dense MLP (0: none).
  int n_kv_head_full = 0;
  bool k_eq_v = false;
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
};

// Real dimensions: E2B/E4B from spec 1.1; 26B-A4B and 31B from spec 1.4 (window 1024, context 262144).
// tiny-moe / tiny-dense31 are the layouts of ../shared/testdata/llamacpp-ref-family at its sizes.
Shape preset_shape(const std::string& p) {
  if (p == "tiny") return {6, 128, 4, 2, 32, 64, 256, 32, 16, 2, 1024, 2048, true, 4};
  if (p == "e2b") return {35, 1536, 8, 1, 256, 512, 6144, 256, 512, 20, 262144, 131072, true, 5};
  if (p == "e4b") return {42, 2560, 8, 2, 256, 512, 10240, 256, 512, 18, 262144, 131072, false, 6};
  if (p == "26b-a4b")
    return {30, 2816, 16, 8, 256, 512, 2112, 0, 1024, 0, 262144, 262144, false, 6, 2, true, 128, 8, 704};
  if (p == "31b") return {60, 5376, 32, 16, 256, 512, 21504, 0, 1024, 0, 262144, 262144, false, 6, 4, true};
  if (p == "tiny-moe") return {6, 128, 4, 2, 32, 64, 96, 0, 16, 0, 1024, 2048, false, 6, 1, true, 8, 2, 32};
  if (p == "tiny-dense31") return {6, 128, 4, 2, 32, 64, 256, 0, 16, 0, 1024, 2048, false, 6, 1, true};
  // The MoE layout with rows of whole 256-element super-blocks (width 256, experts 256 wide), so
  // K-quant files keep K-quant experts (tiny-moe's 32-wide experts fall back to legacy types); 16
  // experts, since llama-quantize has extra rules for exactly 8.
  if (p == "small-moe")
    return {4, 256, 4, 2, 64, 128, 256, 0, 16, 0, 1024, 2048, false, 4, 1, true, 16, 2, 256};
  throw std::invalid_argument(
      "--preset: '" + p + "' is not one of tiny, e2b, e4b, 26b-a4b, 31b, tiny-moe, tiny-dense31, small-moe");
}

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t hash_name(const std::string& s, uint64_t seed) {
  return splitmix(fnv1a(s.data(), s.size(), seed ^ kFnv1aOffsetBasis));
}

// How a tensor's values are drawn: uniform with standard deviation `std` around `mean`.
struct Init {
  float mean = 0, std = 0;
};

struct PlannedTensor {
  std::string name;
  std::vector<int64_t> ne;
  GgmlType type;
  Init init;
  size_t nbytes() const {
    int64_t rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
    return ggml_row_bytes(type, ne[0]) * size_t(rows);
  }
};

// Draws rows [first, last) of a tensor directly: each row has its own random stream, so threads can
// split rows freely and the result does not depend on the thread count.
void draw_rows(const PlannedTensor& t, uint64_t tseed, int64_t first, int64_t last, uint8_t* dst,
               ThreadPool* pool) {
  const int64_t cols = t.ne[0];
  const size_t row_bytes = ggml_row_bytes(t.type, cols);
  const float half_width = t.init.std * std::sqrt(3.0f);
  parallel_for(pool, last - first, 16, [&](int64_t b, int64_t e, int) {
    std::vector<float> row(cols);
    for (int64_t r = first + b; r < first + e; ++r) {
      uint64_t s = splitmix(tseed + uint64_t(r) * 0x9e3779b97f4a7c15ULL);
      for (int64_t c = 0; c < cols; ++c) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;                // xorshift64
        const float u = float(s >> 40) * (1.0f / 16777216.0f);  // [0, 1)
        row[c] = t.init.mean + (2.0f * u - 1.0f) * half_width;
      }
      quantize_row(t.type, row.data(), dst + size_t(r - first) * row_bytes, cols);
    }
  });
}

// Large tensors (E2B has 4.6 B parameters) would take minutes to draw value by value, so their rows are
// copied from a pool of random rows shared by all tensors of the same row shape and distribution
// (e.g. the FFN weights of every layer), picked by a hash of tensor and row. Speed does not depend on
// the values, and small models (all the tests) draw every row.
constexpr int64_t kDirectElements = int64_t(1) << 22;  // tensors up to 4 M elements are drawn directly

class RowPools {
 public:
  const std::vector<uint8_t>& get(const PlannedTensor& t, uint64_t seed, int64_t pool_rows,
                                  ThreadPool* pool) {
    char key[128];
    std::snprintf(key, sizeof key, "%u/%lld/%g/%g", unsigned(t.type), (long long)t.ne[0], t.init.mean,
                  t.init.std);
    auto it = pools_.find(key);
    if (it != pools_.end()) return it->second;
    std::vector<uint8_t>& buf = pools_[key];
    buf.resize(size_t(pool_rows) * ggml_row_bytes(t.type, t.ne[0]));
    draw_rows(t, hash_name(key, seed), 0, pool_rows, buf.data(), pool);
    return buf;
  }

 private:
  std::map<std::string, std::vector<uint8_t>> pools_;
};

void fill_tensor(const PlannedTensor& t, uint64_t seed, uint8_t* dst, ThreadPool* pool, RowPools& pools) {
  int64_t rows = 1;
  for (size_t i = 1; i < t.ne.size(); ++i) rows *= t.ne[i];
  const uint64_t tseed = hash_name(t.name, seed);
  if (rows * t.ne[0] <= kDirectElements) {
    draw_rows(t, tseed, 0, rows, dst, pool);
    return;
  }
  const int64_t pool_rows = std::max<int64_t>(256, kDirectElements / t.ne[0]);
  const size_t row_bytes = ggml_row_bytes(t.type, t.ne[0]);
  const std::vector<uint8_t>& rowpool = pools.get(t, seed, pool_rows, pool);
  parallel_for(pool, rows, 256, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) {
      const uint64_t pick = splitmix(tseed ^ uint64_t(r)) % uint64_t(pool_rows);
      std::memcpy(dst + size_t(r) * row_bytes, rowpool.data() + pick * row_bytes, row_bytes);
    }
  });
}

struct GeneratedPlan {
  gguf::GgufWriter meta;
  std::vector<PlannedTensor> tensors;
};

void add_vocab(gguf::GgufWriter& w, const GeneratorSpec& spec, int& n_vocab) {
  if (!spec.vocab_file.empty()) {
    auto f = gguf::GgufFile::open(spec.vocab_file);
    for (const auto& [key, value] : f->metadata())
      if (key.rfind("tokenizer.", 0) == 0) w.set_value(key, value);
    n_vocab = int(f->get_string_array("tokenizer.ggml.tokens").size());
    return;
  }
  // A synthetic vocabulary: the Gemma 4 control tokens, byte tokens, then placeholders.
  std::vector<std::string> tokens = {"<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|turn>", "<turn|>"};
  std::vector<int32_t> types = {3, 3, 3, 2, 3, 3, 3};
  for (int b = 0; b < 256 && int(tokens.size()) < n_vocab; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
  }
  while (int(tokens.size()) < n_vocab) {
    tokens.push_back("tok" + std::to_string(tokens.size()));
    types.push_back(1);
  }
  tokens.resize(n_vocab);
  types.resize(n_vocab);
  w.set_string("tokenizer.ggml.model", "gemma4");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_f32_array("tokenizer.ggml.scores", std::vector<float>(n_vocab, -1000.0f));
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", {});
  w.set_u32("tokenizer.ggml.bos_token_id", 2);
  w.set_u32("tokenizer.ggml.eos_token_id", 1);
  w.set_u32("tokenizer.ggml.unknown_token_id", 3);
  w.set_u32("tokenizer.ggml.padding_token_id", 0);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_bool("tokenizer.ggml.add_space_prefix", false);
}

constexpr uint32_t kLlamaFileTypeQ4_K_M = 15;  // llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_M

// Rows that are not whole blocks of a type fall back as llama-quantize does: K-quants to the legacy
// type of about the same size (the 26B-A4B's FFN widths 2112 and 704 are not multiples of 256), the
// rest to F32.
GgmlType with_fallback(GgmlType t, int64_t cols) {
  if (cols % ggml_block_elems(t) == 0) return t;
  GgmlType fallback = GgmlType::F32;
  if (t == GgmlType::Q4_K) fallback = GgmlType::Q5_0;
  if (t == GgmlType::Q5_K) fallback = GgmlType::Q5_1;
  if (t == GgmlType::Q6_K) fallback = GgmlType::Q8_0;
  return cols % ggml_block_elems(fallback) == 0 ? fallback : GgmlType::F32;
}

// llama-quantize's choice for Q4_K_M (llama-quant.cpp, non-Falcon): attn_v tensors (counted in file
// order) and the ffn_down tensors of layer i (the dense one and, in a MoE, the experts', whose layer it
// reads from the name) in Q6_K where use_more_bits(i, n) holds, falling back as above for rows of other
// widths (Q6_K to Q8_0 where Q4_K went to Q5_0). The other tensors keep the type planned for Q4_K.
void apply_q4_k_m_mix(std::vector<PlannedTensor>& tensors, int64_t n_layer) {
  auto use_more_bits = [](int64_t i, int64_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
  };
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  int64_t n_v = 0, i_v = 0;
  for (const PlannedTensor& t : tensors) n_v += ends_with(t.name, "attn_v.weight");
  for (PlannedTensor& t : tensors) {
    // A matrix planned as Q4_K, or as its fallback.
    const bool q4_k =
        t.ne.size() >= 2 && t.type == with_fallback(GgmlType::Q4_K, t.ne[0]) && t.type != GgmlType::F32;
    if (ends_with(t.name, "attn_v.weight")) {
      if (use_more_bits(i_v++, n_v) && q4_k) t.type = with_fallback(GgmlType::Q6_K, t.ne[0]);
    } else if (q4_k && (ends_with(t.name, "ffn_down.weight") || ends_with(t.name, "ffn_down_exps.weight"))) {
      const int64_t layer = std::stoll(t.name.substr(4));  // "blk.<layer>."
      if (use_more_bits(layer, n_layer)) t.type = with_fallback(GgmlType::Q6_K, t.ne[0]);
    }
  }
}

GeneratedPlan plan_model(const GeneratorSpec& spec) {
  Shape s = preset_shape(spec.preset);
  if (spec.n_vocab > 0) s.n_vocab = spec.n_vocab;
  if (spec.n_ctx > 0) s.n_ctx = spec.n_ctx;
  GeneratedPlan g;
  auto& w = g.meta;
  add_vocab(w, spec, s.n_vocab);
  const std::string a = "gemma4.";
  w.set_string("general.architecture", "gemma4");
  w.set_string("general.name", "gem4-random-" + spec.preset);
  w.set_u32("general.alignment", 32);
  w.set_u32(a + "block_count", s.n_layer);
  w.set_u32(a + "context_length", s.n_ctx);
  w.set_u32(a + "embedding_length", s.d);
  std::vector<uint32_t> ff(s.n_layer);
  const int K = s.n_layer - s.n_shared;
  for (int l = 0; l < s.n_layer; ++l) ff[l] = (s.double_wide && l >= K) ? 2 * s.n_ff : s.n_ff;
  if (s.double_wide)
    w.set_u32_array(a + "feed_forward_length", ff);
  else
    w.set_u32(a + "feed_forward_length", s.n_ff);
  std::vector<bool> swa(s.n_layer);
  for (int l = 0; l < s.n_layer; ++l) swa[l] = !((l + 1) % s.period == 0 || l == s.n_layer - 1);
  auto kv_heads = [&](int l) { return !swa[l] && s.n_kv_head_full > 0 ? s.n_kv_head_full : s.n_kv_head; };
  w.set_u32(a + "attention.head_count", s.n_head);
  if (s.n_kv_head_full > 0 && s.n_kv_head_full != s.n_kv_head) {
    std::vector<uint32_t> kvh(s.n_layer);
    for (int l = 0; l < s.n_layer; ++l) kvh[l] = uint32_t(kv_heads(l));
    w.set_u32_array(a + "attention.head_count_kv", kvh);
  } else {
    w.set_u32(a + "attention.head_count_kv", s.n_kv_head);
  }
  w.set_u32(a + "attention.key_length", s.hd_full);
  w.set_u32(a + "attention.value_length", s.hd_full);
  w.set_u32(a + "attention.key_length_swa", s.hd_swa);
  w.set_u32(a + "attention.value_length_swa", s.hd_swa);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_u32(a + "attention.sliding_window", s.window);
  w.set_bool_array(a + "attention.sliding_window_pattern", swa);
  w.set_u32(a + "attention.shared_kv_layers", s.n_shared);
  w.set_u32(a + "embedding_length_per_layer_input", s.ple);
  w.set_f32(a + "rope.freq_base", 1e6f);
  w.set_f32(a + "rope.freq_base_swa", 1e4f);
  w.set_u32(a + "rope.dimension_count", s.hd_full);
  w.set_u32(a + "rope.dimension_count_swa", s.hd_swa);
  w.set_f32(a + "final_logit_softcapping", 30.0f);
  if (s.n_expert > 0) {
    w.set_u32(a + "expert_count", s.n_expert);
    w.set_u32(a + "expert_used_count", s.n_expert_used);
    w.set_u32(a + "expert_feed_forward_length", s.n_ff_exp);
  }
  if (spec.q4_k_m) {
    w.set_u32("general.file_type", kLlamaFileTypeQ4_K_M);
  } else if (const auto file_type = llama_file_type_of(spec.type)) {
    w.set_u32("general.file_type", *file_type);
  }

  auto wtype = [&](int64_t cols) { return with_fallback(spec.type, cols); };
  auto add = [&](const std::string& name, std::vector<int64_t> ne, Init init, bool matrix) {
    const GgmlType t = matrix ? wtype(ne[0]) : GgmlType::F32;
    g.tensors.push_back({name, std::move(ne), t, init});
  };
  // The two embedding tables (token_embd is also the tied LM head) get the type llama-quantize gives
  // them: the requested type for Q8_0 and float files, else Q6_K (Q8_0 where rows are not whole
  // 256-element super-blocks). `pure` keeps them of the requested type, like llama-quantize --pure.
  auto add_table = [&](const std::string& name, std::vector<int64_t> ne, Init init) {
    GgmlType t = wtype(ne[0]);
    const bool keeps_type = spec.pure || ggml_block_elems(spec.type) == 1 || spec.type == GgmlType::Q8_0;
    if (!keeps_type) t = ne[0] % ggml_block_elems(GgmlType::Q6_K) == 0 ? GgmlType::Q6_K : GgmlType::Q8_0;
    g.tensors.push_back({name, std::move(ne), t, init});
  };
  const int64_t d = s.d, V = s.n_vocab, P = s.ple, L = s.n_layer;
  const float norm_std = 0.05f;
  add_table("token_embd.weight", {d, V}, {0, 1.0f / std::sqrt(float(d))});
  if (P > 0) {
    add_table("per_layer_token_embd.weight", {L * P, V}, {0, 1.0f / std::sqrt(float(P))});
    g.tensors.push_back(
        {"per_layer_model_proj.weight", {d, L * P}, GgmlType::F32, {0, 1.0f / std::sqrt(float(d))}});
    add("per_layer_proj_norm.weight", {P}, {1.0f, norm_std}, false);
  }
  add("output_norm.weight", {d}, {4.0f, 0.2f}, false);
  {
    // Proportional RoPE divisors (spec 1.3): a quarter of the full-layer pairs rotate.
    PlannedTensor rf{"rope_freqs.weight", {s.hd_full / 2}, GgmlType::F32, {}};
    g.tensors.push_back(rf);
  }
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const int64_t hd = swa[l] ? s.hd_swa : s.hd_full, qw = s.n_head * hd, kvw = kv_heads(l) * hd;
    const float qk_norm = 1.0f / std::pow(float(hd), 0.25f);
    add(p + "attn_norm.weight", {d}, {1.0f, norm_std}, false);
    add(p + "attn_q.weight", {d, qw}, {0, 1.0f / std::sqrt(float(d))}, true);
    if (l < K || spec.include_shared_kv) {
      add(p + "attn_k.weight", {d, kvw}, {0, 1.0f / std::sqrt(float(d))}, true);
      if (!(s.k_eq_v && !swa[l])) add(p + "attn_v.weight", {d, kvw}, {0, 1.0f / std::sqrt(float(d))}, true);
      add(p + "attn_k_norm.weight", {hd}, {qk_norm, 0.02f}, false);
    }
    add(p + "attn_q_norm.weight", {hd}, {qk_norm, 0.02f}, false);
    add(p + "attn_output.weight", {qw, d}, {0, 1.0f / std::sqrt(float(qw))}, true);
    add(p + "post_attention_norm.weight", {d}, {0.8f, norm_std}, false);
    add(p + "ffn_norm.weight", {d}, {1.0f, norm_std}, false);
    add(p + "ffn_gate.weight", {d, int64_t(ff[l])}, {0, 1.0f / std::sqrt(float(d))}, true);
    add(p + "ffn_up.weight", {d, int64_t(ff[l])}, {0, 1.0f / std::sqrt(float(d))}, true);
    add(p + "ffn_down.weight", {int64_t(ff[l]), d}, {0, 1.0f / std::sqrt(float(ff[l]))}, true);
    if (s.n_expert > 0) {
      // The MoE block as llama.cpp's converter writes it (merged gate_up; the router stays F32, as
      // llama-quantize keeps it). Router weights of std 3, as the reference files use: logits spread
      // enough that the top-k choice is not a near-tie everywhere.
      const int64_t E = s.n_expert, fe = s.n_ff_exp;
      add(p + "post_ffw_norm_1.weight", {d}, {0.8f, norm_std}, false);
      add(p + "pre_ffw_norm_2.weight", {d}, {1.0f, norm_std}, false);
      add(p + "ffn_gate_inp.weight", {d, E}, {0, 3.0f}, false);
      add(p + "ffn_gate_inp.scale", {d}, {1.0f, norm_std}, false);
      add(p + "ffn_gate_up_exps.weight", {d, 2 * fe, E}, {0, 1.0f / std::sqrt(float(d))}, true);
      add(p + "ffn_down_exps.weight", {fe, d, E}, {0, 1.0f / std::sqrt(float(fe))}, true);
      add(p + "ffn_down_exps.scale", {E}, {1.0f, 0.23f}, false);
      add(p + "post_ffw_norm_2.weight", {d}, {0.8f, norm_std}, false);
    }
    add(p + "post_ffw_norm.weight", {d}, {0.8f, norm_std}, false);
    add(p + "layer_output_scale.weight", {1}, {0.8f, 0.1f}, false);
    if (P > 0) {
      add(p + "inp_gate.weight", {d, P}, {0, 1.0f / std::sqrt(float(d))}, true);
      add(p + "proj.weight", {P, d}, {0, 1.0f / std::sqrt(float(P))}, true);
      add(p + "post_norm.weight", {d}, {0.8f, norm_std}, false);
    }
  }
  if (spec.q4_k_m) apply_q4_k_m_mix(g.tensors, L);
  return g;
}

void fill_planned(const PlannedTensor& t, uint64_t seed, uint8_t* dst, ThreadPool* pool, RowPools& pools) {
  if (t.name == "rope_freqs.weight") {
    auto* f = reinterpret_cast<float*>(dst);
    const int64_t n = t.ne[0];
    for (int64_t i = 0; i < n; ++i) f[i] = i < n / 4 ? 1.0f : 1e30f;
    return;
  }
  fill_tensor(t, seed, dst, pool, pools);
}

}  // namespace

bool parse_generated_type(const std::string& name, GeneratorSpec* spec) {
  std::string lower = name;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "q4_k_m") {
    spec->type = GgmlType::Q4_K;
    spec->q4_k_m = true;
    return true;
  }
  const auto t = ggml_type_from_name(name);
  if (!t) return false;
  spec->type = *t;
  spec->q4_k_m = false;
  return true;
}

int64_t GeneratedLayout::n_params() const {
  int64_t n = 0;
  for (const auto& t : tensors) {
    int64_t e = 1;
    for (auto x : t.ne) e *= x;
    n += e;
  }
  return n;
}

GeneratedLayout describe_generated_model(const GeneratorSpec& spec) {
  GeneratedPlan g = plan_model(spec);
  GeneratedLayout out;
  const std::vector<uint8_t> bytes = g.meta.to_bytes();
  out.metadata = gguf::GgufFile::from_memory(bytes.data(), bytes.size(), "<generated " + spec.preset + ">");
  for (const auto& t : g.tensors) out.tensors.push_back({t.name, t.ne, t.type});
  return out;
}

void write_generated_model(const GeneratorSpec& spec, const std::string& path, ThreadPool* pool) {
  GeneratedPlan g = plan_model(spec);
  auto pools = std::make_shared<RowPools>();
  for (const auto& t : g.tensors) {
    const PlannedTensor copy = t;
    const uint64_t seed = spec.seed;
    g.meta.add_tensor_lazy(t.name, t.ne, t.type, [copy, seed, pool, pools](uint8_t* dst, size_t) {
      fill_planned(copy, seed, dst, pool, *pools);
    });
  }
  g.meta.write(path);
}

namespace {
struct MappedMemory {
  void* p = nullptr;
  size_t n = 0;
  ~MappedMemory() {
    if (p) munmap(p, n);
  }
};
}  // namespace

std::unique_ptr<Model> generate_model(const GeneratorSpec& spec, ThreadPool* pool) {
  GeneratedPlan g = plan_model(spec);
  size_t total = 0;
  for (const auto& t : g.tensors) total += (t.nbytes() + 63) / 64 * 64;
  auto mem = std::make_shared<MappedMemory>();
  mem->n = std::max<size_t>(total, 64);
  mem->p = mmap(nullptr, mem->n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem->p == MAP_FAILED) {
    mem->p = nullptr;
    throw std::runtime_error("generate_model: cannot allocate " + std::to_string(total) + " bytes");
  }
  TensorTable table;
  RowPools pools;
  size_t off = 0;
  for (const auto& t : g.tensors) {
    uint8_t* dst = static_cast<uint8_t*>(mem->p) + off;
    fill_planned(t, spec.seed, dst, pool, pools);
    TensorRef r;
    r.type = t.type;
    r.ne = t.ne;
    r.data = dst;
    r.nbytes = t.nbytes();
    table.emplace(t.name, std::move(r));
    off += (t.nbytes() + 63) / 64 * 64;
  }
  const std::vector<uint8_t> meta_bytes = g.meta.to_bytes();
  auto meta =
      gguf::GgufFile::from_memory(meta_bytes.data(), meta_bytes.size(), "<generated " + spec.preset + ">");
  return Model::from_memory(std::move(meta), std::move(table), std::shared_ptr<void>(mem, mem->p));
}

}  // namespace gem4
