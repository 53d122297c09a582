// The gemma4v vision tower against llama.cpp's multimodal library (../shared/testdata/mtmd-ref): decoded
// pixels, the resized encoder input bit for bit, every dumped intermediate and the projector embeddings.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "gguf/gguf_writer.h"
#include "kernels/thread_pool.h"
#include "media/image.h"
#include "media/image_preprocess.h"
#include "media/mmproj_file.h"
#include "media/vision_encoder.h"
#include "media/vision_ops.h"
#include "mtmd_projector.h"
#include "tensor/quant.h"
#include "test_util.h"

namespace gem4::media {
namespace {

using gem4::test::mtmd;
using gem4::test::read_bytes;

struct VisionCase {
  const char* id;
  const char* input;
  int width, height;  // decoded
  int rw, rh;         // resized
  int n_tokens;
};
const VisionCase kCases[] = {
    {"vision__img1-rgba-320x240", "inputs/img1-rgba-320x240.png", 320, 240, 384, 288, 48},
    {"vision__img2-photo-200x300", "inputs/img2-photo-200x300.jpg", 200, 300, 288, 384, 48},
};

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

class VisionReference : public ::testing::TestWithParam<VisionCase> {};

TEST_P(VisionReference, DecodedAndResizedPixelsAreBitExact) {
  const VisionCase& c = GetParam();
  const RgbImage img = load_image_file(mtmd(c.input));
  ASSERT_EQ(img.width, c.width);
  ASSERT_EQ(img.height, c.height);
  const auto decoded = read_bytes(mtmd(std::string("dumps/") + c.id + "/decoded.u8"));
  ASSERT_EQ(decoded.size(), img.rgb.size());
  size_t diff = 0;
  for (size_t i = 0; i < decoded.size(); ++i) diff += decoded[i] != img.rgb[i];
  EXPECT_EQ(diff, 0u) << "decoded pixel bytes differing from stb_image's in llama.cpp";

  auto file = test::open_mtmd_projector("models/gemma4-tiny-vision.gguf");
  VisionEncoder enc(*file);
  const ImageSize t = enc.target_size(img.width, img.height);
  EXPECT_EQ(t.width, c.rw);
  EXPECT_EQ(t.height, c.rh);
  EXPECT_EQ(enc.n_tokens(img.width, img.height), c.n_tokens);
  const RgbImage resized = resize_and_pad(img, t);
  const auto ref = read_bytes(mtmd(std::string("dumps/") + c.id + "/resized.u8"));
  ASSERT_EQ(ref.size(), resized.rgb.size());
  diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) diff += ref[i] != resized.rgb[i];
  EXPECT_EQ(diff, 0u) << "resized bytes differing from llama.cpp's";
}

TEST_P(VisionReference, IntermediatesAndEmbeddingsMatchLlamaCpp) {
  const VisionCase& c = GetParam();
  auto file = test::open_mtmd_projector("models/gemma4-tiny-vision.gguf");
  VisionEncoder enc(*file);
  std::map<std::string, std::vector<float>> got;
  ThreadPool pool(2);
  const std::vector<float> embd = enc.encode(
      load_image_file(mtmd(c.input)), &pool,
      [&](const std::string& name, const float* x, int64_t r, int64_t k) { got[name].assign(x, x + r * k); });
  // Tolerances. The embeddings: the manifest's 1e-4. Inside the tower llama.cpp's own rounding (fp16
  // gelu_quick table, clamps) turns last-bit differences of a gate into an fp16 step now and then, so
  // a few values of a block output move by up to ~1e-3 (an independent numpy forward of block 0 sits
  // 1.5e-4 away); the RMS difference bounds any systematic error.
  struct Stage {
    const char* name;
    double max_abs, rms;
  };
  const Stage stages[] = {{"inp", 1e-5, 1e-6},         {"pos_embd", 1e-5, 1e-6}, {"layer_out-0", 2e-3, 5e-5},
                          {"layer_out-1", 2e-3, 1e-4}, {"pooled", 2e-3, 2e-4},   {"embd", 1e-4, 1e-5}};
  for (const Stage& st : stages) {
    const std::string name = st.name;
    const std::string path =
        "dumps/" + std::string(c.id) + "/" + (name == "embd" ? "embd" : "inter." + name) + ".f32";
    const std::vector<float> ref = test::read_f32(mtmd(path));
    ASSERT_EQ(got[name].size(), ref.size()) << name;
    const double d = test::max_abs_diff(got[name].data(), ref.data(), ref.size());
    double ss = 0;
    for (size_t i = 0; i < ref.size(); ++i) ss += double(got[name][i] - ref[i]) * (got[name][i] - ref[i]);
    const double rms = std::sqrt(ss / double(ref.size()));
    EXPECT_LE(d, st.max_abs) << name;
    EXPECT_LE(rms, st.rms) << name;
    std::printf("  %s %s: max |diff| %.3g, rms %.3g\n", c.id, st.name, d, rms);
  }
  EXPECT_EQ(embd.size(), size_t(c.n_tokens) * 128);
  EXPECT_EQ(embd, got["embd"]);
}

INSTANTIATE_TEST_SUITE_P(MtmdRef, VisionReference, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.id).substr(8, 4); });

