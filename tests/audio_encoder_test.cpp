// The gemma4a audio tower against llama.cpp's mtmd on the two reference clips
// (../shared/testdata/mtmd-ref): every intermediate the dumps hold, the projector embeddings (<= 1e-4
// max abs, the bound) and the soft-token counts; and clear refusals of projector files that
// are not a gemma4a tower gem4 knows.
#include "media/audio_encoder.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "kernels/thread_pool.h"
#include "media/audio_ops.h"
#include "media/audio_synthetic.h"
#include "media/encoder_matmul.h"
#include "media/mmproj_file.h"
#include "mtmd_projector.h"
#include "test_util.h"

namespace gem4::media {
namespace {

struct AudioCase {
  const char* id;
  const char* wav;
  int64_t frames, tokens;
};

const AudioCase kCases[] = {
    {"audio__aud1-speech-16k-mono", "aud1-speech-16k-mono.wav", 308, 77},
    {"audio__aud2-tones-44k1-stereo", "aud2-tones-44k1-stereo.wav", 169, 43},
};

using gem4::test::mtmd;

class AudioEncoderRef : public ::testing::TestWithParam<AudioCase> {};

TEST_P(AudioEncoderRef, EveryStageMatchesLlamaCpp) {
  const AudioCase& c = GetParam();
  const auto mmproj = test::open_mtmd_projector("models/gemma4-tiny-audio.gguf");
  const AudioEncoder enc(*mmproj);
  EXPECT_EQ(enc.hparams().n_embd, 64);
  EXPECT_EQ(enc.hparams().sscp_channels[0], 8);
  EXPECT_EQ(enc.hparams().sscp_channels[1], 4);
  EXPECT_EQ(enc.hparams().out_proj_dim, 96);
  EXPECT_EQ(enc.n_embd_out(), 128);

  const std::vector<float> pcm = read_wav_16k_mono(mtmd(std::string("inputs/") + c.wav));
  EXPECT_EQ(enc.n_tokens(pcm), c.tokens);
  EXPECT_EQ(AudioEncoder::n_tokens_for_frames(c.frames), c.tokens);

  std::map<std::string, std::vector<float>> got;
  const std::vector<float> embd = enc.encode(
      pcm, nullptr, [&](int chunk, const std::string& name, const float* d, int64_t rows, int64_t cols) {
        EXPECT_EQ(chunk, 0);
        EXPECT_EQ(rows, c.tokens) << name;
        got[name].assign(d, d + rows * cols);
      });
  ASSERT_EQ(embd.size(), size_t(c.tokens * 128));

  const std::string dir = std::string("dumps/") + c.id + "/";
  // Bounds: the measured deviation with some room (float summation order differs from ggml's).
  // Measured: <= 1.7e-6 at every stage (the first convolution sums in double as ggml does, so the
  // fp16 rounding of the second one's input agrees); the bound leaves room for other kernel sets.
  const std::pair<const char*, double> stages[] = {
      {"sscp_out", 2e-5}, {"layer_out-0", 2e-5}, {"layer_out-1", 2e-5}, {"embd", 2e-5}};
  for (const auto& [name, bound] : stages) {
    const bool final_rows = std::string(name) == "embd";
    const std::vector<float> want = test::read_f32(
        mtmd(dir + (final_rows ? std::string("embd") : "inter." + std::string(name)) + ".f32"));
    const std::vector<float>& have = final_rows ? embd : got[name];
    ASSERT_EQ(have.size(), want.size()) << name;
    const double diff = test::max_abs_diff(have.data(), want.data(), want.size());
    EXPECT_LE(diff, bound) << c.id << " " << name;
    std::printf("[ audio ] %s %-12s max |diff| %.3g\n", c.id, name, diff);
  }
}

INSTANTIATE_TEST_SUITE_P(MtmdRef, AudioEncoderRef, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.id).substr(7, 4); });

