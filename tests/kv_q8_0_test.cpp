// The q8_0 KV cache (--kv-type q8_0, as llama.cpp's -ctk/-ctv q8_0): blocks of 32 values with one f16
// scale, read directly by attention. Against references the code under test did not make: llama.cpp's
// logits (F32 KV) on the reference files, gem4's own f32/f16 KV runs, the trained tiny model's
// perplexity with f16 KV; and the cache's sizes from the block layout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "generate/generate.h"
#include "generate/prompt_cache_file.h"
#include "generate/session.h"
#include "kernels/thread_pool.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace gem4 {
namespace {

using nlohmann::json;
using test::read_f32;
using test::testdata;

std::vector<float> run_all(const Model& m, const std::vector<int32_t>& ids, int ubatch, KvType type,
                           ThreadPool* pool) {
  KvCache kv(m.config, 512, 1, ubatch, type);
  Forward f(m, pool);
  f.ubatch = ubatch;
  Batch b;
  for (size_t i = 0; i < ids.size(); ++i) b.push_back({ids[i], int32_t(i), 0, true, false});
  ForwardOutputs out;
  f.run(b, kv, out);
  return out.logits;
}

TEST(KvQ8_0, SizesLayoutAndRows) {
  auto m = Model::load(testdata("tiny-gemma4/tiny-gemma4-f32.gguf"));
  KvCache f16(m->config, 512, 2, 8, KvType::F16), q8(m->config, 512, 2, 8, KvType::Q8_0);
  // 34 bytes per 32 values against 64: the cache is 17/32 of f16's.
  EXPECT_EQ(q8.bytes() * 32, f16.bytes() * 17);
  EXPECT_EQ(q8.position_bytes() * 32, f16.position_bytes() * 17);
  EXPECT_EQ(kv_type_name(q8.type()), std::string("q8_0"));
  EXPECT_NE(q8.layout_signature(), f16.layout_signature());
  EXPECT_NE(q8.layout_signature().find("q8_0"), std::string::npos) << q8.layout_signature();
  // A written row reads back as its Q8_0 rounding: within half a step (amax / 254) of each value, plus
  // the f16 rounding of the step (up to 127 steps x 2^-11 relative: another 12 %).
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int s = 0; s < m->config.n_kv_layers(); ++s) {
    const int w = q8.row_width(s);
    std::vector<float> k(w), v(w), got(w);
    for (int i = 0; i < w; ++i) k[i] = normal(rng), v[i] = i % 32 == 5 ? 0.0f : -k[i];
    q8.write(s, 1, 70, k.data(), v.data());
    q8.read_k(s, 1, q8.cell_of(s, 70), got.data());
    for (int b = 0; b < w / 32; ++b) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(k[b * 32 + i]));
      for (int i = 0; i < 32; ++i)
        ASSERT_NEAR(got[b * 32 + i], k[b * 32 + i], amax / 254 * 1.13f)
            << "slot " << s << " value " << b * 32 + i;
    }
    q8.read_v(s, 1, q8.cell_of(s, 70), got.data());
    for (int i = 5; i < w; i += 32) EXPECT_EQ(got[i], 0.0f);
  }
}

TEST(KvQ8_0, BadTypeOrShapeIsAnErrorNamingIt) {
  try {
    kv_type_from_name("q4_0");
    FAIL() << "q4_0 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-type"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("q8_0"), std::string::npos) << e.what();
  }
  auto m = Model::load(testdata("tiny-gemma4/tiny-gemma4-f32.gguf"));
  ModelConfig c = m->config;
  c.layers[1].head_dim = 48;  // not whole blocks
  try {
    KvCache kv(c, 64, 1, 8, KvType::Q8_0);
    FAIL() << "head_dim 48 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-type q8_0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer 1"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(KvCache(c, 64, 1, 8, KvType::F16));
}