TEST(VisionOps, GeluQuickTableIsRoundedAsGgmlDoes) {
  for (float x : {-12.0f, -3.1f, -0.5f, 0.0f, 0.25f, 1.0f, 2.5f, 9.0f, 30.0f}) {
    const float xr = fp16_to_fp32(fp32_to_fp16(x));
    const float exact = xr / (1.0f + std::exp(-1.702f * xr));
    EXPECT_EQ(gelu_quick_f16(x), fp16_to_fp32(fp32_to_fp16(exact))) << x;
  }
}

TEST(VisionOps, AveragePoolAndPatchOrder) {
  // 6 x 3 grid of width-2 rows, pooled by 3: two outputs.
  std::vector<float> x(6 * 3 * 2);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i);
  const auto p = average_pool_grid(x.data(), 6, 3, 2, 3);
  ASSERT_EQ(p.size(), 4u);
  // Output 0 averages columns 0..2 of rows 0..2: rows (y*6+x) = 0,1,2,6,7,8,12,13,14 -> mean 7, value*2.
  EXPECT_FLOAT_EQ(p[0], 14.0f);
  EXPECT_FLOAT_EQ(p[1], 15.0f);
  EXPECT_FLOAT_EQ(p[2], 20.0f);
  // A 4x2 image, patch 2: patch 1 starts at column 2, channel-major inside.
  std::vector<float> img(3 * 2 * 4);
  for (size_t i = 0; i < img.size(); ++i) img[i] = float(i);
  const auto pt = image_patches(img.data(), 4, 2, 2);
  ASSERT_EQ(pt.size(), 2u * 12);
  const std::vector<float> want1 = {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23};
  EXPECT_EQ(std::vector<float>(pt.begin() + 12, pt.end()), want1);
}

TEST(VisionPreprocess, TargetSizesFollowLlamaCppsRules) {
  // align 48, 40..280 tokens
  const auto t = [](int w, int h) { return vision_target_size(w, h, 48, 40, 280); };
  EXPECT_EQ(t(320, 240).width, 384);
  EXPECT_EQ(t(320, 240).height, 288);
  EXPECT_EQ(t(200, 300).width, 288);
  EXPECT_EQ(t(200, 300).height, 384);
  const ImageSize big = t(4000, 3000);  // scaled down under 280 tokens
  EXPECT_LE((big.width / 48) * (big.height / 48), 280);
  EXPECT_GE((big.width / 48) * (big.height / 48), 200);
  const ImageSize one = t(1, 1);
  EXPECT_GE((one.width / 48) * (one.height / 48), 40);
  // A 1-pixel-wide image resizes without reading outside the source.
  RgbImage thin;
  thin.width = 1;
  thin.height = 5;
  thin.rgb.assign(15, 200);
  const RgbImage r = resize_and_pad(thin, t(1, 5));
  EXPECT_EQ(r.width, t(1, 5).width);
}

