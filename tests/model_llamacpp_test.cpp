// gem4's logits against llama.cpp's, for the models in ../shared/testdata/llamacpp-ref (see its
// manifest.json: F32 KV cache, every position, last position, and 32 teacher-forced greedy steps).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "isa_override.h"
#include "kernels/thread_pool.h"
#include "model/forward.h"
#include "model/model.h"
#include "test_util.h"

namespace gem4 {
namespace {

using nlohmann::json;
using test::testdata;
using test::read_f32;

struct RefCase {
  std::string model_name;  // key in manifest "references"
  double nmse_limit;
};

json manifest() {
  std::ifstream f(testdata("llamacpp-ref/manifest.json"));
  json j;
  f >> j;
  return j;
}

// Runs `ids` as one sequence in a fresh cache; logits for every position (all) or the last only.
ForwardOutputs run_ids(const Model& m, const std::vector<int32_t>& ids, bool all, int ubatch, ThreadPool* pool,
                       KvCache* kv_out = nullptr, PlanSwitches sw = {}) {
  KvCache local(m.config, 512, 1, std::max(ubatch, 1), KvType::F32);
  KvCache& kv = kv_out ? *kv_out : local;
  Forward f(m, pool);
  f.ubatch = ubatch;
  f.switches = sw;
  Batch b;
  for (size_t i = 0; i < ids.size(); ++i) b.push_back({ids[i], int32_t(i), 0, all || i + 1 == ids.size(), false});
  ForwardOutputs out;
  f.run(b, kv, out);
  return out;
}

class LlamaCppReference : public ::testing::TestWithParam<RefCase> {};

TEST_P(LlamaCppReference, AllPositionsLastPositionAndGreedySteps) {
  const RefCase rc = GetParam();
  const json man = manifest();
  ASSERT_TRUE(man["references"].contains(rc.model_name));
  const json& ref = man["references"][rc.model_name];
  auto model = Model::load(testdata("llamacpp-ref/" + ref["model"].get<std::string>()));
  ThreadPool pool(2);
  const int V = ref["n_vocab"].get<int>();
  for (const json& seq : ref["sequences"]) {
    SCOPED_TRACE(seq["name"].get<std::string>());
    const auto ids = seq["token_ids"].get<std::vector<int32_t>>();
    const auto all_ref = read_f32(testdata("llamacpp-ref/" + seq["all_logits_file"].get<std::string>()));
    ASSERT_EQ(all_ref.size(), ids.size() * size_t(V));

    // Every position, in several micro-batch sizes; all must match llama.cpp and each other.
    std::vector<float> first;
    for (int ubatch : {512, 7, 1}) {
      ForwardOutputs out = run_ids(*model, ids, true, ubatch, &pool);
      ASSERT_EQ(out.logits.size(), all_ref.size());
      for (size_t p = 0; p < ids.size(); ++p) {
        const double e = test::nmse(out.logits.data() + p * V, all_ref.data() + p * V, V);
        EXPECT_LE(e, rc.nmse_limit) << "position " << p << " ubatch " << ubatch;
      }
      if (first.empty()) {
        first = out.logits;
      } else {
        EXPECT_LE(test::max_abs_diff(out.logits.data(), first.data(), first.size()), 1e-3)
            << "ubatch " << ubatch << " differs from one-shot";
      }
    }

    // Last position only, then 32 teacher-forced greedy steps continuing from that cache.
    const auto last_ref = read_f32(testdata("llamacpp-ref/" + seq["last_logits_file"].get<std::string>()));
    const auto greedy_ref = read_f32(testdata("llamacpp-ref/" + seq["greedy_logits_file"].get<std::string>()));
    const auto greedy_ids = seq["greedy_token_ids"].get<std::vector<int32_t>>();
    const auto margins = seq["greedy_top1_margin"].get<std::vector<double>>();
    KvCache kv(model->config, 512, 1, 512, KvType::F32);
    ForwardOutputs out = run_ids(*model, ids, false, 512, &pool, &kv);
    ASSERT_EQ(out.logits.size(), size_t(V));
    EXPECT_LE(test::nmse(out.logits.data(), last_ref.data(), V), rc.nmse_limit);
    Forward f(*model, &pool);
    for (size_t k = 0; k < greedy_ids.size(); ++k) {
      const float* lg = k == 0 ? out.logits.data() : nullptr;
      ForwardOutputs step;
      if (k > 0) {
        f.run({{greedy_ids[k - 1], int32_t(ids.size() + k - 1), 0, true, false}}, kv, step);
        lg = step.logits.data();
      }
      EXPECT_LE(test::nmse(lg, greedy_ref.data() + k * V, V), rc.nmse_limit) << "greedy step " << k;
      const int argmax = int(std::max_element(lg, lg + V) - lg);
      if (margins[k] > 0.05) {
        EXPECT_EQ(argmax, greedy_ids[k]) << "greedy step " << k << " margin " << margins[k];
      }
    }
  }
}

// With PlanSwitches::llama_f32_order the F32 model reproduces llama.cpp's summation order, so its
// logits match to float noise on every kernel set (the ordinary kernels: ~3e-3 at len1, 7e-3 at
// len64, from single f16 GELU-table inputs rounding the other way).
TEST(LlamaCppOrder, F32ModelMatchesOnEveryKernelSetAtEveryPositionAndGreedyStep) {
  const json man = manifest();
  const json& ref = man["references"]["gemma4-tiny-f32"];
  auto model = Model::load(testdata("llamacpp-ref/" + ref["model"].get<std::string>()));
  ThreadPool pool(2);
  const int V = ref["n_vocab"].get<int>();
  PlanSwitches sw;
  sw.llama_f32_order = true;
  constexpr double kTol = 1e-5;  // measured: 1.9e-6 on the AVX sets (softcap/tanh), 0 on the scalar set
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) continue;
    test::IsaOverride o(isa);
    SCOPED_TRACE(isa_name(isa));
    double worst = 0;
    for (const json& seq : ref["sequences"]) {
      SCOPED_TRACE(seq["name"].get<std::string>());
      const auto ids = seq["token_ids"].get<std::vector<int32_t>>();
      const auto all_ref = read_f32(testdata("llamacpp-ref/" + seq["all_logits_file"].get<std::string>()));
      const ForwardOutputs all = run_ids(*model, ids, true, 512, &pool, nullptr, sw);
      ASSERT_EQ(all.logits.size(), all_ref.size());
      const double da = test::max_abs_diff(all.logits.data(), all_ref.data(), all_ref.size());
      EXPECT_LE(da, kTol) << "all positions";
      worst = std::max(worst, da);
      // Last position only, then the teacher-forced greedy steps (one row each) from that cache.
      const auto last_ref = read_f32(testdata("llamacpp-ref/" + seq["last_logits_file"].get<std::string>()));
      const auto greedy_ref =
          read_f32(testdata("llamacpp-ref/" + seq["greedy_logits_file"].get<std::string>()));
      const auto greedy_ids = seq["greedy_token_ids"].get<std::vector<int32_t>>();
      KvCache kv(model->config, 512, 1, 512, KvType::F32);
      const ForwardOutputs last = run_ids(*model, ids, false, 512, &pool, &kv, sw);
      ASSERT_EQ(last.logits.size(), size_t(V));
      const double dl = test::max_abs_diff(last.logits.data(), last_ref.data(), V);
      EXPECT_LE(dl, kTol) << "last position";
      worst = std::max(worst, dl);
      Forward f(*model, &pool);
      f.switches = sw;
      for (size_t k = 1; k < greedy_ids.size(); ++k) {
        ForwardOutputs step;
        f.run({{greedy_ids[k - 1], int32_t(ids.size() + k - 1), 0, true, false}}, kv, step);
        const double dg = test::max_abs_diff(step.logits.data(), greedy_ref.data() + k * V, V);
        EXPECT_LE(dg, kTol) << "greedy step " << k;
        worst = std::max(worst, dg);
      }
    }
    std::printf("  %s: max |dlogit| vs llama.cpp %.3g\n", isa_name(isa), worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, LlamaCppReference,
                         ::testing::Values(RefCase{"gemma4-tiny-f32", 1e-5}, RefCase{"gemma4-tiny-q8_0", 1e-3}),
                         [](const auto& info) {
                           std::string n = info.param.model_name;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace gem4
