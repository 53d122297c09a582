// Audio in the text model's prompt, against llama.cpp's mtmd flow (../shared/testdata/mtmd-ref): the
// clip's soft tokens enter between <|audio> and <audio|> unscaled, with the <pad> row as their
// per-layer-embedding token, decoded CAUSALLY (unlike an image's rows), and the logits of the prompt
// match llama.cpp's, with gem4's own embeddings and with llama.cpp's.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/thread_pool.h"
#include "media/audio_encoder.h"
#include "media/mmproj_file.h"
#include "model/forward.h"
#include "model/model.h"
#include "mtmd_projector.h"
#include "mtmd_prompt.h"
#include "test_util.h"

namespace gem4 {
namespace {

using gem4::test::mtmd;

// The bound is 1e-3, but gem4's text forward alone is 2.8e-3 (1 token) to 7.0e-3 (64 tokens) max
// |diff| from llama.cpp on this random model's plain-text reference (model_llamacpp_test.cpp), so the
// prompt is held to that baseline, 1e-2, as the image prompt is (media_prompt_test.cpp). The audio rows
// themselves are far more exact (embd 2e-6), and their masking is checked far outside the tolerance:
// decoding them bidirectionally instead moves the last logits by more than 0.1.
constexpr double kTextBaseline = 1e-2;

class AudioPrompt : public ::testing::TestWithParam<const char*> {};

TEST_P(AudioPrompt, LogitsMatchLlamaCpp) {
  const std::string id = GetParam();
  const nlohmann::json info = test::mtmd_info(id);
  for (const auto& ch : info["chunks"]) {
    if (ch["type"] != "text") {
      EXPECT_EQ(ch["type"], "audio");
    }
  }
  auto model = Model::load(mtmd("models/gemma4-tiny-mmvocab-f32.gguf"));
  const int d = model->config.d_model, V = info["n_vocab"].get<int>();
  ASSERT_EQ(d, info["n_embd_text"].get<int>());
  ThreadPool pool(2);
  const auto proj = test::open_mtmd_projector("models/gemma4-tiny-audio.gguf");
  const media::AudioEncoder enc(*proj);
  const std::string wav = id.find("aud1") != std::string::npos ? "inputs/aud1-speech-16k-mono.wav"
                                                               : "inputs/aud2-tones-44k1-stereo.wav";
  const std::vector<float> own = enc.encode(media::read_wav_16k_mono(mtmd(wav)), &pool);
  ASSERT_EQ(own.size(), size_t(info["n_media_tokens"].get<int>()) * d);
  const std::vector<float> ref_embd = test::read_f32(mtmd("dumps/" + id + "/embd.f32"));

  const auto last_ref = test::read_f32(mtmd("dumps/" + id + "/logits_last.f32"));
  const auto tail_ref = test::read_f32(mtmd("dumps/" + id + "/logits_tail.f32"));
  ASSERT_EQ(last_ref.size(), size_t(V));
  for (const std::vector<float>* embd : {&own, &ref_embd}) {
    const char* which = embd == &own ? "gem4's embeddings" : "llama.cpp's embeddings";
    SCOPED_TRACE(which);
    const ForwardOutputs last =
        test::run_prompt(*model, test::mtmd_prompt(info, *embd, d, false, -1), 512, &pool);
    ASSERT_EQ(last.logits.size(), size_t(V));
    const double dl = test::max_abs_diff(last.logits.data(), last_ref.data(), V);
    EXPECT_LE(dl, kTextBaseline) << "last-position logits";
    const ForwardOutputs tail =
        test::run_prompt(*model, test::mtmd_prompt(info, *embd, d, true, -1), 512, &pool);
    ASSERT_EQ(tail.logits.size(), tail_ref.size());
    const double dt = test::max_abs_diff(tail.logits.data(), tail_ref.data(), tail_ref.size());
    EXPECT_LE(dt, kTextBaseline) << "logits of the text after the audio";
    const ForwardOutputs bidir =
        test::run_prompt(*model, test::mtmd_prompt(info, *embd, d, false, /*span=*/0), 512, &pool);
    const double db = test::max_abs_diff(bidir.logits.data(), last_ref.data(), V);
    EXPECT_GT(db, 0.1) << "a bidirectional decode of the audio rows must be told apart";
    std::printf("[ audio ] %s, %s: logits max |diff| last %.3g, tail %.3g (bidirectional would be %.3g)\n",
                id.c_str(), which, dl, dt, db);
  }
}

INSTANTIATE_TEST_SUITE_P(MtmdRef, AudioPrompt,
                         ::testing::Values("audio__aud1-speech-16k-mono", "audio__aud2-tones-44k1-stereo"),
                         [](const auto& info) { return std::string(info.param).substr(7, 4); });

}  // namespace
}  // namespace gem4
