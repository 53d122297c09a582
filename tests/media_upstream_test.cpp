// The text model with media in the prompt against upstream llama.cpp. ../shared/testdata/mtmd-ref was
// made by llama.cpp 3f545be carrying a local patch; upstream llama.cpp before it (b10361, c2fd87e,
// 2026-08-11) and after it (de3ff81, 2026-09-28, the tree in node-llama-cpp 3.22.1) give bit-identical
// logits on its prompts, fed the reference data's own media rows, and both differ from that data by
// 8e-4..2.9e-3 (last row) and 3e-3..6e-3 (the rows after the media): on this random model one ulp in
// the hidden state moves the logits that much, so the patched build decodes media rows a little
// differently. tests/data/mtmd-upstream/de3ff81 holds upstream's logits (scripts/peer/mtmd_logits.sh
// wrote them); gem4 in llama.cpp's summation order must give them to float rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mtmd_prompt.h"

namespace gem4 {
namespace {

class MediaUpstream : public ::testing::TestWithParam<const char*> {};

TEST_P(MediaUpstream, TextSideGivesUpstreamLlamaCppLogits) {
  const std::string id = GetParam();
  const nlohmann::json info = test::mtmd_info(id);
  auto model = Model::load(test::mtmd("models/gemma4-tiny-mmvocab-f32.gguf"));
  const int d = model->config.d_model, V = info["n_vocab"].get<int>();
  ThreadPool pool(2);
  const std::vector<float> embd = test::read_f32(test::mtmd("dumps/" + id + "/embd.f32"));
  const std::vector<float> upstream =
      test::read_f32(std::string(GEM4_SOURCE_DIR) + "/tests/data/mtmd-upstream/de3ff81/" + id + ".tail.f32");
  const std::vector<float> reference = test::read_f32(test::mtmd("dumps/" + id + "/logits_tail.f32"));
  ASSERT_EQ(upstream.size(), reference.size());
  ASSERT_EQ(upstream.size() % V, 0u);
  // Images are one span of rows that see each other; audio rows are causal.
  const int span = info["media_type"] == "image" ? 0 : -1;
  PlanSwitches sw;
  sw.llama_f32_order = true;
  const ForwardOutputs out =
      test::run_prompt(*model, test::mtmd_prompt(info, embd, d, true, span), 512, &pool, sw);
  ASSERT_EQ(out.logits.size(), upstream.size());
  const double du = test::max_abs_diff(out.logits.data(), upstream.data(), upstream.size());
  EXPECT_LE(du, 1e-5) << "every row after the media, against upstream llama.cpp";
  // How far one ulp goes on this random model: every media value moved by one ulp moves these logits
  // by ~1e-3 (last row) to ~6e-3, as far as the reference data is from upstream; the match above is
  // far inside it.
  std::vector<float> nudged = embd;
  for (size_t i = 0; i < nudged.size(); ++i) nudged[i] = std::nextafter(nudged[i], i % 3 ? 1e9f : -1e9f);
  const ForwardOutputs moved =
      test::run_prompt(*model, test::mtmd_prompt(info, nudged, d, true, span), 512, &pool, sw);
  const double dn = test::max_abs_diff(moved.logits.data(), upstream.data(), upstream.size());
  EXPECT_GT(dn, 100 * du) << "one ulp in the media rows must show";
  const double dr = test::max_abs_diff(out.logits.data(), reference.data(), reference.size());
  const double ur = test::max_abs_diff(upstream.data(), reference.data(), reference.size());
  std::printf(
      "[ upstream ] %s: gem4 vs upstream llama.cpp %.3g (media rows one ulp off: %.3g); vs the reference "
      "data %.3g, upstream vs it %.3g\n",
      id.c_str(), du, dn, dr, ur);
}

INSTANTIATE_TEST_SUITE_P(MtmdRef, MediaUpstream,
                         ::testing::Values("vision__img1-rgba-320x240", "vision__img2-photo-200x300",
                                           "audio__aud1-speech-16k-mono", "audio__aud2-tones-44k1-stereo"),
                         [](const auto& info) {
                           const std::string s = info.param;
                           return s.substr(0, s.find("__")) + "_" + s.substr(s.find("__") + 2, 4);
                         });

}  // namespace
}  // namespace gem4