// ggml multiplies F16 (BF16) weights with activations rounded to fp16 (bf16): the tower does the same.
TEST(AudioEncoderFile, ActivationsOfHalfWeightsAreRoundedAsGgmlDoes) {
  const std::vector<float> x = {1.0f, 1.0f + 1.0f / 4096, -3.14159265f, 65504.0f, 1e-8f, 0.1f};
  std::vector<float> h = x, b = x, f = x, q = x;
  round_activations_for(GgmlType::F16, h.data(), int64_t(h.size()));
  round_activations_for(GgmlType::BF16, b.data(), int64_t(b.size()));
  round_activations_for(GgmlType::F32, f.data(), int64_t(f.size()));
  round_activations_for(GgmlType::Q8_0, q.data(), int64_t(q.size()));
  EXPECT_EQ(f, x);
  EXPECT_EQ(q, x);
  EXPECT_EQ(h[1], 1.0f);  // a quarter of fp16's 2^-10 step above 1
  EXPECT_EQ(h[2], -3.140625f);
  EXPECT_EQ(h[3], 65504.0f);
  EXPECT_EQ(h[5], 0.0999755859375f);
  EXPECT_EQ(b[2], -3.140625f);
  EXPECT_EQ(b[5], 0.10009765625f);
}

// A clip longer than 30 s is encoded in independent 30 s chunks, as mtmd does: the rows are the
// chunks' own rows one after the other.
TEST(AudioEncoderFile, LongClipsAreEncodedInThirtySecondChunks) {
  const auto mmproj = MmprojFile::open(mtmd("models/gemma4-tiny-audio.gguf"));
  const AudioEncoder enc(*mmproj);
  std::vector<float> pcm(static_cast<size_t>(kMelChunkSamples + 3 * kMelSampleRate));
  for (size_t i = 0; i < pcm.size(); ++i)
    pcm[i] = 0.2f * float(std::sin(0.002 * double(i) * (1 + double(i) * 1e-6)));
  const int64_t t0 = AudioEncoder::n_tokens_for_frames(mel_frame_count(kMelChunkSamples));
  const int64_t t1 = AudioEncoder::n_tokens_for_frames(mel_frame_count(3 * kMelSampleRate));
  EXPECT_EQ(t0, 750);
  EXPECT_EQ(enc.n_tokens(pcm), t0 + t1);
  std::vector<int> chunks_seen;
  const std::vector<float> all =
      enc.encode(pcm, nullptr, [&](int chunk, const std::string& name, const float*, int64_t, int64_t) {
        if (name == "embd") chunks_seen.push_back(chunk);
      });
  EXPECT_EQ(chunks_seen, (std::vector<int>{0, 1}));
  const int64_t d = enc.n_embd_out();
  ASSERT_EQ(all.size(), size_t((t0 + t1) * d));
  const std::vector<float> head(pcm.begin(), pcm.begin() + kMelChunkSamples),
      tail(pcm.begin() + kMelChunkSamples, pcm.end());
  const std::vector<float> a = enc.encode(head, nullptr), b = enc.encode(tail, nullptr);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), all.begin()));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), all.begin() + t0 * d));
  EXPECT_THROW(enc.encode(std::vector<float>(1, 0.5f), nullptr), AudioError);
}

// The tiny audio projector rewritten through `edit` (metadata and tensors), opened from memory.
struct Rewrite {
  std::function<bool(const std::string& key, gguf::Value& v)> key;               // false: drop the key
  std::function<bool(gguf::TensorInfo& t, std::vector<uint8_t>& bytes)> tensor;  // false: drop it
  std::vector<std::pair<std::string, gguf::Value>> extra_keys;
  std::vector<std::pair<std::string, std::vector<float>>> extra_tensors;  // F32, 1-D
};

