// Media in the text model's prompt, against llama.cpp's mtmd flow (../shared/testdata/mtmd-ref): soft
// tokens enter unscaled with the <pad> row as their per-layer-embedding token, the image's rows attend
// to each other (no causal mask among them), and the logits of the prompt match.
#include "generate/media_prompt.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "generate/prompt_cache_file.h"
#include "generate/session.h"
#include "kernels/thread_pool.h"
#include "media/image.h"
#include "media/mmproj_file.h"
#include "media/vision_encoder.h"
#include "model/forward.h"
#include "model/model.h"
#include "mtmd_projector.h"
#include "mtmd_prompt.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace gem4 {
namespace {

using gem4::test::mtmd;

class MediaPrompt : public ::testing::TestWithParam<const char*> {};

// Tolerance: the issue asks for 1e-3, but this random model turns any rounding difference into ~1e-3
// in the logits (one ulp moves an f16 GELU-table input across a rounding tie). gem4's ordinary
// kernels are 2.8e-3 (1 token) to 7.0e-3 (64 tokens) max |diff| from llama.cpp on the plain-text
// reference (llamacpp-ref/gemma4-tiny-f32, model_llamacpp_test.cpp). With llama.cpp's summation order
// (PlanSwitches::llama_f32_order) the plain text matches to 2e-6, and these media prompts match
// upstream llama.cpp (b10361 and de3ff81, which agree bit for bit) to 2e-6 too
// (media_upstream_test.cpp), but not the patched 3f545be build that made this data: upstream itself
// is 8e-4 (last) to 6e-3 (tail) from it with the same media rows, as far as one ulp in those rows
// goes. Both orders are held to 1e-2 here. The masking itself is far outside it: decoding the image
// causally moves the last logits by 0.65-4.2, and the causal variant is checked against llama.cpp's
// causal logits too.
constexpr double kTextBaseline = 1e-2;

TEST_P(MediaPrompt, ImageLogitsMatchLlamaCpp) {
  const std::string id = GetParam();
  const nlohmann::json info = test::mtmd_info(id);
  auto model = Model::load(mtmd("models/gemma4-tiny-mmvocab-f32.gguf"));
  const int d = model->config.d_model, V = info["n_vocab"].get<int>();
  ASSERT_EQ(d, info["n_embd_text"].get<int>());
  ThreadPool pool(2);
  auto proj = test::open_mtmd_projector("models/gemma4-tiny-vision.gguf");
  media::VisionEncoder enc(*proj);
  const std::string input =
      id.find("img1") != std::string::npos ? "inputs/img1-rgba-320x240.png" : "inputs/img2-photo-200x300.jpg";
  const std::vector<float> own = enc.encode(media::load_image_file(mtmd(input)), &pool);
  ASSERT_EQ(own.size(), size_t(info["n_media_tokens"].get<int>()) * d);
  // llama.cpp's own embeddings too: the text side alone.
  const std::vector<float> ref_embd = test::read_f32(mtmd("dumps/" + id + "/embd.f32"));

  const auto last_ref = test::read_f32(mtmd("dumps/" + id + "/logits_last.f32"));
  const auto tail_ref = test::read_f32(mtmd("dumps/" + id + "/logits_tail.f32"));
  const auto causal_ref = test::read_f32(mtmd("dumps/" + id + "/logits_last_causal.f32"));
  ASSERT_EQ(last_ref.size(), size_t(V));
  for (const bool llama_order : {false, true}) {
    PlanSwitches sw;
    sw.llama_f32_order = llama_order;
    for (const std::vector<float>* embd : {&own, &ref_embd}) {
      const char* which = embd == &own ? "gem4's embeddings" : "llama.cpp's embeddings";
      SCOPED_TRACE(std::string(which) + (llama_order ? ", llama.cpp's order" : ""));
      const double tol = kTextBaseline;
      const ForwardOutputs last =
          test::run_prompt(*model, test::mtmd_prompt(info, *embd, d, false, 0), 512, &pool, sw);
      ASSERT_EQ(last.logits.size(), size_t(V));
      const double dl = test::max_abs_diff(last.logits.data(), last_ref.data(), V);
      EXPECT_LE(dl, tol) << "last-position logits";
      const ForwardOutputs tail =
          test::run_prompt(*model, test::mtmd_prompt(info, *embd, d, true, 0), 512, &pool, sw);
      ASSERT_EQ(tail.logits.size(), tail_ref.size());
      const double dt = test::max_abs_diff(tail.logits.data(), tail_ref.data(), tail_ref.size());
      EXPECT_LE(dt, tol) << "logits of the text after the image";
      const ForwardOutputs causal =
          test::run_prompt(*model, test::mtmd_prompt(info, *embd, d, false, -1), 512, &pool, sw);
      const double dc = test::max_abs_diff(causal.logits.data(), causal_ref.data(), V);
      EXPECT_LE(dc, tol) << "last-position logits, image decoded causally";
      // The two maskings are told apart far beyond the tolerance.
      EXPECT_GT(test::max_abs_diff(causal.logits.data(), last_ref.data(), V), 0.3);
      std::printf("  %s, %s%s: logits max |diff| last %.3g, tail %.3g, causal %.3g\n", id.c_str(), which,
                  llama_order ? " (llama.cpp's order)" : "", dl, dt, dc);
    }
  }
  // A micro-batch too small for the image is refused, not split.
  EXPECT_THROW(test::run_prompt(*model, test::mtmd_prompt(info, own, d, false, 0), 16, &pool),
               std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(MtmdRef, MediaPrompt,
                         ::testing::Values("vision__img1-rgba-320x240", "vision__img2-photo-200x300"),
                         [](const auto& info) { return std::string(info.param).substr(8, 4); });

// The image span is not split between micro-batches: with a micro-batch boundary inside it, the plan ends
// the micro-batch before the image, and the logits are those of one-shot decoding.
TEST(MediaPrompt, AnImageSpanMovesToTheNextMicroBatch) {
  const nlohmann::json info = test::mtmd_info("vision__img2-photo-200x300");
  auto model = Model::load(mtmd("models/gemma4-tiny-mmvocab-f32.gguf"));
  const int d = model->config.d_model;
  const auto ref_embd = test::read_f32(mtmd("dumps/vision__img2-photo-200x300/embd.f32"));
  const Batch b = test::mtmd_prompt(info, ref_embd, d, true, 0);
  const ForwardOutputs one = test::run_prompt(*model, b, 512, nullptr);
  const ForwardOutputs split =
      test::run_prompt(*model, b, 50, nullptr);  // 7 text rows + 43 image rows would cross
  ASSERT_EQ(one.logits.size(), split.logits.size());
  EXPECT_LE(test::max_abs_diff(one.logits.data(), split.logits.data(), one.logits.size()), 1e-4);
  const auto plans = plan_batch(b, 50, model->config, PlanSwitches{});
  ASSERT_GE(plans.size(), 2u);
  EXPECT_EQ(plans[0].count, 7);
  // Media rows are prompt rows: pruned before the KV-shared tail like text rows, the same logits.
  ASSERT_GT(model->config.n_kv_shared, 0);
  KvCache kv(model->config, 256, 1, 512, KvType::F32);
  Forward f(*model, nullptr);
  f.switches.prune = false;
  ForwardOutputs unpruned;
  f.run(b, kv, unpruned);
  EXPECT_LE(test::max_abs_diff(one.logits.data(), unpruned.logits.data(), one.logits.size()), 1e-4);
}

}  // namespace
}  // namespace gem4

namespace gem4 {
namespace {

// The span of the reference prompt's image (img1 or img2: 48 soft tokens after 7 text tokens).
std::vector<generate::MediaSpan> image_at_7(const std::shared_ptr<std::vector<float>>& e) {
  generate::MediaSpan m;
  m.first = 7;
  m.count = 48;
  m.bidirectional = true;
  m.embd = e;
  m.hash = generate::media_hash(*e);
  return {m};
}

// The same prompt through a Session (the engine's prompt chunks and prefix reuse): the image spans of
// the history, chunks that never split an image, reuse keyed on the image's content.
TEST(MediaPrompt, SessionChunksAndReusesByContent) {
  const nlohmann::json info = test::mtmd_info("vision__img1-rgba-320x240");
  auto model = Model::load(mtmd("models/gemma4-tiny-mmvocab-f32.gguf"));
  const int d = model->config.d_model;
  auto e1 =
      std::make_shared<std::vector<float>>(test::read_f32(mtmd("dumps/vision__img1-rgba-320x240/embd.f32")));
  auto e2 =
      std::make_shared<std::vector<float>>(test::read_f32(mtmd("dumps/vision__img2-photo-200x300/embd.f32")));
  const Batch rows = test::mtmd_prompt(info, *e1, d, false, 0);
  std::vector<int32_t> ids;
  for (const BatchRow& r : rows) ids.push_back(r.token);

  const auto last_ref = test::read_f32(mtmd("dumps/vision__img1-rgba-320x240/logits_last.f32"));
  const ForwardOutputs direct = test::run_prompt(*model, rows, 512, nullptr);
  SessionOptions opt;
  opt.n_ctx = 256;
  opt.ubatch = 50;  // the first chunk would end inside the image: it ends before it instead
  opt.kv_type = KvType::F32;
  Session s(*model, nullptr, opt);
  EXPECT_EQ(s.set_tokens(ids, image_at_7(e1)), int(ids.size()));
  EXPECT_LE(test::max_abs_diff(s.logits(), direct.logits.data(), direct.logits.size()), 1e-4);
  EXPECT_LE(test::max_abs_diff(s.logits(), last_ref.data(), last_ref.size()), kTextBaseline);
  // The same image again: only the last token is recomputed.
  EXPECT_EQ(s.set_tokens(ids, image_at_7(e1)), 1);
  // Another image with the same token ids: everything from the image on is recomputed (all of it when
  // the sliding rings cannot roll back to the image's start).
  const bool rolls_back = s.kv().can_truncate(0, 7);
  EXPECT_EQ(s.set_tokens(ids, image_at_7(e2)), int(ids.size()) - (rolls_back ? 7 : 0));
  const ForwardOutputs other =
      test::run_prompt(*model, test::mtmd_prompt(info, *e2, d, false, 0), 512, nullptr);
  EXPECT_LE(test::max_abs_diff(s.logits(), other.logits.data(), other.logits.size()), 1e-4);
  // A span that does not fit is refused.
  auto bad = image_at_7(e1);
  bad[0].count = 47;
  EXPECT_THROW(s.set_tokens(ids, bad), std::invalid_argument);
}

}  // namespace
}  // namespace gem4

namespace gem4 {
namespace {

// The prefix store and the prompt cache on disk with media in the history: chunks are keyed on the
// media's content, so a prompt whose sliding rings have moved past the image resumes after it when the
// image is the same (and gives a fresh session's logits), and not when another image sits at the same
// place with the same token ids. Text before the first image is shared either way.
TEST(MediaPrompt, PrefixCachesResumePastTheSameImageOnly) {
  const nlohmann::json info = test::mtmd_info("vision__img1-rgba-320x240");
  auto model = Model::load(mtmd("models/gemma4-tiny-mmvocab-f32.gguf"));
  const int d = model->config.d_model, V = int(model->weights.token_embd.out);
  auto e1 =
      std::make_shared<std::vector<float>>(test::read_f32(mtmd("dumps/vision__img1-rgba-320x240/embd.f32")));
  auto e2 =
      std::make_shared<std::vector<float>>(test::read_f32(mtmd("dumps/vision__img2-photo-200x300/embd.f32")));
  std::vector<int32_t> head;
  for (const BatchRow& r : test::mtmd_prompt(info, *e1, d, false, 0)) head.push_back(r.token);

  auto with_tail = [&](int n, uint32_t seed) {
    std::vector<int32_t> t = head;
    std::mt19937 rng(seed);
    for (int i = 0; i < n; ++i) t.push_back(int32_t(10 + rng() % uint32_t(V - 10)));
    return t;
  };
  SessionOptions opt;
  opt.n_ctx = 512;
  opt.ubatch = 64;
  opt.kv_type = KvType::F32;
  opt.prefix_store_bytes = 64u << 20;
  SessionOptions fresh_opt = opt;
  fresh_opt.prefix_store_bytes = 0;
  const int C = 16, shared = int(head.size());
  const auto a = with_tail(260, 1), b = with_tail(30, 2);

  Session s(*model, nullptr, opt);
  s.set_tokens(a, image_at_7(e1));
  ASSERT_FALSE(s.kv().can_truncate(0, shared)) << "the rings must have moved past the shared prefix";
  // The same image: resumed at the last chunk boundary of the shared prefix, past the image.
  EXPECT_EQ(s.set_tokens(b, image_at_7(e1)), int(b.size()) - shared / C * C);
  Session fresh(*model, nullptr, fresh_opt);
  fresh.set_tokens(b, image_at_7(e1));
  EXPECT_LE(test::max_abs_diff(s.logits(), fresh.logits(), V), 1e-5);
  EXPECT_EQ(s.store()->stats().restores, 1);

  // Another image, the same token ids: nothing after the text before it comes from the store.
  s.set_tokens(a, image_at_7(e1));
  EXPECT_EQ(s.set_tokens(b, image_at_7(e2)), int(b.size()) - 7 / C * C);
  Session fresh2(*model, nullptr, fresh_opt);
  fresh2.set_tokens(b, image_at_7(e2));
  EXPECT_LE(test::max_abs_diff(s.logits(), fresh2.logits(), V), 1e-5);

  // The prompt cache on disk keys the same way: a new session (another process, say) with an empty store
  // resumes past the same image from the folder, and not past another image.
  const std::string dir = ::testing::TempDir() + "gem4_media_prompt_cache_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  auto open_dir = [&](Session& x) {
    generate::PromptCacheKey key;
    key.model_id = generate::model_file_identity(*model->file);
    key.layout = x.kv().layout_signature();
    key.chunk_tokens = x.store()->chunk_tokens();
    key.chunk_bytes = x.store()->chunk_bytes();
    return std::make_unique<generate::PromptCacheDir>(dir, key, uint64_t(64) << 20);
  };
  {
    Session writer(*model, nullptr, opt);
    auto disk = open_dir(writer);
    writer.engine().set_disk(disk.get());
    writer.set_tokens(a, image_at_7(e1));
    writer.engine().save_prompt(writer.sequence(), int(a.size()));
  }
  for (const auto& e : {e1, e2}) {
    Session reader(*model, nullptr, opt);
    auto disk = open_dir(reader);
    reader.engine().set_disk(disk.get());
    const int processed = reader.set_tokens(b, image_at_7(e));
    EXPECT_EQ(processed, int(b.size()) - (e == e1 ? shared / C * C : 0))
        << (e == e1 ? "same image" : "other image");
    Session ref(*model, nullptr, fresh_opt);
    ref.set_tokens(b, image_at_7(e));
    EXPECT_LE(test::max_abs_diff(reader.logits(), ref.logits(), V), 1e-5);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gem4

namespace gem4 {
namespace {

// The prompt as llama.cpp's mtmd builds it: the tokenized text with the placeholder, expanded into
// <|image> + 48 soft tokens + <image|>, gives the reference's token ids and its logits.
TEST(MediaPrompt, PlaceholdersExpandToTheReferenceLayout) {
  const nlohmann::json info = test::mtmd_info("vision__img1-rgba-320x240");
  auto model = Model::load(mtmd("models/gemma4-tiny-mmvocab-f32.gguf"));
  const auto tok = text::Tokenizer::from_gguf(*model->file);
  std::vector<int32_t> ids =
      tok.encode("<|turn>user\n<|image|>Describe this image.<turn|>\n<|turn>model\n", true, true);
  generate::MediaInput m;
  m.embd =
      std::make_shared<std::vector<float>>(test::read_f32(mtmd("dumps/vision__img1-rgba-320x240/embd.f32")));
  m.rows = 48;
  m.hash = generate::media_hash(*m.embd);
  const auto spans = generate::expand_media(ids, tok, {m});
  std::vector<int32_t> want = info["chunks"][0]["ids"].get<std::vector<int32_t>>();
  want.insert(want.end(), 48, tok.pad());
  for (int id : info["chunks"][2]["ids"].get<std::vector<int32_t>>()) want.push_back(id);
  EXPECT_EQ(ids, want);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].first, 7);
  EXPECT_EQ(spans[0].count, 48);
  EXPECT_TRUE(spans[0].bidirectional);
  SessionOptions opt;
  opt.n_ctx = 256;
  opt.kv_type = KvType::F32;
  Session s(*model, nullptr, opt);
  s.set_tokens(ids, spans);
  const auto ref = test::read_f32(mtmd("dumps/vision__img1-rgba-320x240/logits_last.f32"));
  EXPECT_LE(test::max_abs_diff(s.logits(), ref.data(), ref.size()), kTextBaseline);
  // A prompt without the placeholder gets it after BOS; more placeholders than media is an error.
  std::vector<int32_t> plain = tok.encode("Describe this image.", true, true);
  const auto added = generate::expand_media(plain, tok, {m});
  ASSERT_EQ(added.size(), 1u);
  EXPECT_EQ(added[0].first, 2);  // <bos> <|image>
  std::vector<int32_t> two = tok.encode("<|image|><|image|>", true, true);
  EXPECT_THROW(generate::expand_media(two, tok, {m}), std::invalid_argument);
}

}  // namespace
}  // namespace gem4

namespace gem4 {
namespace {

// Audio soft tokens are decoded causally: the reference's audio prompts, from the placeholder.
TEST(MediaPrompt, AudioPromptsAreCausalAndMatchLlamaCpp) {
  auto model = Model::load(mtmd("models/gemma4-tiny-mmvocab-f32.gguf"));
  const auto tok = text::Tokenizer::from_gguf(*model->file);
  for (const char* id : {"audio__aud1-speech-16k-mono", "audio__aud2-tones-44k1-stereo"}) {
    SCOPED_TRACE(id);
    const nlohmann::json info = test::mtmd_info(id);
    std::vector<int32_t> ids =
        tok.encode("<|turn>user\n<|audio|>Transcribe this audio.<turn|>\n<|turn>model\n", true, true);
    generate::MediaInput m;
    m.image = false;
    m.embd =
        std::make_shared<std::vector<float>>(test::read_f32(mtmd(std::string("dumps/") + id + "/embd.f32")));
    m.rows = info["n_media_tokens"].get<int>();
    m.hash = generate::media_hash(*m.embd);
    const auto spans = generate::expand_media(ids, tok, {m});
    ASSERT_EQ(spans.size(), 1u);
    EXPECT_FALSE(spans[0].bidirectional);
    std::vector<int32_t> want = info["chunks"][0]["ids"].get<std::vector<int32_t>>();
    want.insert(want.end(), size_t(m.rows), tok.pad());
    for (int t : info["chunks"][2]["ids"].get<std::vector<int32_t>>()) want.push_back(t);
    EXPECT_EQ(ids, want);
    SessionOptions opt;
    opt.n_ctx = 256;
    opt.kv_type = KvType::F32;
    Session s(*model, nullptr, opt);
    s.set_tokens(ids, spans);
    const auto ref = test::read_f32(mtmd(std::string("dumps/") + id + "/logits_last.f32"));
    const double dl = test::max_abs_diff(s.logits(), ref.data(), ref.size());
    EXPECT_LE(dl, kTextBaseline);
    std::printf("  %s: last logits max |diff| %.3g\n", id, dl);
  }
}

}  // namespace
}  // namespace gem4
