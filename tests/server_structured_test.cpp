// Structured outputs through the server: response_format json_schema on the 40 schemas of
// tests/data/grammar_schemas.json, sent by the official OpenAI Node.js client, not streamed at
// temperature 0 and streamed at temperature 1. The trained tiny model never writes JSON on its own;
// every reply must parse and validate against its schema (python3-jsonschema, an independent
// validator: scripts/validate_json_schema.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "server_harness.h"

namespace gem4 {
namespace {

using namespace test;

TEST(ServerTest, StructuredOutputThroughOpenAINodeClientSlow) {
  std::string npm_error;
  const std::string dir = openai_node_dir(npm_error);
  ASSERT_FALSE(dir.empty()) << npm_error;
  ServerProcess srv({"-m", tiny_model(), "-t", "1", "--parallel", "2", "--ctx", "2048"});
  ASSERT_TRUE(srv.ok()) << srv.log();
  const std::string src = GEM4_SOURCE_DIR;
  const std::string cases = "/tmp/gem4_structured_" + std::to_string(getpid()) + ".jsonl";
  setenv("OPENAI_NODE_DIR", dir.c_str(), 1);
  setenv("GEM4_BASE_URL", ("http://127.0.0.1:" + std::to_string(srv.port()) + "/v1").c_str(), 1);
  setenv("GEM4_SCHEMAS", (src + "/tests/data/grammar_schemas.json").c_str(), 1);
  const auto [rc, client_log] =
      shell("timeout 600 node " + src + "/tests/server_openai_node/structured_test.cjs > " + cases + " 2>&1");
  ASSERT_EQ(rc, 0) << client_log << read_file(cases);
  const auto [vrc, report] = validate_json_cases(cases);
  EXPECT_EQ(vrc, 0) << report;
  EXPECT_NE(report.find("80/80 valid"), std::string::npos) << report;
  // Every reply ended by itself (the grammar completed), none at the token limit.
  const std::string lines = read_file(cases);
  EXPECT_EQ(lines.find("finish length"), std::string::npos) << lines;
  std::remove(cases.c_str());
  const HttpReply h = http(srv.port(), "GET", "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(srv.stop(), 0);
}

}  // namespace
}  // namespace gem4