// ---- bad images ----

std::vector<uint8_t> png_header(uint32_t w, uint32_t h) {
  // A PNG signature and an IHDR chunk (CRC not checked by stb_info), nothing after: a bomb's header.
  std::vector<uint8_t> b = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
  for (uint32_t v : {w, h})
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
  for (uint8_t v : {8, 2, 0, 0, 0}) b.push_back(v);
  for (int i = 0; i < 4; ++i) b.push_back(0);
  return b;
}

TEST(ImageDecode, BadImagesAreClearErrors) {
  const auto png = read_bytes(mtmd("inputs/img1-rgba-320x240.png"));
  const auto jpg = read_bytes(mtmd("inputs/img2-photo-200x300.jpg"));
  EXPECT_NE(error_of([] { decode_image(nullptr, 0, "empty.png"); }).find("empty.png: the image is empty"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { decode_image(png.data(), png.size() / 2, "half.png"); }).find("half.png: cannot decode"),
      std::string::npos);
  // A truncated JPEG: stb fills the rest, like llama.cpp; what matters is no crash and a sane result.
  try {
    const RgbImage half = decode_image(jpg.data(), jpg.size() / 2, "half.jpg");
    EXPECT_EQ(half.width, 200);
  } catch (const MediaError& e) {
    EXPECT_NE(std::string(e.what()).find("half.jpg"), std::string::npos);
  }
  std::vector<uint8_t> corrupt = png;
  for (size_t i = 60; i < corrupt.size(); i += 7) corrupt[i] ^= 0x5a;
  EXPECT_NE(error_of([&] { decode_image(corrupt.data(), corrupt.size(), "bad.png"); }).find("bad.png"),
            std::string::npos);
  const std::string gif = "GIF89a\x01\x00\x01\x00";
  EXPECT_NE(error_of([&] {
              decode_image(reinterpret_cast<const uint8_t*>(gif.data()), gif.size(), "x.gif");
            }).find("a GIF image; gem4 reads PNG and JPEG"),
            std::string::npos);
  const std::string text = "hello, not an image";
  EXPECT_NE(error_of([&] {
              decode_image(reinterpret_cast<const uint8_t*>(text.data()), text.size(), "t.txt");
            }).find("not a PNG or JPEG"),
            std::string::npos);
  const auto bomb = png_header(100000, 100000);
  EXPECT_NE(error_of([&] {
              decode_image(bomb.data(), bomb.size(), "bomb.png");
            }).find("100000x100000 pixels, more than"),
            std::string::npos);
  const auto wide = png_header(16000, 16000);
  EXPECT_NE(
      error_of([&] { decode_image(wide.data(), wide.size(), "wide.png"); }).find("more than gem4 decodes"),
      std::string::npos);
  const auto zero = png_header(0, 10);
  EXPECT_NE(error_of([&] { decode_image(zero.data(), zero.size(), "zero.png"); }).find("zero.png"),
            std::string::npos);
  EXPECT_NE(error_of([] { load_image_file("/nonexistent/x.png"); }).find("/nonexistent/x.png: cannot open"),
            std::string::npos);
  // A Huffman table claiming more than 256 codes (stb_image 2.27 would write past its table).
  std::vector<uint8_t> dht = jpg;
  for (size_t i = 2; i + 21 < dht.size(); ++i)
    if (dht[i] == 0xFF && dht[i + 1] == 0xC4) {
      for (int k = 0; k < 16; ++k) dht[i + 5 + k] = 0x20;
      break;
    }
  EXPECT_NE(error_of([&] { decode_image(dht.data(), dht.size(), "dht.jpg"); }).find("more than 256 codes"),
            std::string::npos);
  // The same cut off by the end of the file after 15 of its 16 counts (found by scripts/fuzz.sh: stb reads
  // zeros past the end and still builds the table from the counts that are there).
  for (size_t i = 2; i + 21 < dht.size(); ++i)
    if (dht[i] == 0xFF && dht[i + 1] == 0xC4) {
      dht.resize(i + 5 + 15);
      break;
    }
  EXPECT_NE(error_of([&] { decode_image(dht.data(), dht.size(), "cut.jpg"); }).find("more than 256 codes"),
            std::string::npos);
  // A DHT segment whose length field ends it before its counts (found by scripts/fuzz.sh): stb reads the
  // 16 counts anyway and builds the table before it compares the length.
  std::vector<uint8_t> short_dht = jpg;
  for (size_t i = 2; i + 21 < short_dht.size(); ++i)
    if (short_dht[i] == 0xFF && short_dht[i + 1] == 0xC4) {
      short_dht[i + 2] = 0;
      short_dht[i + 3] = 3;
      for (int k = 0; k < 16; ++k) short_dht[i + 5 + k] = 0x20;
      break;
    }
  EXPECT_NE(error_of([&] {
              decode_image(short_dht.data(), short_dht.size(), "short.jpg");
            }).find("more than 256 codes"),
            std::string::npos);
}

