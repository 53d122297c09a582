// gem4 serve --mmproj: OpenAI input_audio content parts (base64 WAV) become the clip's soft tokens in
// the prompt; another format, bad base64, a file that is not a WAV, a missing field: 400s naming the
// part; a server whose projector has no audio tower refuses audio parts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <set>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "server_harness.h"
#include "test_util.h"

namespace gem4::test {
namespace {

json audio_message(const json& input_audio, const std::string& text) {
  return json::array({{{"role", "user"},
                       {"content", json::array({{{"type", "input_audio"}, {"input_audio", input_audio}},
                                                {{"type", "text"}, {"text", text}}})}}});
}

TEST(AudioServer, InputAudioPartsAndErrors) {
  const std::string model = testdata("mtmd-ref/models/gemma4-tiny-mmvocab-f32.gguf");
  const std::string wav = read_file(testdata("mtmd-ref/inputs/aud2-tones-44k1-stereo.wav"));
  ServerProcess server({"-m", model, "--mmproj", testdata("mtmd-ref/models/gemma4-tiny-audio.gguf"), "-t",
                        "2", "--ctx", "1024"});
  ASSERT_GT(server.port(), 0);
  json body = {
      {"messages", audio_message({{"data", base64(wav)}, {"format", "wav"}}, "Transcribe this audio.")},
      {"max_tokens", 3},
      {"temperature", 0}};
  HttpReply r = post(server.port(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json usage = r.js()["usage"];
  // The same clip again reuses the prefix, clip included.
  r = post(server.port(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_GT(r.js()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 43) << r.body;
  // The rendered prompt plus 43 soft tokens and the two markers in place of the placeholder.
  const HttpReply text_only =
      post(server.port(), "/v1/chat/completions",
           {{"messages", user_message("Transcribe this audio.")}, {"max_tokens", 1}, {"temperature", 0}});
  ASSERT_EQ(text_only.status, 200) << text_only.body;
  EXPECT_EQ(usage["prompt_tokens"].get<int>(), text_only.js()["usage"]["prompt_tokens"].get<int>() + 45);

  const auto expect_400 = [&](const json& input_audio, const std::string& needle) {
    json b = body;
    b["messages"] = audio_message(input_audio, "hi");
    const HttpReply e = post(server.port(), "/v1/chat/completions", b);
    EXPECT_EQ(e.status, 400) << e.body;
    EXPECT_NE(e.body.find(needle), std::string::npos) << e.body;
    EXPECT_NE(e.body.find("messages[0].content[0]"), std::string::npos) << e.body;
  };
  expect_400({{"data", base64(wav)}, {"format", "mp3"}}, "only \\\"wav\\\"");
  expect_400({{"data", "@@@"}, {"format", "wav"}}, "not valid base64");
  expect_400({{"format", "wav"}}, "input_audio.data");
  expect_400({{"data", base64("hello, not a wav file")}, {"format", "wav"}}, "not a WAV file");
  expect_400({{"data", base64(wav.substr(0, 1000))}, {"format", "wav"}}, "truncated");
}

TEST(AudioServer, AProjectorWithoutAnAudioTowerRefusesAudioParts) {
  ServerProcess server({"-m", testdata("mtmd-ref/models/gemma4-tiny-mmvocab-f32.gguf"), "--mmproj",
                        testdata("mtmd-ref/models/gemma4-tiny-vision.gguf"), "-t", "1"});
  ASSERT_GT(server.port(), 0);
  const json body = {{"messages", audio_message({{"data", "AAAA"}, {"format", "wav"}}, "hi")},
                     {"max_tokens", 1}};
  const HttpReply r = post(server.port(), "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("no audio tower"), std::string::npos) << r.body;
}

// The vision and audio towers in one file, as real E2B/E4B projectors are.
std::string write_both_towers(const std::string& path) {
  gguf::GgufWriter w;
  std::set<std::string> keys;
  for (const char* src :
       {"mtmd-ref/models/gemma4-tiny-vision.gguf", "mtmd-ref/models/gemma4-tiny-audio.gguf"}) {
    const auto f = gguf::GgufFile::open(testdata(src));
    for (const auto& [k, v] : f->metadata())
      if (k != "general.alignment" && keys.insert(k).second) w.set_value(k, v);
    for (const gguf::TensorInfo& t : f->tensors()) {
      const uint8_t* d = f->tensor_data(t);
      w.add_tensor(t.name, t.ne, t.type, std::vector<uint8_t>(d, d + t.nbytes));
    }
  }
  w.write(path);
  return path;
}

// The official OpenAI Node.js client sends an image part and an audio part in one message to a server
// whose projector holds both towers: 48 image and 43 audio soft tokens (each with its two markers) in
// the prompt; an mp3 part is a 400 the client reports.
TEST(AudioServer, OpenAINodeClientSendsImageAndAudio) {
  std::string npm_error;
  const std::string dir = openai_node_dir(npm_error);
  ASSERT_FALSE(dir.empty()) << npm_error;
  const std::string both =
      write_both_towers(::testing::TempDir() + "gem4_both_towers_" + std::to_string(getpid()) + ".gguf");
  ServerProcess server({"-m", testdata("mtmd-ref/models/gemma4-tiny-mmvocab-f32.gguf"), "--mmproj", both,
                        "-t", "2", "--ctx", "1024"});
  ASSERT_GT(server.port(), 0);
  const std::string out_path = ::testing::TempDir() + "gem4_node_media_" + std::to_string(getpid()) + ".json";
  setenv("OPENAI_NODE_DIR", dir.c_str(), 1);
  setenv("GEM4_BASE_URL", ("http://127.0.0.1:" + std::to_string(server.port()) + "/v1").c_str(), 1);
  setenv("GEM4_PNG", testdata("mtmd-ref/inputs/img1-rgba-320x240.png").c_str(), 1);
  setenv("GEM4_WAV", testdata("mtmd-ref/inputs/aud2-tones-44k1-stereo.wav").c_str(), 1);
  const std::string script = std::string(GEM4_SOURCE_DIR) + "/tests/server_openai_node/media_test.cjs";
  const int rc = std::system(("timeout 120 node " + script + " > " + out_path + " 2>&1").c_str());
  const std::string out = read_file(out_path);
  std::remove(out_path.c_str());
  std::remove(both.c_str());
  ASSERT_EQ(rc, 0) << out;
  const json j = json::parse(out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  const int text = j["text"]["usage"]["prompt_tokens"].get<int>();
  EXPECT_EQ(j["audio"]["usage"]["prompt_tokens"].get<int>(), text + 45) << out;
  EXPECT_EQ(j["both"]["usage"]["prompt_tokens"].get<int>(), text + 45 + 50) << out;
  EXPECT_EQ(j["bad"]["status"], 400) << out;
}

}  // namespace
}  // namespace gem4::test
