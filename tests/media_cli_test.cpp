// gem4 encode: the projector's embeddings through the command line, as the hook for comparing
// with llama.cpp, and its errors.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "mtmd_projector.h"
#include "test_util.h"

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Result {
  int rc = -1;
  std::string out, err;
};

Result gem4(const std::string& args, const std::string& input = "") {
  const std::string base = "/tmp/gem4_media_cli_" + std::to_string(getpid());
  {
    std::ofstream f(base + ".in", std::ios::binary);
    f << input;
  }
  const std::string cmd = std::string("'") + GEM4_BINARY + "' " + args + " > '" + base + ".out' 2> '" + base +
                          ".err' < '" + base + ".in'";
  Result r;
  const int status = std::system(cmd.c_str());
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_all(base + ".out");
  r.err = read_all(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  std::remove((base + ".in").c_str());
  return r;
}

using gem4::test::mtmd;

TEST(MediaCli, EncodeWritesTheImageAndAudioEmbeddings) {
  const std::string out = "/tmp/gem4_media_cli_embd_" + std::to_string(getpid()) + ".f32";
  struct Case {
    std::string mmproj, flag, input, ref;
    int tokens;
    double tol;
  };
  const Case cases[] = {
      {"models/gemma4-tiny-vision.gguf", "--image", "inputs/img2-photo-200x300.jpg",
       "dumps/vision__img2-photo-200x300/embd.f32", 48, 1e-4},
      {"models/gemma4-tiny-audio.gguf", "--audio", "inputs/aud2-tones-44k1-stereo.wav",
       "dumps/audio__aud2-tones-44k1-stereo/embd.f32", 43, 1e-4},
  };
  for (const Case& c : cases) {
    const Result r = gem4("encode --mmproj '" + mtmd(c.mmproj) + "' " + c.flag + " '" + mtmd(c.input) +
                          "' --out '" + out + "' -t 2 " + gem4::test::kMtmdRefClampsFlag);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, "{\"n_embd\":128,\"tokens\":" + std::to_string(c.tokens) + "}\n");
    const auto got = gem4::test::read_f32(out);
    const auto ref = gem4::test::read_f32(mtmd(c.ref));
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_LE(gem4::test::max_abs_diff(got.data(), ref.data(), ref.size()), c.tol) << c.input;
  }
  std::remove(out.c_str());
}

TEST(MediaCli, EncodeErrorsNameTheProblem) {
  const std::string vision = mtmd("models/gemma4-tiny-vision.gguf");
  Result r = gem4("encode --mmproj '" + vision + "' --audio x.wav --out /tmp/x.f32");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("holds no audio tower"), std::string::npos) << r.err;
  r = gem4("encode --mmproj '" + vision + "' --out /tmp/x.f32");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("exactly one of --image"), std::string::npos) << r.err;
  r = gem4("encode --mmproj '" + vision + "' --image /nonexistent.png --out /tmp/x.f32");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("/nonexistent.png: cannot open"), std::string::npos) << r.err;
  r = gem4("encode --mmproj '" + mtmd("models/gemma4-tiny-mmvocab-f32.gguf") +
           "' --image x.png --out /tmp/x.f32");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("general.architecture"), std::string::npos) << r.err;
}

TEST(MediaCli, RunWithAnImage) {
  const std::string model = mtmd("models/gemma4-tiny-mmvocab-f32.gguf");
  const std::string vision = mtmd("models/gemma4-tiny-vision.gguf");
  Result r = gem4("run -m '" + model + "' --mmproj '" + vision + "' --image '" +
                  mtmd("inputs/img1-rgba-320x240.png") + "' --image '" +
                  mtmd("inputs/img2-photo-200x300.jpg") + "' --chat -p 'Describe these.' -n 4 --temp 0 -t 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("img1-rgba-320x240.png: 48 soft tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("img2-photo-200x300.jpg: 48 soft tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("generation: 4 tokens"), std::string::npos) << r.err;
  r = gem4("run -m '" + model + "' --image x.png -p hi -n 1");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--image and --audio need --mmproj"), std::string::npos) << r.err;
  r = gem4("run -m '" + model + "' --mmproj '" + vision + "' --image /nonexistent.png -p hi -n 1");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("/nonexistent.png"), std::string::npos) << r.err;
}

TEST(MediaCli, ChatImageCommand) {
  const std::string model = mtmd("models/gemma4-tiny-mmvocab-f32.gguf");
  const std::string vision = mtmd("models/gemma4-tiny-vision.gguf");
  const std::string img1 = mtmd("inputs/img1-rgba-320x240.png"), img2 = mtmd("inputs/img2-photo-200x300.jpg");
  const Result r = gem4(
      "chat -m '" + model + "' --mmproj '" + vision + "' -n 2 --temp 0 -t 2 -c 1024",
      "/image " + img1 + "\nDescribe it.\n/image /nonexistent.png\n/image " + img2 + "\nCompare.\n/exit\n");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("[image " + img1 + " attached to the next message]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("error: /nonexistent.png: cannot open the image file"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[prompt: 92 new tokens, 0 reused]"), std::string::npos) << r.err;  // 48 soft tokens
  // The second turn reuses the first (its image included) up to where the earlier reply begins.
  const size_t second = r.err.find("[prompt: ", r.err.find("[prompt: 92") + 1);
  ASSERT_NE(second, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(" 0 reused", second), std::string::npos) << r.err.substr(second);
  const Result no_proj = gem4("chat -m '" + model + "' -n 1 -t 2", "/image " + img1 + "\n/exit\n");
  EXPECT_EQ(no_proj.rc, 0);
  EXPECT_NE(no_proj.err.find("/image PATH needs gem4 chat --mmproj FILE"), std::string::npos) << no_proj.err;
}

}  // namespace
