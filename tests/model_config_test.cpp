// Hyper-parameters and the layer plan: the real E2B/E4B dimensions (spec 1.1, 1.2, 4.4), read back
// from the generator's metadata, and the trained tiny model's plan from its README.
#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>
#include <utility>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/config.h"
#include "model/generator.h"
#include "model/kv_cache.h"
#include "test_util.h"

namespace gem4 {
namespace {

TEST(ModelConfig, E2BLayerPlanAndParameterCount) {
  GeneratorSpec spec;
  spec.preset = "e2b";
  spec.type = GgmlType::Q8_0;
  const auto layout = describe_generated_model(spec);
  const ModelConfig c = ModelConfig::from_gguf(*layout.metadata);
  EXPECT_EQ(c.n_layer, 35);
  EXPECT_EQ(c.d_model, 1536);
  EXPECT_EQ(c.first_shared, 15);
  EXPECT_EQ(c.prune_layer(), 14);
  for (int l = 0; l < 35; ++l) {
    const bool full = l % 5 == 4;
    EXPECT_EQ(c.layers[l].sliding, !full) << l;
    EXPECT_EQ(c.layers[l].head_dim, full ? 512 : 256) << l;
    EXPECT_EQ(c.layers[l].n_ff, l < 15 ? 6144 : 12288) << l;
    EXPECT_EQ(c.layers[l].owns_kv, l < 15) << l;
    if (l >= 15) {
      EXPECT_EQ(c.layers[l].kv_source, full ? 14 : 13) << l;
    }
  }
  // llama.cpp counts 4.65 B for E2B, including the unused K/V tensors of shared layers (spec 1.1).
  EXPECT_NEAR(double(layout.n_params()) / 1e9, 4.647, 0.005);
  EXPECT_EQ(layout.tensors.size(), 601u);  // 6 global + 35 x 17 (spec 4.4)

  // KV cache at 131,072 tokens in f16: only the 3 full KV-owning layers grow (spec 1.2).
  KvCache kv(c, 131072, 1, 512, KvType::F16);
  EXPECT_LE(double(kv.bytes()), 800.0 * 1024 * 1024);
  EXPECT_GE(double(kv.bytes()), 768.0 * 1024 * 1024);
}

TEST(ModelConfig, E4BLayerPlanAndParameterCount) {
  GeneratorSpec spec;
  spec.preset = "e4b";
  const auto layout = describe_generated_model(spec);
  const ModelConfig c = ModelConfig::from_gguf(*layout.metadata);
  EXPECT_EQ(c.n_layer, 42);
  EXPECT_EQ(c.first_shared, 24);
  for (int l = 24; l < 42; ++l) EXPECT_EQ(c.layers[l].kv_source, c.layers[l].sliding ? 22 : 23) << l;
  EXPECT_NEAR(double(layout.n_params()) / 1e9, 7.518, 0.005);
  EXPECT_EQ(layout.tensors.size(), 720u);
}

// general.file_type is llama.cpp's file-type id, not the tensor type id (Q8_0: 7, not 8): the generated
// files say what the reference files written by llama.cpp's tools say for the same weight type.
TEST(ModelConfig, GeneratedFileTypeMatchesLlamaCppFiles) {
  for (const auto& [type, reference] : {std::pair{GgmlType::F32, "llamacpp-ref/gemma4-tiny-f32.gguf"},
                                        std::pair{GgmlType::Q8_0, "llamacpp-ref/gemma4-tiny-q8_0.gguf"},
                                        std::pair{GgmlType::Q8_0, "tiny-gemma4/tiny-gemma4-q8_0.gguf"}}) {
    GeneratorSpec spec;
    spec.type = type;
    const auto layout = describe_generated_model(spec);
    const auto ref = gguf::GgufFile::open(test::testdata(reference));
    EXPECT_EQ(layout.metadata->get_int("general.file_type"), ref->get_int("general.file_type")) << reference;
  }
  // Every type the generator writes has a file type, and no two share one.
  std::set<uint32_t> seen;
  for (const char* name : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"}) {
    const auto file_type = llama_file_type_of(*ggml_type_from_name(name));
    ASSERT_TRUE(file_type.has_value()) << name;
    EXPECT_TRUE(seen.insert(*file_type).second) << name;
    // Named as llama.cpp names it: the type, upper case, with K-quants' "_S" (the one-type variant).
    std::string upper = name;
    for (char& ch : upper) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    if (upper.back() == 'K') upper += "_S";
    if (upper == "Q6_K_S") upper = "Q6_K";  // Q6_K has one variant
    ASSERT_NE(llama_file_type_name(*file_type), nullptr) << name;
    EXPECT_EQ(std::string(llama_file_type_name(*file_type)), upper);
  }
  EXPECT_EQ(std::string(llama_file_type_name(15)), "Q4_K_M");
  EXPECT_EQ(llama_file_type_name(4), nullptr);  // retired by ggml
  EXPECT_EQ(llama_file_type_of(GgmlType::Q5_0), 8u);  // the id a Q8_0 file used to claim
}

// The embedding tables take the type llama-quantize gives them (tied LM head: Q6_K below Q8_0, Q8_0
// where rows are not whole super-blocks); --pure keeps the requested type; other matrices are unchanged.
TEST(ModelConfig, GeneratedEmbeddingTablesFollowLlamaQuantize) {
  auto type_of = [](const GeneratedLayout& layout, const std::string& name) {
    for (const auto& t : layout.tensors)
      if (t.name == name) return t.type;
    ADD_FAILURE() << "no tensor " << name;
    return GgmlType::F32;
  };
  struct Case {
    const char* preset;
    GgmlType type;
    bool pure;
    GgmlType table;
  };
  for (const Case& c : {Case{"e2b", GgmlType::Q4_0, false, GgmlType::Q6_K}, Case{"e2b", GgmlType::Q4_K, false, GgmlType::Q6_K},
                        Case{"e2b", GgmlType::Q8_0, false, GgmlType::Q8_0}, Case{"e2b", GgmlType::F16, false, GgmlType::F16},
                        Case{"e2b", GgmlType::Q4_0, true, GgmlType::Q4_0}, Case{"tiny", GgmlType::Q4_0, false, GgmlType::Q8_0}}) {
    GeneratorSpec spec;
    spec.preset = c.preset;
    spec.type = c.type;
    spec.pure = c.pure;
    const auto layout = describe_generated_model(spec);
    const std::string what = std::string(c.preset) + " " + ggml_type_name(c.type) + (c.pure ? " pure" : "");
    EXPECT_EQ(type_of(layout, "token_embd.weight"), c.table) << what;
    EXPECT_EQ(type_of(layout, "per_layer_token_embd.weight"), c.table) << what;
    EXPECT_EQ(type_of(layout, "blk.0.ffn_down.weight"), c.type) << what;
    EXPECT_EQ(type_of(layout, "per_layer_model_proj.weight"), GgmlType::F32) << what;  // F32, as llama.cpp keeps it
  }
}

// --type q4_k_m: the tensor types llama-quantize Q4_K_M gave an E2B-shaped f16 file written by
// make-model (llama.cpp v0.5.0 from node-llama-cpp 3.22.1, 2026-12-01): Q6_K for attn_v and ffn_down of
// these layers, Q4_K for the other matrices, Q6_K tables, F32 per_layer_model_proj.
TEST(ModelConfig, GeneratedQ4KMMixMatchesLlamaQuantize) {
  GeneratorSpec spec;
  spec.preset = "e2b";
  ASSERT_TRUE(parse_generated_type("Q4_K_M", &spec));
  EXPECT_TRUE(spec.q4_k_m);
  EXPECT_EQ(spec.type, GgmlType::Q4_K);
  const auto layout = describe_generated_model(spec);
  EXPECT_EQ(layout.metadata->get_int("general.file_type"), 15);
  const std::set<int> more_bits = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 31, 32, 33, 34};
  int q6 = 0;
  for (const auto& t : layout.tensors) {
    if (t.ne.size() != 2) continue;
    const bool table = t.name == "token_embd.weight" || t.name == "per_layer_token_embd.weight";
    GgmlType want = GgmlType::Q4_K;
    if (table) want = GgmlType::Q6_K;
    if (t.name == "per_layer_model_proj.weight") want = GgmlType::F32;
    const bool v_or_down = t.name.find("attn_v.weight") != std::string::npos ||
                           t.name.find("ffn_down.weight") != std::string::npos;
    if (v_or_down && more_bits.count(std::stoi(t.name.substr(4)))) want = GgmlType::Q6_K;
    q6 += t.type == GgmlType::Q6_K;
    EXPECT_EQ(t.type, want) << t.name;
  }
  EXPECT_EQ(q6, 2 * int(more_bits.size()) + 2);
  GeneratorSpec other;
  EXPECT_FALSE(parse_generated_type("q4_k_x", &other));
  EXPECT_TRUE(parse_generated_type("q4_k", &other));
  EXPECT_FALSE(other.q4_k_m);
}

TEST(ModelConfig, TrainedTinyModelPlan) {
  auto f = gguf::GgufFile::open(test::testdata("tiny-gemma4/tiny-gemma4-f32.gguf"));
  const ModelConfig c = ModelConfig::from_gguf(*f);
  EXPECT_EQ(c.n_layer, 8);
  EXPECT_EQ(c.first_shared, 5);
  EXPECT_EQ(c.layers[5].kv_source, 3);
  EXPECT_EQ(c.layers[6].kv_source, 3);
  EXPECT_EQ(c.layers[7].kv_source, 4);
  EXPECT_EQ(c.sliding_window, 64);
  EXPECT_EQ(c.layers[4].n_ff, 320);
  EXPECT_EQ(c.layers[5].n_ff, 640);
}

TEST(ModelConfig, MissingKeyNamesFileAndKey) {
  GeneratorSpec spec;
  const auto layout = describe_generated_model(spec);
  // Rebuild the metadata without block_count.
  gguf::GgufWriter w;
  for (const auto& [k, v] : layout.metadata->metadata())
    if (k != "gemma4.block_count") w.set_value(k, v);
  const auto bytes = w.to_bytes();
  auto f = gguf::GgufFile::from_memory(bytes.data(), bytes.size(), "broken.gguf");
  try {
    ModelConfig::from_gguf(*f);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("broken.gguf"), std::string::npos) << msg;
    EXPECT_NE(msg.find("gemma4.block_count"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace gem4
