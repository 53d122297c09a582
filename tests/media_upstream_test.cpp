// The text model with media in the prompt against upstream llama.cpp. ../shared/testdata/mtmd-ref was
// made by llama.cpp 3f545be carrying a local patch; upstream llama.cpp before it (b10361, c2fd87e,
// 2026-08-11) and after it (de3ff81, 2026-09-28, the tree in node-llama-cpp 3.22.1) give bit-identical
// logits on its prompts, fed the reference data's own media rows, and both differ from that data by
// 8e-4..2.9e-3 (last row) and 3e-3..6e-3 (the rows after the media): on this random model one ulp in
// the hidden state moves the logits that much, so the patched build decodes media rows a little
// differently. tests/data/mtmd-upstream/de3ff81 holds upstream's logits (scripts/peer/mtmd_ref.sh
// wrote them); gem4 in llama.cpp's summation order must give them to float rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "media/audio_encoder.h"
#include "media/audio_wav.h"
#include "media/image.h"
#include "media/mmproj_file.h"
#include "media/mmproj_synthetic.h"
#include "media/vision_encoder.h"
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

// Projectors of other shapes and types than the reference's, against upstream llama.cpp's libmtmd
// (de3ff81; scripts/peer/mtmd_ref.sh): `gem4 make-model --preset P-mmproj --type T --blocks 2` files
// (both towers in one file, as real E2B/E4B projectors; seed 42), built here in memory. Images are the
// reference's resized pixels (a size the tower takes as it is, so no resize runs: de3ff81 resizes
// bicubically where the reference's version was bilinear), audio its WAVs. gem4's default clamps are
// de3ff81's (each linear clamps its own copy of the input).
//
// Tolerances follow the weights' type. With F32 matrices the rows agree to ggml's summation accuracy,
// up to gelu_quick's fp16 table: an input on the other side of a rounding tie moves one value by an fp16
// step (2.9e-4 in the embeddings of tiny-f32 img1; the 1e-4 holds on the reference's own
// projectors, 7e-5..8e-5, media_vision_test.cpp).
// With F16/BF16 matrices ggml rounds every product's activations to 16 bits (as gem4 does,
// encoder_matmul.h); a last-bit difference before that rounding moves a value by a whole 16-bit step
// now and then (2^-11 relative for F16, 2^-8 for BF16), and the towers carry it on, so the bounds are
// that step's size, far below what a wrong op gives (O(1): the clamp scalars alone move rows by ~1).
struct EncoderCase {
  const char* name;  // the file's name in tests/data/mtmd-upstream/de3ff81/embd/NAME__INPUT.f32
  const char* preset;
  GgmlType type;
  std::vector<const char*> inputs;
  double max_abs;
};

void PrintTo(const EncoderCase& c, std::ostream* os) { *os << c.name; }

class MediaUpstreamEncoders : public ::testing::TestWithParam<EncoderCase> {};

TEST_P(MediaUpstreamEncoders, ProjectorRowsMatchUpstreamLlamaCpp) {
  const EncoderCase& c = GetParam();
  media::SyntheticMmproj spec = media::synthetic_mmproj_preset(c.preset, c.type, 42);
  spec.v.n_layer = spec.a.n_layer = 2;
  const auto file = media::synthetic_mmproj_in_memory(spec);
  const media::VisionEncoder vision(*file);
  const media::AudioEncoder audio(*file);
  ThreadPool pool(2);
  for (const std::string input : c.inputs) {
    SCOPED_TRACE(std::string(c.name) + " " + input);
    std::vector<float> own;
    if (input.rfind("img", 0) == 0) {
      const std::string id = input == "img1" ? "vision__img1-rgba-320x240" : "vision__img2-photo-200x300";
      media::RgbImage img;
      img.width = input == "img1" ? 384 : 288;
      img.height = input == "img1" ? 288 : 384;
      img.rgb = test::read_bytes(test::mtmd("dumps/" + id + "/resized.u8"));
      ASSERT_EQ(img.rgb.size(), size_t(img.width) * img.height * 3);
      own = vision.encode_resized(img, &pool);
    } else {
      const std::string wav =
          input == "aud1" ? "inputs/aud1-speech-16k-mono.wav" : "inputs/aud2-tones-44k1-stereo.wav";
      own = audio.encode(media::read_wav_16k_mono(test::mtmd(wav)), &pool);
    }
    const std::vector<float> ref =
        test::read_f32(std::string(GEM4_SOURCE_DIR) + "/tests/data/mtmd-upstream/de3ff81/embd/" + c.name +
                       "__" + input + ".f32");
    ASSERT_EQ(own.size(), ref.size()) << "soft tokens x width";
    const double d = test::max_abs_diff(own.data(), ref.data(), ref.size());
    EXPECT_LE(d, c.max_abs);
    std::printf("[ upstream ] %s %s: %zu rows, max |diff| %.3g, nmse %.3g\n", c.name, input.c_str(),
                ref.size() / spec.v.n_embd_out, d, test::nmse(own.data(), ref.data(), ref.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Generated, MediaUpstreamEncoders,
    ::testing::Values(EncoderCase{"tiny-f32", "tiny", GgmlType::F32, {"img1", "aud1"}, 6e-4},
                      EncoderCase{"tiny-f16", "tiny", GgmlType::F16, {"img1", "img2", "aud1", "aud2"}, 5e-3},
                      EncoderCase{"tiny-bf16", "tiny", GgmlType::BF16, {"img1", "aud1"}, 3e-2},
                      EncoderCase{"e2b-2blocks-f16", "e2b", GgmlType::F16, {"img1", "aud2"}, 8e-3}),
    [](const auto& info) {
      std::string s = info.param.name;
      for (char& ch : s)
        if (ch == '-') ch = '_';
      return s;
    });

}  // namespace
}  // namespace gem4