// Mutated and truncated copies of the reference images: each decodes or is refused with an error naming
// it, never a crash (the suite also runs under ASan; scripts/fuzz.sh fuzzes the reader with libFuzzer).
TEST(ImageDecode, MutatedImagesDecodeOrFailCleanly) {
  std::mt19937 rng(11);
  int decoded = 0, refused = 0;
  for (const char* name : {"inputs/img1-rgba-320x240.png", "inputs/img2-photo-200x300.jpg"}) {
    const auto orig = read_bytes(mtmd(name));
    for (int t = 0; t < 60; ++t) {
      std::vector<uint8_t> b = orig;
      const int flips = 1 + int(rng() % 8);
      for (int f = 0; f < flips; ++f) b[rng() % b.size()] = uint8_t(rng());
      if (t % 3 == 0) b.resize(rng() % b.size());
      try {
        const RgbImage img = decode_image(b.data(), b.size(), "mutated");
        ASSERT_EQ(img.rgb.size(), size_t(img.width) * img.height * 3);
        ++decoded;
      } catch (const MediaError& e) {
        ASSERT_EQ(std::string(e.what()).rfind("mutated: ", 0), 0u) << e.what();
        ++refused;
      }
    }
  }
  EXPECT_GT(decoded + refused, 0);
}

// ---- other files: both towers in one, another shape ----

void copy_tensors(const gguf::GgufFile& src, gguf::GgufWriter& w) {
  for (const auto& t : src.tensors()) {
    const uint8_t* d = src.tensor_data(t);
    w.add_tensor(t.name, t.ne, t.type, std::vector<uint8_t>(d, d + t.nbytes));
  }
}

TEST(VisionFiles, AFileHoldingBothTowersGivesTheSameEmbeddings) {
  auto v = gguf::GgufFile::open(mtmd("models/gemma4-tiny-vision.gguf"));
  auto a = gguf::GgufFile::open(mtmd("models/gemma4-tiny-audio.gguf"));
  gguf::GgufWriter w;
  for (const auto* f : {v.get(), a.get()})
    for (const auto& [k, val] : f->metadata())
      if (k != "general.name" || f == v.get()) w.set_value(k, val);
  copy_tensors(*v, w);
  copy_tensors(*a, w);
  const auto bytes = w.to_bytes();
  auto both = test::as_mtmd_ref(
      MmprojFile::from_gguf(gguf::GgufFile::from_memory(bytes.data(), bytes.size(), "va.gguf")));
  EXPECT_TRUE(both->has_vision());
  EXPECT_TRUE(both->has_audio());
  VisionEncoder enc(*both);  // the audio tensors are not the vision tower's business
  const auto embd = enc.encode(load_image_file(mtmd("inputs/img2-photo-200x300.jpg")), nullptr);
  const auto ref = test::read_f32(mtmd("dumps/vision__img2-photo-200x300/embd.f32"));
  ASSERT_EQ(embd.size(), ref.size());
  EXPECT_LE(test::max_abs_diff(embd.data(), ref.data(), ref.size()), 1e-4);
}