std::unique_ptr<MmprojFile> rewrite(const std::vector<std::string>& sources, const Rewrite& r) {
  gguf::GgufWriter w;
  std::set<std::string> keys;
  for (const std::string& src : sources) {
    const auto f = gguf::GgufFile::open(mtmd(src));
    for (auto [k, v] : f->metadata()) {
      if (k == "general.alignment" || !keys.insert(k).second) continue;
      if (r.key && !r.key(k, v)) continue;
      w.set_value(k, v);
    }
    for (const gguf::TensorInfo& t0 : f->tensors()) {
      gguf::TensorInfo t = t0;
      const uint8_t* d = f->tensor_data(t0);
      std::vector<uint8_t> bytes(d, d + t0.nbytes);
      if (r.tensor && !r.tensor(t, bytes)) continue;
      w.add_tensor(t.name, t.ne, t.type, std::move(bytes));
    }
  }
  for (const auto& [k, v] : r.extra_keys) w.set_value(k, v);
  for (const auto& [name, vals] : r.extra_tensors) {
    std::vector<uint8_t> b(vals.size() * 4);
    std::memcpy(b.data(), vals.data(), b.size());
    w.add_tensor(name, {int64_t(vals.size())}, GgmlType::F32, std::move(b));
  }
  const std::vector<uint8_t> bytes = w.to_bytes();
  return MmprojFile::from_gguf(gguf::GgufFile::from_memory(bytes.data(), bytes.size(), "rewritten.gguf"));
}

// A file holding both towers (as real E2B/E4B projectors do) gives the audio tower's rows unchanged.
TEST(AudioEncoderFile, ReadsAFileWithBothTowers) {
  const auto both = rewrite({"models/gemma4-tiny-vision.gguf", "models/gemma4-tiny-audio.gguf"}, {});
  ASSERT_TRUE(both->has_vision());
  ASSERT_TRUE(both->has_audio());
  const auto audio = MmprojFile::open(mtmd("models/gemma4-tiny-audio.gguf"));
  const std::vector<float> pcm = test::read_f32(mtmd("dumps/audio__aud2-tones-44k1-stereo/pcm16k.f32"));
  EXPECT_EQ(AudioEncoder(*both).encode(pcm, nullptr), AudioEncoder(*audio).encode(pcm, nullptr));
}

TEST(AudioEncoderFile, RefusesFilesItDoesNotKnow) {
  const auto expect_error = [](const Rewrite& r, const std::string& needle,
                               const std::vector<std::string>& src = {"models/gemma4-tiny-audio.gguf"}) {
    try {
      const auto f = rewrite(src, r);
      const AudioEncoder enc(*f);
      ADD_FAILURE() << "accepted; expected an error containing \"" << needle << "\"";
    } catch (const MmprojError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("rewritten.gguf", 0), 0u) << e.what();
    }
  };
  const auto drop = [](const std::string& name) {
    Rewrite r;
    r.tensor = [name](gguf::TensorInfo& t, std::vector<uint8_t>&) { return t.name != name; };
    return r;
  };
  // A vision-only file has no audio tower.
  expect_error({}, "audio", {"models/gemma4-tiny-vision.gguf"});
  expect_error(drop("a.blk.1.attn_k_rel.weight"), "a.blk.1.attn_k_rel.weight");
  expect_error(drop("a.conv1d.0.weight"), "a.conv1d.0.weight");
  expect_error(drop("mm.a.input_projection.weight"), "mm.a.input_projection.weight");
  {
    Rewrite r;  // a misshapen matrix
    r.tensor = [](gguf::TensorInfo& t, std::vector<uint8_t>&) {
      if (t.name == "a.blk.0.attn_q.weight") t.ne = {32, 128};
      return true;
    };
    expect_error(r, "a.blk.0.attn_q.weight");
  }
  {
    Rewrite r;  // a tensor gem4 does not know in the audio tower
    r.extra_tensors = {{"a.blk.0.attn_q.bias", std::vector<float>(64, 0.0f)}};
    expect_error(r, "a.blk.0.attn_q.bias");
  }
  {
    Rewrite r;  // llama.cpp would ignore a clamp on the relative-position projection
    r.extra_tensors = {{"a.blk.0.attn_k_rel.input_max", {1.0f}}};
    expect_error(r, "a.blk.0.attn_k_rel.input_max");
  }
  {
    Rewrite r;  // another projector type
    r.key = [](const std::string& k, gguf::Value& v) {
      if (k == "clip.audio.projector_type") v.s = "gemma4ua";
      return true;
    };
    expect_error(r, "gemma4ua");
  }
  {
    Rewrite r;  // heads that do not divide the width
    r.key = [](const std::string& k, gguf::Value& v) {
      if (k == "clip.audio.attention.head_count") v.u = v.i = 5;
      return true;
    };
    expect_error(r, "heads 5");
  }
  {
    Rewrite r;  // a missing hyper-parameter
    r.key = [](const std::string& k, gguf::Value&) { return k != "clip.audio.block_count"; };
    expect_error(r, "clip.audio.block_count");
  }
}