struct RefFile {
  std::string folder, name;
  // Bounds on the q8_0 KV run's per-position NMSE against llama.cpp's logits (F32 KV) and against
  // gem4's f16 KV run: on every position (max) or on the median one, and the share of positions with
  // a clear llama.cpp top-1 (by more than a logit) whose argmax must agree.
  double max_nmse, median_nmse, argmax_share;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// All-position logits with q8_0 KV against llama.cpp (F32 KV) and against gem4 with f32 and f16 KV, on
// the F32 reference files of the E-model, 26B-A4B and 31B layouts (every other difference is gone);
// chunked prompts give the one-shot bits.
class KvQ8_0Reference : public ::testing::TestWithParam<RefFile> {};

TEST_P(KvQ8_0Reference, LogitsNearF32AndF16KvAndChunkedEqualsOneShot) {
  const RefFile rf = GetParam();
  json man;
  std::ifstream(testdata(rf.folder + "/manifest.json")) >> man;
  const json& ref = man["references"][rf.name];
  auto model = Model::load(testdata(rf.folder + "/" + ref["model"].get<std::string>()));
  ThreadPool pool(2);
  const int V = ref["n_vocab"].get<int>();
  for (const json& seq : ref["sequences"]) {
    const std::string sname = seq["name"];
    SCOPED_TRACE(sname);
    const auto ids = seq["token_ids"].get<std::vector<int32_t>>();
    const auto want = read_f32(testdata(rf.folder + "/" + seq["all_logits_file"].get<std::string>()));
    ASSERT_EQ(want.size(), ids.size() * size_t(V));
    const auto f32 = run_all(*model, ids, 512, KvType::F32, &pool);
    const auto f16 = run_all(*model, ids, 512, KvType::F16, &pool);
    const auto q8 = run_all(*model, ids, 512, KvType::Q8_0, &pool);
    std::vector<double> vs_ref, vs_f16, vs_f32, f16_vs_ref;
    int argmax_equal = 0, argmax_clear = 0;
    for (size_t p = 0; p < ids.size(); ++p) {
      const float* g = q8.data() + p * V;
      const float* r = want.data() + p * V;
      vs_ref.push_back(test::nmse(g, r, V));
      vs_f16.push_back(test::nmse(g, f16.data() + p * V, V));
      vs_f32.push_back(test::nmse(g, f32.data() + p * V, V));
      f16_vs_ref.push_back(test::nmse(f16.data() + p * V, r, V));
      std::vector<float> sorted(r, r + V);
      std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<float>());
      if (sorted[0] - sorted[1] > 1.0f) {
        argmax_clear++;
        argmax_equal += std::max_element(g, g + V) - g == std::max_element(r, r + V) - r;
      }
    }
    auto worst = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
    EXPECT_LE(worst(vs_ref), rf.max_nmse);
    EXPECT_LE(worst(vs_f16), rf.max_nmse);
    EXPECT_LE(median(vs_ref), rf.median_nmse);
    EXPECT_LE(median(vs_f16), rf.median_nmse);
    EXPECT_GE(argmax_equal, rf.argmax_share * argmax_clear);
    std::printf(
        "[ kv q8_0 ] %s %s: NMSE vs llama.cpp max %.1e median %.1e; vs f32 KV max %.1e; vs f16 KV max %.1e"
        " median %.1e (f16 KV vs llama.cpp max %.1e); argmax %d/%d\n",
        rf.name.c_str(), sname.c_str(), worst(vs_ref), median(vs_ref), worst(vs_f32), worst(vs_f16),
        median(vs_f16), worst(f16_vs_ref), argmax_equal, argmax_clear);
    // Chunked prompts: the same K/V blocks and the same scores, so the same bits.
    for (int ubatch : {7, 1}) {
      const auto chunked = run_all(*model, ids, ubatch, KvType::Q8_0, &pool);
      ASSERT_EQ(chunked.size(), q8.size());
      EXPECT_EQ(0, std::memcmp(chunked.data(), q8.data(), q8.size() * sizeof(float))) << "ubatch " << ubatch;
    }
  }
}