// A block output scale (v.blk.N.out_scale.weight, the converter's name for a vision layer_scalar) is
// applied when present: ones change nothing, other values change the rows (on the first block: the
// last one's would be undone by the final RMS norm); a wrong shape is an error.
TEST(VisionFiles, OptionalBlockOutputScales) {
  auto v = gguf::GgufFile::open(mtmd("models/gemma4-tiny-vision.gguf"));
  const auto with_scale = [&](const std::vector<float>& s) {
    gguf::GgufWriter w;
    for (const auto& [k, val] : v->metadata()) w.set_value(k, val);
    copy_tensors(*v, w);
    std::vector<uint8_t> b(s.size() * 4);
    memcpy(b.data(), s.data(), b.size());
    w.add_tensor("v.blk.0.out_scale.weight", {int64_t(s.size())}, GgmlType::F32, std::move(b));
    const auto bytes = w.to_bytes();
    return test::as_mtmd_ref(
        MmprojFile::from_gguf(gguf::GgufFile::from_memory(bytes.data(), bytes.size(), "s.gguf")));
  };
  const RgbImage img = load_image_file(mtmd("inputs/img2-photo-200x300.jpg"));
  const auto plain =
      VisionEncoder(*test::open_mtmd_projector("models/gemma4-tiny-vision.gguf")).encode(img, nullptr);
  const int d = 64;
  EXPECT_EQ(VisionEncoder(*with_scale({1.0f})).encode(img, nullptr), plain);
  EXPECT_EQ(VisionEncoder(*with_scale(std::vector<float>(d, 1.0f))).encode(img, nullptr), plain);
  const auto halved = VisionEncoder(*with_scale({0.5f})).encode(img, nullptr);
  ASSERT_EQ(halved.size(), plain.size());
  EXPECT_GT(test::max_abs_diff(halved.data(), plain.data(), plain.size()), 1e-3);
  try {
    VisionEncoder enc(*with_scale({1.0f, 1.0f, 1.0f}));
    ADD_FAILURE() << "a 3-value out_scale loaded";
  } catch (const MmprojError& e) {
    EXPECT_NE(std::string(e.what()).find("v.blk.0.out_scale.weight"), std::string::npos) << e.what();
  }
}

// A random projector of another shape (F16 matrices, 3 blocks, 2 heads of 32, patch 8, merge 2,
// projecting to 96, with std_bias/std_scale): loads, runs, gives the right number of rows.
std::vector<uint8_t> random_tensor(std::mt19937& rng, int64_t n, GgmlType type, float scale) {
  std::normal_distribution<float> nd(0, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  if (type == GgmlType::F32) {
    std::vector<uint8_t> b(n * 4);
    memcpy(b.data(), v.data(), b.size());
    return b;
  }
  std::vector<uint8_t> b(n * 2);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_fp16(v[i]);
    memcpy(&b[i * 2], &h, 2);
  }
  return b;
}

