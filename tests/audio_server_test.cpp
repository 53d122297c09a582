// gem4 serve --mmproj: OpenAI input_audio content parts (base64 WAV) become the clip's soft tokens in
// the prompt; another format, bad base64, a file that is not a WAV, a missing field: 400s naming the
// part; a server whose projector has no audio tower refuses audio parts.
#include <gtest/gtest.h>

#include "server_harness.h"
#include "test_util.h"

namespace gem4::test {
namespace {

std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : bytes) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(k[(acc >> bits) & 63]);
    }
  }
  if (bits > 0) out.push_back(k[(acc << (6 - bits)) & 63]);
  while (out.size() % 4) out.push_back('=');
  return out;
}

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

}  // namespace
}  // namespace gem4::test
