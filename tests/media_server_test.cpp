// gem4 serve --mmproj: OpenAI image_url content parts with data: URIs; http(s) URLs and bad images are
// 400s naming the part; a server without a projector refuses image parts.
#include <gtest/gtest.h>

#include "server_harness.h"
#include "test_util.h"

namespace gem4::test {
namespace {

json image_message(const std::string& url, const std::string& text) {
  return json::array({{{"role", "user"},
                       {"content", json::array({{{"type", "image_url"}, {"image_url", {{"url", url}}}},
                                                {{"type", "text"}, {"text", text}}})}}});
}

TEST(MediaServer, ImageUrlDataUrisAndErrors) {
  const std::string model = testdata("mtmd-ref/models/gemma4-tiny-mmvocab-f32.gguf");
  const std::string png = read_file(testdata("mtmd-ref/inputs/img1-rgba-320x240.png"));
  const std::string data_uri = "data:image/png;base64," + base64(png);
  ServerProcess server({"-m", model, "--mmproj", testdata("mtmd-ref/models/gemma4-tiny-vision.gguf"), "-t",
                        "2", "--ctx", "1024"});
  ASSERT_GT(server.port(), 0);
  json body = {
      {"messages", image_message(data_uri, "Describe this image.")}, {"max_tokens", 3}, {"temperature", 0}};
  HttpReply r = post(server.port(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json usage = r.js()["usage"];
  // The same image again reuses the prefix, image included.
  r = post(server.port(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_GT(r.js()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 50) << r.body;
  // Another image, the same tokens: reuse stops where the image starts (it keys on the content).
  const std::string jpg = read_file(testdata("mtmd-ref/inputs/img2-photo-200x300.jpg"));
  json other = body;
  other["messages"] = image_message("data:image/jpeg;base64," + base64(jpg), "Describe this image.");
  r = post(server.port(), "/v1/chat/completions", other);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.js()["usage"]["prompt_tokens"], usage["prompt_tokens"]);
  EXPECT_LE(r.js()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 7) << r.body;

  // The rendered prompt plus 48 soft tokens and the two markers in place of the placeholder.
  const HttpReply text_only =
      post(server.port(), "/v1/chat/completions",
           {{"messages", user_message("Describe this image.")}, {"max_tokens", 1}, {"temperature", 0}});
  ASSERT_EQ(text_only.status, 200) << text_only.body;
  EXPECT_EQ(usage["prompt_tokens"].get<int>(), text_only.js()["usage"]["prompt_tokens"].get<int>() + 50);
  body["messages"] = image_message("https://example.com/cat.png", "hi");
  r = post(server.port(), "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("not fetched"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("messages[0].content[0]"), std::string::npos) << r.body;
  body["messages"] = image_message("data:image/png;base64,@@@", "hi");
  r = post(server.port(), "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("not valid base64"), std::string::npos) << r.body;
  body["messages"] = image_message("data:image/png;base64," + base64(png.substr(0, png.size() / 2)), "hi");
  r = post(server.port(), "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("cannot decode the PNG image"), std::string::npos) << r.body;
  body["messages"] = image_message("data:text/plain;base64," + base64("hello"), "hi");
  r = post(server.port(), "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("not a PNG or JPEG"), std::string::npos) << r.body;
}

TEST(MediaServer, WithoutAProjectorImagePartsAre400) {
  ServerProcess server({"-m", testdata("mtmd-ref/models/gemma4-tiny-mmvocab-f32.gguf"), "-t", "1"});
  ASSERT_GT(server.port(), 0);
  const json body = {{"messages", image_message("data:image/png;base64,AAAA", "hi")}, {"max_tokens", 1}};
  const HttpReply r = post(server.port(), "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("--mmproj"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace gem4::test