TEST(VisionFiles, AProjectorOfAnotherShapeRuns) {
  std::mt19937 rng(7);
  const int d = 64, ff = 96, nl = 3, nh = 2, p = 8, merge = 2, out = 96, pos = 128;
  gguf::GgufWriter w;
  w.set_string("general.architecture", "clip");
  w.set_bool("clip.has_vision_encoder", true);
  w.set_string("clip.vision.projector_type", "gemma4v");
  w.set_u32("clip.vision.embedding_length", d);
  w.set_u32("clip.vision.feed_forward_length", ff);
  w.set_u32("clip.vision.block_count", nl);
  w.set_u32("clip.vision.attention.head_count", nh);
  w.set_u32("clip.vision.patch_size", p);
  w.set_u32("clip.vision.projector.scale_factor", merge);
  w.set_u32("clip.vision.projection_dim", out);
  const auto add = [&](const std::string& name, std::vector<int64_t> ne, GgmlType t, float s) {
    int64_t n = 1;
    for (auto e : ne) n *= e;
    w.add_tensor(name, ne, t, random_tensor(rng, n, t, s));
  };
  add("v.patch_embd.weight", {p, p, 3, d}, GgmlType::F32, 0.1f);
  add("v.position_embd.weight", {d, pos, 2}, GgmlType::F32, 0.5f);
  for (int il = 0; il < nl; ++il) {
    const std::string b = "v.blk." + std::to_string(il) + ".";
    for (const char* n : {"ln1", "attn_post_norm", "ln2", "ffn_post_norm"})
      add(b + n + ".weight", {d}, GgmlType::F32, 1);
    for (const char* n : {"attn_q_norm", "attn_k_norm"}) add(b + n + ".weight", {d / nh}, GgmlType::F32, 1);
    for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_out"})
      add(b + n + ".weight", {d, d}, GgmlType::F16, 0.125f);
    add(b + "ffn_gate.weight", {d, ff}, GgmlType::F16, 0.125f);
    add(b + "ffn_up.weight", {d, ff}, GgmlType::F16, 0.125f);
    add(b + "ffn_down.weight", {ff, d}, GgmlType::F16, 0.1f);
  }
  add("v.std_bias", {d}, GgmlType::F32, 0.1f);
  add("v.std_scale", {d}, GgmlType::F32, 1.0f);
  add("mm.input_projection.weight", {d, out}, GgmlType::F16, 0.125f);
  const auto bytes = w.to_bytes();
  auto f = MmprojFile::from_gguf(gguf::GgufFile::from_memory(bytes.data(), bytes.size(), "other.gguf"));
  VisionEncoder enc(*f);
  EXPECT_EQ(enc.hparams().align(), 16);
  const RgbImage img = load_image_file(mtmd("inputs/img1-rgba-320x240.png"));
  const int n = enc.n_tokens(img.width, img.height);
  const ImageSize t = enc.target_size(img.width, img.height);
  EXPECT_EQ(n, (t.width / 16) * (t.height / 16));
  const auto embd = enc.encode(img, nullptr);
  ASSERT_EQ(embd.size(), size_t(n) * out);
  for (float x : embd) ASSERT_TRUE(std::isfinite(x));
}

TEST(VisionFiles, MissingAndMisshapenTensorsAreNamed) {
  auto src = gguf::GgufFile::open(mtmd("models/gemma4-tiny-vision.gguf"));
  const auto build = [&](const std::string& drop, const std::string& extra) {
    gguf::GgufWriter w;
    for (const auto& [k, val] : src->metadata()) w.set_value(k, val);
    for (const auto& t : src->tensors()) {
      if (t.name == drop) continue;
      const uint8_t* d = src->tensor_data(t);
      w.add_tensor(t.name, t.ne, t.type, std::vector<uint8_t>(d, d + t.nbytes));
    }
    if (!extra.empty()) w.add_tensor(extra, {1}, GgmlType::F32, std::vector<uint8_t>(4, 0));
    return w.to_bytes();
  };
  const auto msg = [&](const std::string& drop, const std::string& extra) {
    const auto b = build(drop, extra);
    return error_of([&] {
      auto f = MmprojFile::from_gguf(gguf::GgufFile::from_memory(b.data(), b.size(), "v.gguf"));
      VisionEncoder enc(*f);
    });
  };
  EXPECT_NE(
      msg("v.blk.1.attn_k_norm.weight", "").find("v.gguf: tensor 'v.blk.1.attn_k_norm.weight' is missing"),
      std::string::npos);
  EXPECT_NE(msg("", "v.blk.0.attn_q.bias").find("'v.blk.0.attn_q.bias' is not part"), std::string::npos);
  EXPECT_NE(msg("", "mm.input_projection.input_min").find("mm.input_projection.input_min"),
            std::string::npos);
}

}  // namespace
}  // namespace gem4::media
