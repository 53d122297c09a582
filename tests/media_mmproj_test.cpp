// The projector file reader and the clamped linear shared by the vision and audio towers.
#include <gtest/gtest.h>

#include <random>

#include "gguf/gguf_writer.h"
#include "media/clamped_linear.h"
#include "media/mmproj_file.h"
#include "test_util.h"

namespace gem4::media {
namespace {

using gem4::test::mtmd;

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  memcpy(b.data(), v.data(), b.size());
  return b;
}

std::unique_ptr<MmprojFile> from_writer(const gguf::GgufWriter& w, const std::string& name = "test.gguf") {
  const auto bytes = w.to_bytes();
  return MmprojFile::from_gguf(gguf::GgufFile::from_memory(bytes.data(), bytes.size(), name));
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(MmprojFile, OpensTheVisionAndAudioReferenceFiles) {
  auto v = MmprojFile::open(mtmd("models/gemma4-tiny-vision.gguf"));
  EXPECT_TRUE(v->has_vision());
  EXPECT_FALSE(v->has_audio());
  EXPECT_EQ(v->vision_projector(), "gemma4v");
  auto a = MmprojFile::open(mtmd("models/gemma4-tiny-audio.gguf"));
  EXPECT_FALSE(a->has_vision());
  EXPECT_TRUE(a->has_audio());
  EXPECT_EQ(a->audio_projector(), "gemma4a");
}

TEST(MmprojFile, RefusesATextModelNamingTheFile) {
  const std::string path = mtmd("models/gemma4-tiny-mmvocab-f32.gguf");
  const std::string e = error_of([&] { MmprojFile::open(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("general.architecture"), std::string::npos) << e;
}

TEST(MmprojFile, RefusesMissingAndTruncatedFiles) {
  EXPECT_NE(error_of([] { MmprojFile::open("/nonexistent/mmproj.gguf"); }).find("/nonexistent/mmproj.gguf"),
            std::string::npos);
  gguf::GgufWriter w;
  w.set_string("general.architecture", "clip");
  w.set_string("clip.vision.projector_type", "gemma4v");
  w.add_tensor("v.x", {4}, GgmlType::F32, f32_bytes({1, 2, 3, 4}));
  auto bytes = w.to_bytes();
  bytes.resize(bytes.size() / 2);
  const std::string e = error_of(
      [&] { MmprojFile::from_gguf(gguf::GgufFile::from_memory(bytes.data(), bytes.size(), "cut.gguf")); });
  EXPECT_NE(e.find("cut.gguf"), std::string::npos) << e;
}

TEST(MmprojFile, UnknownProjectorTypesAndEmptyFilesAreErrorsNamingTheKey) {
  {
    gguf::GgufWriter w;
    w.set_string("general.architecture", "clip");
    w.set_bool("clip.has_vision_encoder", true);
    w.set_string("clip.vision.projector_type", "gemma4uv");
    const std::string e = error_of([&] { from_writer(w, "uv.gguf"); });
    EXPECT_NE(e.find("uv.gguf: clip.vision.projector_type is 'gemma4uv'"), std::string::npos) << e;
    EXPECT_NE(e.find("12B"), std::string::npos) << e;
  }
  {
    gguf::GgufWriter w;
    w.set_string("general.architecture", "clip");
    w.set_string("clip.audio.projector_type", "whisper");
    EXPECT_NE(error_of([&] { from_writer(w); }).find("clip.audio.projector_type is 'whisper'"),
              std::string::npos);
  }
  {
    gguf::GgufWriter w;
    w.set_string("general.architecture", "clip");
    EXPECT_NE(error_of([&] { from_writer(w); }).find("neither a vision nor an audio tower"),
              std::string::npos);
  }
  {
    gguf::GgufWriter w;
    w.set_string("general.architecture", "clip");
    w.set_bool("clip.has_audio_encoder", true);
    EXPECT_NE(error_of([&] { from_writer(w); }).find("clip.has_audio_encoder is true"), std::string::npos);
  }
  {
    // Both towers in one file (as real E2B/E4B projectors are); the older generic key names a type.
    gguf::GgufWriter w;
    w.set_string("general.architecture", "clip");
    w.set_bool("clip.has_vision_encoder", true);
    w.set_bool("clip.has_audio_encoder", true);
    w.set_string("clip.projector_type", "gemma4v");
    w.set_string("clip.audio.projector_type", "gemma4a");
    auto f = from_writer(w);
    EXPECT_TRUE(f->has_vision());
    EXPECT_TRUE(f->has_audio());
  }
}

TEST(MmprojFile, TensorLookupsNameTheTensorAndCheckShapes) {
  gguf::GgufWriter w;
  w.set_string("general.architecture", "clip");
  w.set_string("clip.vision.projector_type", "gemma4v");
  w.add_tensor("v.w", {2, 3}, GgmlType::F32, f32_bytes({1, 2, 3, 4, 5, 6}));
  w.add_tensor("v.extra", {1}, GgmlType::F32, f32_bytes({7}));
  w.add_tensor("a.other", {1}, GgmlType::F32, f32_bytes({7}));
  auto f = from_writer(w, "t.gguf");
  EXPECT_NE(error_of([&] { f->matrix("v.missing", 2, 3); }).find("t.gguf: tensor 'v.missing' is missing"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f->matrix("v.w", 3, 2); }).find("has shape [2, 3], expected [3, 2]"),
            std::string::npos);
  const MatrixView m = f->matrix("v.w", 2, 3);
  EXPECT_EQ(m.in, 2);
  EXPECT_EQ(m.out, 3);
  EXPECT_NE(error_of([&] { f->check_all_used({"v."}); }).find("'v.extra' is not part"), std::string::npos);
  EXPECT_FLOAT_EQ(f->scalar("v.extra"), 7.0f);
  f->check_all_used({"v."});  // a.other belongs to another tower
  EXPECT_NE(
      error_of([&] { f->get_int("clip.vision.block_count"); }).find("missing key clip.vision.block_count"),
      std::string::npos);
}

// Two linears reading one buffer: with independent clamps (gem4's default, transformers, llama.cpp
// since ~2026-09) each sees its own input clamp only and the buffer is left alone; with llama.cpp
// 3f545be's in-place clamp the second sees the first one's input clamp too.
TEST(ClampedLinear, InputClampsAreIndependentOrAccumulateInExecutionOrderAsInLlamaCpp3f545be) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  const int64_t in = 8, out = 5, rows = 3;
  std::vector<float> wq(in * out), wk(in * out), x(rows * in);
  for (auto& v : wq) v = nd(rng);
  for (auto& v : wk) v = nd(rng);
  for (auto& v : x) v = 2 * nd(rng);
  gguf::GgufWriter w;
  w.set_string("general.architecture", "clip");
  w.set_string("clip.vision.projector_type", "gemma4v");
  w.add_tensor("q.weight", {in, out}, GgmlType::F32, f32_bytes(wq));
  w.add_tensor("q.input_min", {1}, GgmlType::F32, f32_bytes({-1.0f}));
  w.add_tensor("q.input_max", {1}, GgmlType::F32, f32_bytes({3.0f}));
  w.add_tensor("q.output_max", {1}, GgmlType::F32, f32_bytes({0.5f}));
  w.add_tensor("k.weight", {in, out}, GgmlType::F32, f32_bytes(wk));
  w.add_tensor("k.input_min", {1}, GgmlType::F32, f32_bytes({-3.0f}));
  w.add_tensor("k.input_max", {1}, GgmlType::F32, f32_bytes({0.7f}));
  auto f = from_writer(w);
  EXPECT_EQ(f->clamp_semantics(), ClampSemantics::kIndependent);
  EXPECT_NE(error_of([&] { load_clamped_linear(*f, "q", in, out, false); }).find("q.input_min"),
            std::string::npos);
  EXPECT_EQ(parse_clamp_semantics("llamacpp-inplace"), ClampSemantics::kLlamaCppInPlace);
  EXPECT_NE(error_of([&] { parse_clamp_semantics("inplace"); }).find("independent or llamacpp-inplace"),
            std::string::npos);

  for (const ClampSemantics mode : {ClampSemantics::kIndependent, ClampSemantics::kLlamaCppInPlace}) {
    const bool in_place = mode == ClampSemantics::kLlamaCppInPlace;
    f->set_clamp_semantics(mode);
    const ClampedLinear q = load_clamped_linear(*f, "q", in, out);
    const ClampedLinear k = load_clamped_linear(*f, "k", in, out);
    EXPECT_FALSE(k.output.active());
    std::vector<float> buf = x, yq(rows * out), yk(rows * out);
    q.forward(buf.data(), rows, in, yq.data(), out, nullptr);
    k.forward(buf.data(), rows, in, yk.data(), out, nullptr);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double sq = 0, sk = 0;
        for (int64_t i = 0; i < in; ++i) {
          const float xq = std::min(std::max(x[r * in + i], -1.0f), 3.0f);
          const float xk = std::min(std::max(in_place ? xq : x[r * in + i], -3.0f), 0.7f);
          sq += double(wq[o * in + i]) * xq;
          sk += double(wk[o * in + i]) * xk;
        }
        EXPECT_NEAR(yq[r * out + o], std::min(sq, 0.5), 1e-5) << in_place;
        EXPECT_NEAR(yk[r * out + o], sk, 1e-5) << in_place;
      }
    EXPECT_EQ(buf == x, !in_place) << "the shared buffer is clamped only in place";
  }
}

}  // namespace
}  // namespace gem4::media