std::unique_ptr<MmprojFile> synthetic(const SyntheticAudioTower& cfg, const std::string& path) {
  gguf::GgufWriter w;
  add_synthetic_audio_tower(w, cfg);
  w.write(path);
  return MmprojFile::open(path);
}

// Another shape than the reference file's (odd head count, 7 conv taps, 3 blocks, F16 matrices): the
// tower loads, gives the token count of the frame rule, finite O(1) rows, and the same bits with a
// thread pool as without.
TEST(AudioEncoderFile, OtherShapesRunAndAreThreadInvariant) {
  SyntheticAudioTower cfg;
  cfg.n_embd = 96;
  cfg.n_head = 3;
  cfg.n_ff = 192;
  cfg.n_layer = 3;
  cfg.sscp_channels[0] = 16;
  cfg.sscp_channels[1] = 8;
  cfg.conv_kernel = 7;
  cfg.out_proj_dim = 80;
  cfg.n_embd_out = 64;
  const std::string path = ::testing::TempDir() + "gem4_audio_other_shape.gguf";
  const auto f = synthetic(cfg, path);
  const AudioEncoder enc(*f);
  EXPECT_EQ(enc.hparams().head_dim, 32);
  EXPECT_EQ(enc.hparams().conv_kernel, 7);
  const std::vector<float> pcm = test::read_f32(mtmd("dumps/audio__aud1-speech-16k-mono/pcm16k.f32"));
  const std::vector<float> a = enc.encode(pcm, nullptr);
  ThreadPool pool(2);
  const std::vector<float> b = enc.encode(pcm, &pool);
  ASSERT_EQ(a.size(), size_t(77 * 64));
  EXPECT_EQ(a, b);
  double sum2 = 0;
  for (float v : a) {
    ASSERT_TRUE(std::isfinite(v));
    sum2 += double(v) * v;
  }
  const double rms = std::sqrt(sum2 / double(a.size()));
  EXPECT_GT(rms, 0.05);
  EXPECT_LT(rms, 20.0);
  std::remove(path.c_str());
}

// The E2B/E4B audio tower's dimensions (12 x 1024, 8 heads, 128/32 channels, F16 matrices) on 30 s of
// audio (8 s here, to keep the suite short: 200 rows of the E2B text width); prints the encoding
// speed (shared machine: indicative only).
TEST(AudioEncoderFile, SlowE2bShapedTowerEncodes) {
  const std::string path = ::testing::TempDir() + "gem4_audio_e2b_shape.gguf";
  const auto f = synthetic(SyntheticAudioTower{}, path);
  const AudioEncoder enc(*f);
  std::vector<float> pcm(static_cast<size_t>(8 * kMelSampleRate));
  for (size_t i = 0; i < pcm.size(); ++i)
    pcm[i] = 0.3f * float(std::sin(0.013 * double(i) * (1 + double(i) / 5e5)));
  ThreadPool pool(2);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> rows = enc.encode(pcm, &pool);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(rows.size(), size_t(200 * 1536));
  for (float v : rows) ASSERT_TRUE(std::isfinite(v));
  std::printf("[ audio ] E2B-shaped tower: 30 s of audio in %.2f s on 2 threads (%.1f audio s/s)\n", s,
              30.0 / s);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gem4::media
