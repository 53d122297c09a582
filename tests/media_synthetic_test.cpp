// The generated projector files (media/mmproj_synthetic.h: `gem4 make-model --preset e2b-mmproj`, what
// `gem4 bench` measures without --mmproj): the same tensor names, shapes and keys as the reference
// projectors llama.cpp's converter layout gave (../shared/testdata/mtmd-ref), both towers in one file
// that gem4 loads and runs, the real E2B/E4B dimensions; and bench's projector rows end to end on the
// tiny preset.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "gguf/gguf.h"
#include "kernels/thread_pool.h"
#include "media/audio_encoder.h"
#include "media/image.h"
#include "media/mmproj_file.h"
#include "media/mmproj_synthetic.h"
#include "media/vision_encoder.h"
#include "test_util.h"

namespace gem4::media {
namespace {

using gem4::test::mtmd;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "gem4_mmproj_synth_" + std::to_string(getpid()) + "_" + name;
}

// name -> shape, for the tensors whose name starts with one of `prefixes`.
std::map<std::string, std::vector<int64_t>> shapes(const gguf::GgufFile& f,
                                                   const std::vector<std::string>& prefixes) {
  std::map<std::string, std::vector<int64_t>> m;
  for (const auto& t : f.tensors())
    for (const auto& p : prefixes)
      if (t.name.compare(0, p.size(), p) == 0) m[t.name] = t.ne;
  return m;
}

TEST(SyntheticMmproj, TinyPresetHasTheReferenceLayoutOfBothTowers) {
  const std::string path = temp_path("tiny.gguf");
  write_synthetic_mmproj(synthetic_mmproj_preset("tiny", GgmlType::F16, 3), path);
  auto gen = gguf::GgufFile::open(path);
  auto ref_v = gguf::GgufFile::open(mtmd("models/gemma4-tiny-vision.gguf"));
  auto ref_a = gguf::GgufFile::open(mtmd("models/gemma4-tiny-audio.gguf"));
  std::map<std::string, std::vector<int64_t>> want = shapes(*ref_v, {"v.", "mm."});
  for (const auto& [k, v] : shapes(*ref_a, {"a.", "mm."})) want[k] = v;
  EXPECT_EQ(shapes(*gen, {"v.", "a.", "mm."}), want);
  EXPECT_EQ(gen->tensors().size(), ref_v->tensors().size() + ref_a->tensors().size());
  // Every clip.* key of the reference files, with the same value (the shape keys, the projector types,
  // mean/std, eps), and both towers declared.
  for (const auto* ref : {ref_v.get(), ref_a.get()})
    for (const auto& [key, val] : ref->metadata()) {
      if (key.rfind("clip.", 0) != 0) continue;
      const gguf::Value* got = gen->find(key);
      ASSERT_NE(got, nullptr) << key;
      if (val.is_integer()) {
        EXPECT_EQ(got->as_int(), val.as_int()) << key;
      } else if (val.type == gguf::ValueType::STRING) {
        EXPECT_EQ(got->s, val.s) << key;
      } else if (val.is_float()) {
        EXPECT_FLOAT_EQ(float(got->as_double()), float(val.as_double())) << key;
      }
    }
  EXPECT_EQ(gen->get_string("general.architecture"), "clip");
  EXPECT_EQ(gen->get_int("general.file_type"), 1);  // F16
  // The converter's types: F16 matrices and patch convolution, F32 norms, position table, audio convs,
  // clamp scalars.
  EXPECT_EQ(gen->find_tensor("v.blk.1.ffn_down.weight")->type, GgmlType::F16);
  EXPECT_EQ(gen->find_tensor("v.patch_embd.weight")->type, GgmlType::F16);
  EXPECT_EQ(gen->find_tensor("v.position_embd.weight")->type, GgmlType::F32);
  EXPECT_EQ(gen->find_tensor("a.conv1d.0.weight")->type, GgmlType::F32);
  EXPECT_EQ(gen->find_tensor("a.blk.0.conv_pw1.input_max")->type, GgmlType::F32);
  std::remove(path.c_str());
}

TEST(SyntheticMmproj, TheFileLoadsInGem4AndBothTowersRun) {
  const std::string path = temp_path("run.gguf");
  const SyntheticMmproj spec = synthetic_mmproj_preset("tiny", GgmlType::BF16, 5);
  write_synthetic_mmproj(spec, path);
  const auto f = MmprojFile::open(path);
  ASSERT_TRUE(f->has_vision());
  ASSERT_TRUE(f->has_audio());
  const VisionEncoder venc(*f);
  const AudioEncoder aenc(*f);
  ThreadPool pool(2);
  const RgbImage img = load_image_file(mtmd("inputs/img2-photo-200x300.jpg"));
  const std::vector<float> v = venc.encode(img, &pool);
  ASSERT_EQ(v.size(), size_t(48 * 128));
  std::vector<float> pcm(16000);
  for (size_t i = 0; i < pcm.size(); ++i) pcm[i] = 0.2f * float(std::sin(0.05 * double(i)));
  const std::vector<float> a = aenc.encode(pcm, &pool);
  ASSERT_EQ(a.size(), size_t(aenc.n_tokens(pcm)) * 128);
  for (const auto* rows : {&v, &a}) {
    double sum2 = 0;
    for (float x : *rows) {
      ASSERT_TRUE(std::isfinite(x));
      sum2 += double(x) * x;
    }
    const double rms = std::sqrt(sum2 / double(rows->size()));
    EXPECT_GT(rms, 0.05);
    EXPECT_LT(rms, 20.0);
  }
  // The projector built in memory (what bench uses without --mmproj) is the same projector.
  const auto mem = synthetic_mmproj_in_memory(spec);
  EXPECT_EQ(VisionEncoder(*mem).encode(img, &pool), v);
  EXPECT_EQ(AudioEncoder(*mem).encode(pcm, &pool), a);
  std::remove(path.c_str());
}

TEST(SyntheticMmproj, E2bAndE4bPresetsHaveTheRealDimensions) {
  for (const char* name : {"e2b", "e4b"}) {
    const SyntheticMmproj m = synthetic_mmproj_preset(name, GgmlType::F16, 1);
    EXPECT_TRUE(m.vision && m.audio);
    EXPECT_EQ(m.v.n_layer, 16);
    EXPECT_EQ(m.v.n_embd, 768);
    EXPECT_EQ(m.v.n_head, 12);  // heads of 64
    EXPECT_EQ(m.v.n_ff, 3072);
    EXPECT_EQ(m.v.patch, 16);
    EXPECT_EQ(m.v.pos_size, 10240);
    EXPECT_EQ(m.a.n_layer, 12);
    EXPECT_EQ(m.a.n_embd, 1024);
    EXPECT_EQ(m.a.n_head, 8);  // heads of 128
    EXPECT_EQ(m.a.sscp_channels[0], 128);
    EXPECT_EQ(m.a.sscp_channels[1], 32);
    EXPECT_EQ(m.a.out_proj_dim, 1536);
    const int text = std::string(name) == "e2b" ? 1536 : 2560;
    EXPECT_EQ(m.v.n_embd_out, text);
    EXPECT_EQ(m.a.n_embd_out, text);
  }
  EXPECT_THROW(synthetic_mmproj_preset("e3b", GgmlType::F16, 1), std::invalid_argument);
  EXPECT_THROW(synthetic_mmproj_preset("e2b", GgmlType::Q4_K, 1), std::invalid_argument);
}

// ---- the command line: make-model --preset *-mmproj and bench's projector rows ----

using test::shell;

TEST(SyntheticMmproj, MakeModelWritesAndBenchTimesTheTowers) {
  const std::string gem4 = GEM4_BINARY, path = temp_path("cli.gguf");
  const auto [rc, out] = shell(gem4 + " make-model --preset tiny-mmproj --type f32 -o " + path + " 2>&1");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(MmprojFile::open(path)->gguf().find_tensor("v.blk.0.attn_q.weight")->type, GgmlType::F32);

  // From the file: an image that is resized (200x300 -> 288x384, 48 tokens) and a 2 s clip (50 tokens).
  const auto [rc2, json] =
      shell(gem4 + " bench --mmproj " + path + " --image " + mtmd("inputs/img2-photo-200x300.jpg") +
            " --audio-seconds 2 -r 2 -t 2 -o json 2>/dev/null");
  ASSERT_EQ(rc2, 0) << json;
  const auto rows = nlohmann::json::parse(json);
  ASSERT_EQ(rows.size(), 2u) << json;
  EXPECT_EQ(rows[0]["test"], "image 200x300 -> 288x384");
  EXPECT_EQ(rows[0]["n_soft_tokens"], 48);
  EXPECT_EQ(rows[0]["unit"], "images/s");
  EXPECT_EQ(rows[1]["test"], "audio 2.0 s");
  EXPECT_EQ(rows[1]["n_soft_tokens"], 50);
  EXPECT_EQ(rows[1]["unit"], "audio s/s");
  for (const auto& r : rows) {
    EXPECT_EQ(r["samples_s"].size(), 2u);
    EXPECT_GT(r["avg_rate"].get<double>(), 0);
    EXPECT_EQ(r["n_threads"], 2);
  }

  // In memory (no --mmproj), the markdown table; only the tower an input is given for.
  const auto [rc3, md] = shell(gem4 + " bench --mmproj-preset tiny --image-size 96x96 -r 1 2>&1");
  ASSERT_EQ(rc3, 0) << md;
  EXPECT_NE(md.find("| generated:tiny-mmproj | gemma4v 2x64 F16 |"), std::string::npos) << md;
  // 2 x 2 patches of 48 are under the 40-token floor: scaled up to 7 x 7.
  EXPECT_NE(md.find("image 96x96 -> 336x336 | 49 |"), std::string::npos) << md;
  EXPECT_EQ(md.find("gemma4a"), std::string::npos) << md;

  // Errors name the flag or the file.
  const auto [rc4, e1] = shell(gem4 + " bench --mmproj-preset tiny --image-size 96 2>&1");
  EXPECT_NE(rc4, 0);
  EXPECT_NE(e1.find("--image-size '96' is not WIDTHxHEIGHT"), std::string::npos) << e1;
  const auto [rc5, e2] = shell(gem4 + " bench --mmproj-preset e9b 2>&1");
  EXPECT_NE(rc5, 0);
  EXPECT_NE(e2.find("unknown projector preset 'e9b'"), std::string::npos) << e2;
  const auto [rc6, e3] =
      shell(gem4 + " bench --mmproj " + mtmd("models/gemma4-tiny-vision.gguf") + " --audio-seconds 1 2>&1");
  EXPECT_NE(rc6, 0);
  EXPECT_NE(e3.find("holds no audio tower"), std::string::npos) << e3;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gem4::media
