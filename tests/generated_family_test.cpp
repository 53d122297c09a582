// The generator's 26B-A4B and 31B presets (real dimensions, spec 1.4, counted without writing
// weights) and the tiny-moe / tiny-dense31 presets, whose tensor set must be the one of the llama.cpp
// reference files in ../shared/testdata/llamacpp-ref-family (their config.json lists every tensor):
// generated, loaded from a file, run, chunked == one shot; and gem4 make-model / bench on them.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gguf/gguf.h"
#include "isa_override.h"
#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/generator.h"
#include "model/model.h"
#include "test_util.h"

namespace gem4 {
namespace {

GeneratedLayout layout_of(const std::string& preset, GgmlType type) {
  GeneratorSpec spec;
  spec.preset = preset;
  spec.type = type;
  return describe_generated_model(spec);
}

std::map<std::string, const GeneratedLayout::Tensor*> by_name(const GeneratedLayout& l) {
  std::map<std::string, const GeneratedLayout::Tensor*> m;
  for (const auto& t : l.tensors) m[t.name] = &t;
  return m;
}

// Spec 1.4 and 4.4: 30 layers of d 2816, 16 heads, KV heads 8 sliding / 2 full, head dims 256 / 512,
// window 1024; a dense MLP of 2112 beside 128 experts of 704, 8 used; 658 tensors (3 global, 25 x 22,
// 5 x 21); 25.2 B parameters of which 3.8 B are active per token (Google's figures).
TEST(GeneratedFamily, Preset26BA4BHasTheRealDimensions) {
  const auto layout = layout_of("26b-a4b", GgmlType::Q4_0);
  const ModelConfig c = ModelConfig::from_gguf(*layout.metadata);
  EXPECT_EQ(c.n_layer, 30);
  EXPECT_EQ(c.d_model, 2816);
  EXPECT_EQ(c.n_head, 16);
  EXPECT_EQ(c.sliding_window, 1024);
  EXPECT_EQ(c.n_kv_shared, 0);
  EXPECT_EQ(c.ple_dim, 0);
  EXPECT_EQ(c.n_expert, 128);
  EXPECT_EQ(c.n_expert_used, 8);
  EXPECT_EQ(c.n_ff_exp, 704);
  EXPECT_EQ(c.n_ctx_train, 262144);
  for (int l = 0; l < 30; ++l) {
    const bool full = l % 6 == 5;
    EXPECT_EQ(c.layers[l].sliding, !full) << l;
    EXPECT_EQ(c.layers[l].head_dim, full ? 512 : 256) << l;
    EXPECT_EQ(c.layers[l].n_kv_heads, full ? 2 : 8) << l;
    EXPECT_EQ(c.layers[l].n_ff, 2112) << l;
    EXPECT_TRUE(c.layers[l].owns_kv) << l;
  }
  EXPECT_EQ(layout.tensors.size(), 658u);
  EXPECT_NEAR(double(layout.n_params()) / 1e9, 25.2, 0.05);
  int64_t expert_params = 0;
  for (const auto& t : layout.tensors)
    if (t.name.find("_exps.weight") != std::string::npos) expert_params += t.ne[0] * t.ne[1] * t.ne[2];
  const double active = double(layout.n_params() - expert_params + expert_params * 8 / 128);
  EXPECT_NEAR(active / 1e9, 3.8, 0.05);
  const auto t = by_name(layout);
  ASSERT_TRUE(t.count("blk.0.attn_v.weight"));
  EXPECT_FALSE(t.count("blk.5.attn_v.weight")) << "k_eq_v: full layers have no V projection";
  EXPECT_EQ(t.at("blk.0.ffn_gate_up_exps.weight")->ne, (std::vector<int64_t>{2816, 1408, 128}));
  EXPECT_EQ(t.at("blk.0.ffn_down_exps.weight")->ne, (std::vector<int64_t>{704, 2816, 128}));
  EXPECT_EQ(t.at("blk.0.ffn_gate_up_exps.weight")->type, GgmlType::Q4_0);
  EXPECT_EQ(t.at("blk.0.ffn_down_exps.weight")->type, GgmlType::Q4_0);
  EXPECT_EQ(t.at("blk.0.ffn_gate_inp.weight")->type, GgmlType::F32) << "llama-quantize keeps the router F32";
  EXPECT_EQ(t.at("token_embd.weight")->type, GgmlType::Q6_K);
  // K-quants fall back where rows are not whole super-blocks (704, 2112), as llama-quantize does.
  const auto k_layout = layout_of("26b-a4b", GgmlType::Q4_K);
  const auto k = by_name(k_layout);
  EXPECT_EQ(k.at("blk.0.ffn_down_exps.weight")->type, GgmlType::Q5_0);
  EXPECT_EQ(k.at("blk.0.ffn_down.weight")->type, GgmlType::Q5_0);
  EXPECT_EQ(k.at("blk.0.ffn_gate_up_exps.weight")->type, GgmlType::Q4_K);
  // llama-quantize's Q4_K_M: the ffn_down tensors (dense and experts) of the layers use_more_bits picks
  // in Q6_K, which these 2112- and 704-wide rows turn into Q8_0; the others Q4_K, here Q5_0.
  GeneratorSpec km;
  km.preset = "26b-a4b";
  ASSERT_TRUE(parse_generated_type("q4_k_m", &km));
  std::map<std::string, const GeneratedLayout::Tensor*> mix;
  const auto km_layout = describe_generated_model(km);
  for (const auto& x : km_layout.tensors) mix[x.name] = &x;
  EXPECT_EQ(mix.at("blk.0.ffn_down_exps.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(mix.at("blk.0.ffn_down.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(mix.at("blk.3.ffn_down_exps.weight")->type, GgmlType::Q5_0);
  EXPECT_EQ(mix.at("blk.5.ffn_down_exps.weight")->type, GgmlType::Q8_0);  // (5 - 3) % 3 == 2
  EXPECT_EQ(mix.at("blk.3.ffn_gate_up_exps.weight")->type, GgmlType::Q4_K);
}

// 60 layers of d 5376, 32 heads, KV heads 16 / 4, FFN 21504; 833 tensors (3 + 50 x 14 + 10 x 13, the
// count of the published 31B Q8_0, spec 4.4); 30.7 B parameters.
TEST(GeneratedFamily, Preset31BHasTheRealDimensions) {
  const auto layout = layout_of("31b", GgmlType::Q8_0);
  const ModelConfig c = ModelConfig::from_gguf(*layout.metadata);
  EXPECT_EQ(c.n_layer, 60);
  EXPECT_EQ(c.d_model, 5376);
  EXPECT_EQ(c.n_head, 32);
  EXPECT_EQ(c.n_expert, 0);
  for (int l = 0; l < 60; ++l) {
    const bool full = l % 6 == 5;
    EXPECT_EQ(c.layers[l].n_kv_heads, full ? 4 : 16) << l;
    EXPECT_EQ(c.layers[l].head_dim, full ? 512 : 256) << l;
    EXPECT_EQ(c.layers[l].n_ff, 21504) << l;
  }
  EXPECT_EQ(layout.tensors.size(), 833u);
  EXPECT_NEAR(double(layout.n_params()) / 1e9, 30.7, 0.1);
}

// The tiny presets have exactly the tensors (names and shapes) of the llama.cpp reference files
// and the same hyper-parameters.
TEST(GeneratedFamily, TinyPresetsHaveTheReferenceFilesLayout) {
  for (const auto& [preset, ref_name] : {std::pair<std::string, std::string>{"tiny-moe", "gemma4-tiny-moe"},
                                         {"tiny-dense31", "gemma4-tiny-dense31"}}) {
    SCOPED_TRACE(preset);
    nlohmann::json ref;
    std::ifstream(test::testdata("llamacpp-ref-family/" + ref_name + ".config.json")) >> ref;
    const auto layout = layout_of(preset, GgmlType::F32);
    ASSERT_EQ(layout.tensors.size(), ref["tensors"].size());
    std::map<std::string, std::vector<int64_t>> want;
    for (const auto& t : ref["tensors"]) want[t[0].get<std::string>()] = t[1].get<std::vector<int64_t>>();
    for (const auto& t : layout.tensors) {
      ASSERT_TRUE(want.count(t.name)) << "generated " << t.name << ", which the reference file does not have";
      EXPECT_EQ(t.ne, want[t.name]) << t.name;
    }
    const ModelConfig c = ModelConfig::from_gguf(*layout.metadata);
    const ModelConfig r = ModelConfig::from_gguf(
        *gguf::GgufFile::open(test::testdata("llamacpp-ref-family/" + ref_name + "-f32.gguf")));
    EXPECT_EQ(c.n_layer, r.n_layer);
    EXPECT_EQ(c.sliding_window, r.sliding_window);
    EXPECT_EQ(c.n_expert, r.n_expert);
    EXPECT_EQ(c.n_expert_used, r.n_expert_used);
    EXPECT_EQ(c.n_ff_exp, r.n_ff_exp);
    for (int l = 0; l < c.n_layer; ++l) {
      EXPECT_EQ(c.layers[l].sliding, r.layers[l].sliding) << l;
      EXPECT_EQ(c.layers[l].head_dim, r.layers[l].head_dim) << l;
      EXPECT_EQ(c.layers[l].n_kv_heads, r.layers[l].n_kv_heads) << l;
      EXPECT_EQ(c.layers[l].n_ff, r.layers[l].n_ff) << l;
      EXPECT_EQ(c.layers[l].rope_base, r.layers[l].rope_base) << l;
    }
  }
}

std::vector<float> run_all(const Model& m, const std::vector<int32_t>& ids, int ubatch, ThreadPool* pool) {
  KvCache kv(m.config, 256, 1, ubatch, KvType::F32);
  Forward f(m, pool);
  f.ubatch = ubatch;
  Batch b;
  for (size_t i = 0; i < ids.size(); ++i) b.push_back({ids[i], int32_t(i), 0, true, false});
  ForwardOutputs out;
  f.run(b, kv, out);
  return out.logits;
}

// Generated in memory and written to a file then loaded: the same logits; prompts in micro-batches
// give the one-shot bits; a few greedy tokens are finite and in the vocabulary; q4_0 and q8_0 weights.
TEST(GeneratedFamily, TinyPresetsLoadRunAndChunkedEqualsOneShot) {
  ThreadPool pool(2);
  std::vector<int32_t> ids = {2};
  for (int i = 1; i < 40; ++i) ids.push_back(int32_t(7 + (i * 37) % 1000));  // past the window of 16
  for (const std::string preset : {"tiny-moe", "tiny-dense31"}) {
    for (GgmlType type : {GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_0}) {
      SCOPED_TRACE(preset + " " + ggml_type_name(type));
      GeneratorSpec spec;
      spec.preset = preset;
      spec.type = type;
      auto mem = generate_model(spec, &pool);
      const std::string path =
          ::testing::TempDir() + "gem4_gen_" + preset + "_" + std::to_string(::getpid()) + ".gguf";
      write_generated_model(spec, path, &pool);
      auto file = Model::load(path);
      std::remove(path.c_str());
      EXPECT_EQ(file->config.n_expert, preset == "tiny-moe" ? 8 : 0);
      const auto one_shot = run_all(*mem, ids, 512, &pool);
      ASSERT_EQ(one_shot.size(), ids.size() * 1024);
      for (float x : one_shot) ASSERT_TRUE(std::isfinite(x));
      EXPECT_EQ(0, std::memcmp(run_all(*file, ids, 512, &pool).data(), one_shot.data(), one_shot.size() * 4))
          << "the file gives other logits than the same model in memory";
      for (int ub : {7, 1}) {
        const auto chunked = run_all(*mem, ids, ub, &pool);
        EXPECT_LE(test::max_abs_diff(chunked.data(), one_shot.data(), one_shot.size()), 1e-3)
            << "ubatch " << ub;
      }
      // A few greedy steps from the prompt's cache.
      KvCache kv(mem->config, 256, 1, 64, KvType::F16);
      Forward f(*mem, &pool);
      f.ubatch = 64;
      Batch b;
      for (size_t i = 0; i < ids.size(); ++i)
        b.push_back({ids[i], int32_t(i), 0, i + 1 == ids.size(), false});
      ForwardOutputs out;
      f.run(b, kv, out);
      for (int k = 0; k < 4; ++k) {
        const int32_t next =
            int32_t(std::max_element(out.logits.begin(), out.logits.end()) - out.logits.begin());
        ASSERT_LT(next, 1024);
        out = ForwardOutputs{};
        f.run({{next, int32_t(ids.size()) + k, 0, true, false}}, kv, out);
        ASSERT_EQ(out.logits.size(), 1024u);
      }
    }
  }
}

// Quantized experts of the K-quant types and llama-quantize's Q4_K_M mix (small-moe: the experts keep
// their K-quant type, 256 wide), on every kernel set the machine has: the SIMD sets' 8-bit activation
// arithmetic is close to the Scalar set's f32 one (the reference semantics), and micro-batches of 7
// give the one-shot logits.
TEST(GeneratedFamily, KQuantExpertsOnEveryKernelSet) {
  ThreadPool pool(2);
  std::vector<int32_t> ids = {2};
  for (int i = 1; i < 40; ++i) ids.push_back(int32_t(7 + (i * 37) % 1000));
  for (const char* type : {"q4_k", "q5_k", "q6_k", "q4_k_m"}) {
    SCOPED_TRACE(type);
    GeneratorSpec spec;
    spec.preset = "small-moe";
    ASSERT_TRUE(parse_generated_type(type, &spec));
    auto m = generate_model(spec, &pool);
    const LayerWeights& l0 = m->weights.layers[0];
    ASSERT_EQ(m->config.n_expert, 16);
    EXPECT_TRUE(l0.expert_gate_up[0].type == GgmlType::Q4_K || l0.expert_gate_up[0].type == GgmlType::Q5_K ||
                l0.expert_gate_up[0].type == GgmlType::Q6_K)
        << ggml_type_name(l0.expert_gate_up[0].type);
    if (spec.q4_k_m) {
      EXPECT_EQ(m->weights.layers[3].expert_down[0].type, GgmlType::Q6_K)
          << "use_more_bits picks the last layer";
      EXPECT_EQ(l0.expert_down[0].type, GgmlType::Q4_K);
    }
    std::vector<float> scalar, first_simd;
    {
      test::IsaOverride o(Isa::Scalar);
      scalar = run_all(*m, ids, 512, &pool);
    }
    // Per position: the NMSE of its logits against another run's.
    auto nmse_rows = [&](const std::vector<float>& a, const std::vector<float>& b) {
      const size_t V = 1024;
      std::vector<double> r;
      for (size_t p = 0; p * V < a.size(); ++p) {
        double err = 0, ref = 0;
        for (size_t i = p * V; i < (p + 1) * V; ++i)
          err += double(a[i] - b[i]) * (a[i] - b[i]), ref += double(b[i]) * b[i];
        r.push_back(err / ref);
      }
      std::sort(r.begin(), r.end());
      return r;
    };
    for (Isa isa : kAllIsas) {
      if (!isa_supported(isa) || isa == Isa::Scalar) continue;
      test::IsaOverride o(isa);
      const auto one_shot = run_all(*m, ids, 512, &pool);
      const auto rows = nmse_rows(one_shot, scalar);
      // The Scalar set multiplies K-quant weights by f32 activations, the SIMD sets by Q8_K ones. This
      // random 4-layer MoE amplifies that to a median per-position NMSE of 3e-3..1.3e-2 (more where a
      // router near-tie picks another expert); a wrong expert kernel (scales, mins, sub-block order)
      // would be far above that.
      EXPECT_LE(rows[rows.size() / 2], 5e-2)
          << isa_name(isa) << ": median position NMSE against the scalar set";
      if (first_simd.empty()) {
        first_simd = one_shot;
      } else {  // the SIMD sets share the Q8_K activations: closer to one another (measured <= 4e-4)
        const auto r = nmse_rows(one_shot, first_simd);
        EXPECT_LE(r[r.size() / 2], 2e-3)
            << isa_name(isa) << ": median position NMSE against the first SIMD set";
      }
      const auto chunked = run_all(*m, ids, 7, &pool);
      EXPECT_LE(test::max_abs_diff(chunked.data(), one_shot.data(), one_shot.size()), 1e-3) << isa_name(isa);
      std::printf("[ k-quant experts ] %s %s: position NMSE vs scalar median %.2e, worst %.2e\n", type,
                  isa_name(isa), rows[rows.size() / 2], rows.back());
    }
  }
}

struct CommandResult {
  int rc = -1;
  std::string out, err;
};

CommandResult gem4(const std::string& args) {
  const std::string base = ::testing::TempDir() + "gem4_gen_cli_" + std::to_string(::getpid());
  const std::string cmd =
      std::string("'") + GEM4_BINARY + "' " + args + " > '" + base + ".out' 2> '" + base + ".err'";
  CommandResult r;
  const int status = std::system(cmd.c_str());
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  for (auto [ext, dst] : {std::pair{".out", &r.out}, std::pair{".err", &r.err}}) {
    std::ifstream f(base + ext);
    std::stringstream s;
    s << f.rdbuf();
    *dst = s.str();
    std::remove((base + ext).c_str());
  }
  return r;
}

// make-model writes the tiny MoE preset in q4_0, inspect and bench read it: the plan says pruning does
// not apply and how many expert bytes a token reads; a preset name that does not exist is an error
// naming the flag.
TEST(GeneratedFamily, MakeModelInspectAndBenchOnTheTinyMoE) {
  const std::string path = ::testing::TempDir() + "gem4_gen_moe_" + std::to_string(::getpid()) + ".gguf";
  CommandResult r = gem4("make-model --preset tiny-moe --type q4_0 -o '" + path + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  r = gem4("inspect --no-tensors --no-metadata '" + path + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("pruning does not apply"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("8 experts of width 32, 2 used per token"), std::string::npos) << r.out;
  r = gem4("bench -m '" + path + "' -p 16 -n 4 -r 1 -t 2 --pack-cache off");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("pruning does not apply"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("MoE, 8 experts of width 32 per layer, 2 used per token"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("pp16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tg4"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("prune=0"), std::string::npos) << "one variant only: pruning does nothing here\n"
                                                      << r.out;
  std::remove(path.c_str());
  r = gem4("make-model --preset 26b -o '" + path + "'");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--preset"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("26b-a4b"), std::string::npos) << r.err;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gem4