// Measured (worst position of len1/len7/len64; f16 KV is ~1e-6 on all): E-model 1.8e-3, 31B 1.3e-3,
// so the bound is issue #19's for quantized files, 1e-2 on every position. The random MoE file's
// router gaps are as small as 2e-3 (its README), and the q8_0 rounding of K/V flips experts on some
// len64 positions (NMSE up to 0.7 there, as llama.cpp's own f16-KV run moves it by 0.1 logits with
// flips): its median position is bounded (measured 5e-3) and 85 % of the clear argmaxes.
INSTANTIATE_TEST_SUITE_P(
    Files, KvQ8_0Reference,
    ::testing::Values(RefFile{"llamacpp-ref", "gemma4-tiny-f32", 1e-2, 1e-2, 1.0},
                      RefFile{"llamacpp-ref-family", "gemma4-tiny-moe-f32", 1.0, 1e-2, 0.85},
                      RefFile{"llamacpp-ref-family", "gemma4-tiny-dense31-f32", 1e-2, 1e-2, 1.0}),
    [](const auto& info) {
      std::string n = info.param.name;
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

// llama-perplexity's protocol (as gem4 perplexity): chunks of n_ctx tokens, BOS first, the second half
// of each chunk scored. Returns the perplexity.
double perplexity(const Model& m, const std::vector<int32_t>& tokens, int n_ctx, int n_chunks, KvType type,
                  ThreadPool* pool, size_t* kv_bytes) {
  KvCache kv(m.config, n_ctx, 1, n_ctx, type);
  *kv_bytes = kv.bytes();
  Forward f(m, pool);
  f.ubatch = n_ctx;
  double nll = 0;
  long long count = 0;
  for (int ch = 0; ch < n_chunks; ++ch) {
    kv.clear(0);
    Batch b;
    for (int j = 0; j < n_ctx; ++j)
      b.push_back(
          {j == 0 ? 2 : tokens[size_t(ch) * n_ctx + j], j, 0, j >= n_ctx / 2 && j < n_ctx - 1, false});
    ForwardOutputs out;
    f.run(b, kv, out);
    for (size_t r = 0; r < out.logit_rows.size(); ++r) {
      const float* lg = out.logits.data() + r * size_t(out.n_vocab);
      const double mx = *std::max_element(lg, lg + out.n_vocab);
      double sum = 0;
      for (int v = 0; v < out.n_vocab; ++v) sum += std::exp(double(lg[v]) - mx);
      nll -= double(lg[tokens[size_t(ch) * n_ctx + out.logit_rows[r] + 1]]) - mx - std::log(sum);
      count++;
    }
  }
  return std::exp(nll / double(count));
}

// Issue #19's acceptance on the trained tiny model: perplexity on valid.txt (ctx 256) within 0.5 % of
// f16 KV, the cache about half the size. The whole file (181 chunks) takes a minute on this machine;
// the test scores the first 16 chunks (2,032 tokens) and anchors the f16 run to f32 KV (llama.cpp:
// 2e-4 apart on the whole file). `gem4 perplexity --kv-type` gives the whole file's figures.
TEST(KvQ8_0, SlowPerplexityOfTheTrainedModelWithinHalfAPercentOfF16) {
  auto m = Model::load(testdata("tiny-gemma4/tiny-gemma4-f32.gguf"));
  std::ifstream f(testdata("tiny-gemma4/valid.txt"), std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto tokens = text::Tokenizer::from_gguf(*m->file).encode(text, true, false);
  ASSERT_EQ(tokens.size(), 46465u);  // the README's count
  ThreadPool pool(2);
  const int n_ctx = 256, n_chunks = 16;
  size_t bytes_f32 = 0, bytes_f16 = 0, bytes_q8 = 0;
  const double ppl_f32 = perplexity(*m, tokens, n_ctx, n_chunks, KvType::F32, &pool, &bytes_f32);
  const double ppl_f16 = perplexity(*m, tokens, n_ctx, n_chunks, KvType::F16, &pool, &bytes_f16);
  const double ppl_q8 = perplexity(*m, tokens, n_ctx, n_chunks, KvType::Q8_0, &pool, &bytes_q8);
  std::printf(
      "[ kv q8_0 ] valid.txt ctx %d, %d chunks: PPL f32 KV %.4f, f16 KV %.4f (%zu bytes), q8_0 KV %.4f"
      " (%zu bytes), %+.3f %%\n",
      n_ctx, n_chunks, ppl_f32, ppl_f16, bytes_f16, ppl_q8, bytes_q8, 100 * (ppl_q8 / ppl_f16 - 1));
  EXPECT_LE(std::fabs(ppl_f16 / ppl_f32 - 1), 5e-4);
  EXPECT_LE(std::fabs(ppl_q8 / ppl_f16 - 1), 0.005);
  EXPECT_EQ(bytes_q8 * 32, bytes_f16 * 17);
}

// The K/V rows the prefix store and the prompt cache move are q8_0 blocks: a prefix resumed from the
// store gives the fresh computation's bits, and a prompt-cache entry saved with f16 KV is not used
// with q8_0 KV (the layout key names the type), while a q8_0 one comes back.
TEST(KvQ8_0, PrefixStoreResumesAndPromptCacheKeysTheType) {
  auto m = Model::load(testdata("tiny-gemma4/tiny-gemma4-f32.gguf"));
  ThreadPool pool(1);
  const int V = int(m->weights.token_embd.out);
  std::mt19937_64 rng(9);
  std::vector<int32_t> shared(200), a, b;
  for (auto& t : shared) t = int32_t(19 + rng() % uint64_t(V - 19));
  a = b = shared;
  for (int i = 0; i < 150; ++i) a.push_back(int32_t(19 + rng() % uint64_t(V - 19)));
  for (int i = 0; i < 40; ++i) b.push_back(int32_t(19 + rng() % uint64_t(V - 19)));
  SessionOptions o;
  o.n_ctx = 1024, o.ubatch = 8, o.kv_type = KvType::Q8_0, o.prefix_store_bytes = 64u << 20;
  Session with_store(*m, &pool, o);
  o.prefix_store_bytes = 0;
  Session fresh(*m, &pool, o);
  with_store.set_tokens(a);
  EXPECT_FALSE(with_store.kv().can_truncate(0, 200)) << "the rings moved past the shared prefix";
  EXPECT_LT(with_store.set_tokens(b), int(b.size()) - 100) << "resumed from the store";
  fresh.set_tokens(b);
  EXPECT_EQ(0, std::memcmp(with_store.logits(), fresh.logits(), size_t(V) * sizeof(float)));

  // The prompt cache: chunks exported from the q8_0 cache, keyed by its layout.
  const std::string dir = ::testing::TempDir() + "gem4_kv_q8_0_pc_" + std::to_string(::getpid());
  generate::clear_prompt_cache_dir(dir);
  KvCache& kv = with_store.kv();
  const int C = 16;
  KvCache f16(m->config, 1024, 1, 8, KvType::F16);
  generate::PromptCacheKey key_q8{7, kv.layout_signature(), C, kv.position_bytes() * C};
  generate::PromptCacheKey key_f16{7, f16.layout_signature(), C, f16.position_bytes() * C};
  const int live = kv.live_from(0), first_chunk = (live + C - 1) / C;
  ASSERT_LT(first_chunk * C + 2 * C, int(b.size()));
  {
    generate::PromptCacheDir d16(dir, key_f16, 1 << 30);
    ASSERT_TRUE(d16.save(std::vector<int32_t>(b.begin(), b.begin() + 4 * C), 4,
                         [&](int, uint8_t* dst) { std::memset(dst, 0x3c, key_f16.chunk_bytes); }));
  }
  generate::PromptCacheDir dq8(dir, key_q8, 1 << 30);
  EXPECT_EQ(
      dq8.load(b, 100, [](int, const uint8_t*) { FAIL() << "an f16 entry was handed to a q8_0 cache"; }), 0);
  // Save the chunks the q8_0 cache still holds (with zeros before them), load them into a second
  // sequence's cells, and compare the rows.
  const int n_chunks = int(b.size()) / C;
  ASSERT_TRUE(dq8.save(b, n_chunks, [&](int i, uint8_t* dst) {
    if (i < first_chunk) {
      std::memset(dst, 0, key_q8.chunk_bytes);
    } else {
      kv.export_rows(0, i * C, (i + 1) * C, dst);
    }
  }));
  KvCache back(m->config, 1024, 1, 8, KvType::Q8_0);
  EXPECT_EQ(dq8.load(b, n_chunks,
                     [&](int i, const uint8_t* data) {
                       back.import_rows(0, i * C, (i + 1) * C, data, first_chunk * C, first_chunk * C);
                     }),
            n_chunks);
  const int pos = n_chunks * C - 1;
  for (int s = 0; s < m->config.n_kv_layers(); ++s) {
    const size_t row = size_t(kv.row_width(s)) / 32 * 34;
    EXPECT_EQ(0,
              std::memcmp(kv.k_row(s, 0, kv.cell_of(s, pos)), back.k_row(s, 0, back.cell_of(s, pos)), row));
    EXPECT_EQ(0,
              std::memcmp(kv.v_row(s, 0, kv.cell_of(s, pos)), back.v_row(s, 0, back.cell_of(s, pos)), row));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gem4
