// The rest of the Gemma 4 family against llama.cpp: the 26B-A4B (mixture of experts) and 31B (dense,
// k_eq_v) layouts, on the small random-weight files of ../shared/testdata/llamacpp-ref-family (its
// README gives the layouts, how the logits were made and the tolerances used here). And the loader's
// refusal of tensors it does not know, which let MoE files load without a word and give wrong logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "kernels/thread_pool.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/weights.h"
#include "test_util.h"

namespace gem4 {
namespace {

using nlohmann::json;
using test::read_f32;
using test::testdata;

json manifest() {
  std::ifstream f(testdata("llamacpp-ref-family/manifest.json"));
  json j;
  f >> j;
  return j;
}

std::vector<float> run_all(const Model& m, const std::vector<int32_t>& ids, int ubatch, ThreadPool* pool) {
  KvCache kv(m.config, 512, 1, ubatch, KvType::F32);
  Forward f(m, pool);
  f.ubatch = ubatch;
  Batch b;
  for (size_t i = 0; i < ids.size(); ++i) b.push_back({ids[i], int32_t(i), 0, true, false});
  ForwardOutputs out;
  f.run(b, kv, out);
  return out.logits;
}

// Per position: the largest |difference| of its logits.
std::vector<double> row_max_diff(const std::vector<float>& a, const std::vector<float>& b, int V) {
  std::vector<double> r(a.size() / V);
  for (size_t p = 0; p < r.size(); ++p) r[p] = test::max_abs_diff(a.data() + p * V, b.data() + p * V, V);
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct FamilyCase {
  std::string name;
  double max_abs, median_row_max;  // limits on the all-position logits (README: F32 0.1 / 0.03)
  double greedy_max_abs;           // on the teacher-forced greedy steps
  double nmse;                     // per position (issue #19: 1e-5 for F32 files, 1e-2 for quantized)
};

class LlamaCppFamily : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(LlamaCppFamily, AllPositionsAndTeacherForcedGreedySteps) {
  const FamilyCase fc = GetParam();
  const json ref = manifest()["references"][fc.name];
  auto model = Model::load(testdata("llamacpp-ref-family/" + ref["model"].get<std::string>()));
  ThreadPool pool(2);
  const int V = ref["n_vocab"].get<int>();
  for (const json& seq : ref["sequences"]) {
    const std::string sname = seq["name"];
    SCOPED_TRACE(sname);
    const auto ids = seq["token_ids"].get<std::vector<int32_t>>();
    const auto all_ref = read_f32(testdata("llamacpp-ref-family/" + seq["all_logits_file"].get<std::string>()));
    ASSERT_EQ(all_ref.size(), ids.size() * size_t(V));
    std::vector<float> one_shot;
    for (int ubatch : {512, 7, 1}) {
      const std::vector<float> got = run_all(*model, ids, ubatch, &pool);
      ASSERT_EQ(got.size(), all_ref.size());
      const auto rows = row_max_diff(got, all_ref, V);
      const double worst = *std::max_element(rows.begin(), rows.end());
      EXPECT_LE(worst, fc.max_abs) << "ubatch " << ubatch;
      EXPECT_LE(median(rows), fc.median_row_max) << "ubatch " << ubatch;
      // Argmax where llama.cpp's top-1 is clear of the tolerance.
      for (size_t p = 0; p < ids.size(); ++p) {
        EXPECT_LE(test::nmse(got.data() + p * V, all_ref.data() + p * V, V), fc.nmse) << "position " << p;
        const float* g = got.data() + p * V;
        const float* r = all_ref.data() + p * V;
        std::vector<float> sorted(r, r + V);
        std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<float>());
        if (sorted[0] - sorted[1] > 2 * fc.max_abs) {
          EXPECT_EQ(std::max_element(g, g + V) - g, std::max_element(r, r + V) - r) << "position " << p;
        }
      }
      if (ubatch == 512) {
        std::printf("[ family ] %s %s: max |d| %.2e, median row max %.2e\n", fc.name.c_str(), sname.c_str(), worst,
                    median(rows));
        one_shot = got;
      } else {
        EXPECT_LE(test::max_abs_diff(got.data(), one_shot.data(), got.size()), 1e-3) << "ubatch " << ubatch;
      }
    }
    // 16 greedy steps, teacher-forced with llama.cpp's tokens, from the prompt's cache.
    const auto greedy_ref = read_f32(testdata("llamacpp-ref-family/" + seq["greedy_logits_file"].get<std::string>()));
    const auto greedy_ids = seq["greedy_token_ids"].get<std::vector<int32_t>>();
    KvCache kv(model->config, 512, 1, 512, KvType::F32);
    Forward f(*model, &pool);
    Batch b;
    for (size_t i = 0; i < ids.size(); ++i) b.push_back({ids[i], int32_t(i), 0, i + 1 == ids.size(), false});
    ForwardOutputs out;
    f.run(b, kv, out);
    std::vector<float> steps = out.logits;
    for (size_t k = 1; k < greedy_ids.size(); ++k) {
      ForwardOutputs s;
      f.run({{greedy_ids[k - 1], int32_t(ids.size() + k - 1), 0, true, false}}, kv, s);
      steps.insert(steps.end(), s.logits.begin(), s.logits.end());
    }
    ASSERT_EQ(steps.size(), greedy_ref.size());
    const auto rows = row_max_diff(steps, greedy_ref, V);
    EXPECT_LE(*std::max_element(rows.begin(), rows.end()), fc.greedy_max_abs) << "greedy steps";
  }
}

// F32: the README's tolerances. Q8_0: gem4 quantizes activations as llama.cpp's CPU backend does, so
// the MoE file agrees to ~3e-6 (measured) and the dense one to 0.38 at most on len64 (the README's
// numpy check with the same activations: 0.38); the bounds leave room for one expert flip's worth
// of rounding elsewhere, not for a wrong layer. Single-row decode steps round activations where a
// product of the batch did not: the README saw llama.cpp's own Q8_0 greedy runs move by 0.4 between
// machines, so the greedy steps of the Q8_0 files get 1.0.
INSTANTIATE_TEST_SUITE_P(Files, LlamaCppFamily,
                         ::testing::Values(FamilyCase{"gemma4-tiny-moe-f32", 0.1, 0.03, 0.1, 1e-5},
                                           FamilyCase{"gemma4-tiny-dense31-f32", 0.1, 0.03, 0.1, 1e-5},
                                           FamilyCase{"gemma4-tiny-moe-q8_0", 0.05, 1e-3, 1.0, 1e-2},
                                           FamilyCase{"gemma4-tiny-dense31-q8_0", 1.0, 0.3, 1.0, 1e-2}),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// --- the loader refuses what it does not understand ------------------------------------------------

struct Loaded {
  std::unique_ptr<gguf::GgufFile> file;
  ModelConfig config;
  TensorTable tensors;
};

Loaded open_file(const std::string& rel) {
  Loaded l;
  l.file = gguf::GgufFile::open(testdata(rel));
  l.config = ModelConfig::from_gguf(*l.file);
  l.tensors = tensor_table_from_gguf(*l.file);
  return l;
}

std::string bind_error(const Loaded& l, const ModelConfig& c, const TensorTable& t) {
  try {
    ModelWeights::bind(c, t, "file.gguf");
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(FamilyLoader, MoeFileReadAsDenseNamesTheExpertTensors) {
  // What gem4 124aa7a did: no expert keys read, the expert tensors silently ignored.
  Loaded l = open_file("llamacpp-ref-family/gemma4-tiny-moe-f32.gguf");
  EXPECT_EQ(l.config.n_expert, 8);
  EXPECT_EQ(l.config.n_expert_used, 2);
  EXPECT_EQ(l.config.n_ff_exp, 32);
  EXPECT_EQ(bind_error(l, l.config, l.tensors), "");
  ModelConfig dense = l.config;
  dense.n_expert = dense.n_expert_used = dense.n_ff_exp = 0;
  const std::string e = bind_error(l, dense, l.tensors);
  EXPECT_NE(e.find("blk.0.ffn_down_exps.scale"), std::string::npos) << e;
  EXPECT_NE(e.find("not part of any Gemma 4 layout"), std::string::npos) << e;
}

TEST(FamilyLoader, UnknownTensorIsNamed) {
  for (const char* rel : {"llamacpp-ref-family/gemma4-tiny-dense31-f32.gguf", "llamacpp-ref/gemma4-tiny-f32.gguf",
                          "tiny-gemma4/tiny-gemma4-f32.gguf"}) {
    Loaded l = open_file(rel);
    EXPECT_EQ(bind_error(l, l.config, l.tensors), "") << rel;
    TensorTable t = l.tensors;
    t["output.weight"] = t.at("token_embd.weight");  // an untied head gem4 would not read
    const std::string e = bind_error(l, l.config, t);
    EXPECT_NE(e.find("file.gguf: tensor 'output.weight' is not part of"), std::string::npos) << rel << ": " << e;
  }
}

TEST(FamilyLoader, MissingOrMisshapenExpertTensorsAreNamed) {
  Loaded l = open_file("llamacpp-ref-family/gemma4-tiny-moe-f32.gguf");
  {
    TensorTable t = l.tensors;
    t.erase("blk.3.ffn_gate_up_exps.weight");
    const std::string e = bind_error(l, l.config, t);
    EXPECT_NE(e.find("tensor 'blk.3.ffn_gate_up_exps.weight': missing (expected shape [128, 64, 8])"),
              std::string::npos)
        << e;
  }
  {
    TensorTable t = l.tensors;
    t.at("blk.2.ffn_down_exps.weight").ne = {32, 128, 4};
    const std::string e = bind_error(l, l.config, t);
    EXPECT_NE(e.find("tensor 'blk.2.ffn_down_exps.weight': has shape [32, 128, 4], expected [32, 128, 8]"),
              std::string::npos)
        << e;
  }
  {
    // Only one of the separate pair: the missing one is named.
    TensorTable t = l.tensors;
    t["blk.0.ffn_gate_exps.weight"] = t.at("blk.0.ffn_down_exps.weight");
    t.at("blk.0.ffn_gate_exps.weight").ne = {128, 32, 8};
    t.erase("blk.0.ffn_gate_up_exps.weight");
    const std::string e = bind_error(l, l.config, t);
    EXPECT_NE(e.find("tensor 'blk.0.ffn_up_exps.weight': missing (expected shape [128, 32, 8])"),
              std::string::npos)
        << e;
  }
  {
    // Both forms in one layer.
    TensorTable t = l.tensors;
    t["blk.1.ffn_up_exps.weight"] = t.at("blk.1.ffn_down_exps.weight");
    const std::string e = bind_error(l, l.config, t);
    EXPECT_NE(e.find("blk.1.ffn_up_exps.weight': beside ffn_gate_up_exps"), std::string::npos) << e;
  }
}

// llama.cpp reads separate ffn_gate_exps / ffn_up_exps as well as the merged tensor its converter
// writes. Each expert's gate rows and up rows of the merged tensor, split into the two, give the
// merged file's logits bit for bit (F32 and Q8_0, one-shot and in micro-batches of 3).
TEST(FamilyLoader, SeparateGateAndUpExpertsGiveTheMergedLogits) {
  ThreadPool pool(2);
  std::vector<int32_t> ids = {2};
  for (int i = 1; i < 24; ++i) ids.push_back(int32_t(7 + (i * 53) % 1000));
  for (const char* rel :
       {"llamacpp-ref-family/gemma4-tiny-moe-f32.gguf", "llamacpp-ref-family/gemma4-tiny-moe-q8_0.gguf"}) {
    Loaded l = open_file(rel);
    TensorTable t = l.tensors;
    std::vector<std::vector<uint8_t>> bytes;  // the split tensors
    bytes.reserve(size_t(2 * l.config.n_layer));
    for (int layer = 0; layer < l.config.n_layer; ++layer) {
      const std::string p = "blk." + std::to_string(layer) + ".";
      const TensorRef merged = t.at(p + "ffn_gate_up_exps.weight");
      const int64_t in = merged.ne[0], fe = merged.ne[1] / 2, E = merged.ne[2];
      const size_t row = ggml_row_bytes(merged.type, in);
      for (int half = 0; half < 2; ++half) {
        std::vector<uint8_t>& b = bytes.emplace_back(size_t(E * fe) * row);
        for (int64_t e = 0; e < E; ++e)
          std::memcpy(b.data() + size_t(e * fe) * row, merged.data + size_t(e * 2 * fe + half * fe) * row,
                      size_t(fe) * row);
        t[p + (half ? "ffn_up_exps.weight" : "ffn_gate_exps.weight")] = {
            merged.type, {in, fe, E}, b.data(), b.size()};
      }
      t.erase(p + "ffn_gate_up_exps.weight");
    }
    auto split = Model::from_memory(gguf::GgufFile::open(testdata(rel)), std::move(t), nullptr);
    auto whole = Model::load(testdata(rel));
    ASSERT_FALSE(split->weights.layers[0].expert_gate.empty());
    ASSERT_TRUE(split->weights.layers[0].expert_gate_up.empty());
    for (int ub : {512, 3}) {
      const auto a = run_all(*whole, ids, ub, &pool), b = run_all(*split, ids, ub, &pool);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << rel << " ubatch " << ub;
    }
  }
}

}  // namespace
}  // namespace gem4
