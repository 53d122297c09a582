// Tools with strict: true through the server: the arguments of every call the trained tiny model
// writes parse and validate against the tool's schema (python3-jsonschema), with tool_choice
// required, a named function and auto (the <|tool_call> trigger pushed by logit_bias), greedy and at
// temperature 1, streamed and not. Also: schemas keep the request's property order (the raw reply
// text follows it), and strict schemas that cannot be compiled are 400s naming the schema path.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include "server_harness.h"

namespace gem4 {
namespace {

using namespace test;

const char* kTools = R"([
  {"type":"function","function":{"name":"get_weather","strict":true,"parameters":{"type":"object",
   "properties":{"city":{"type":"string","maxLength":12},"unit":{"enum":["c","f"]}},
   "required":["city","unit"],"additionalProperties":false}}},
  {"type":"function","function":{"name":"add_user","strict":true,"parameters":{"type":"object",
   "properties":{"user":{"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":8},
   "age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","age"],"additionalProperties":false},
   "tags":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":3}},"required":["user"]}}},
  {"type":"function","function":{"name":"set_level","strict":true,"parameters":{"type":"object",
   "properties":{"level":{"enum":["low","mid","high"]},"count":{"type":"integer","minimum":1,"maximum":5}},
   "required":["level","count"]}}}])";
// (A non-strict tool beside them is in the call grammar with free arguments: the tiny model then
// picks it and writes keys until max_tokens, so grammar_tool_call_test checks that case.)

TEST(ServerTest, StrictToolCallsValidate) {
  ServerProcess srv({"-m", tiny_model(), "-t", "1", "--ctx", "1024"});
  ASSERT_TRUE(srv.ok()) << srv.log();
  const json tools = json::parse(kTools);
  std::map<std::string, json> schema_of;
  for (const auto& t : tools)
    if (t["function"].value("strict", false)) schema_of[t["function"]["name"]] = t["function"]["parameters"];
  // The trigger's id, from the server's own tokenizer.
  const HttpReply tk = post(srv.port(), "/tokenize", {{"content", "<|tool_call>"}});
  ASSERT_EQ(tk.status, 200) << tk.body;
  ASSERT_EQ(tk.js()["tokens"].size(), 1u) << tk.body;
  const std::string trigger = std::to_string(tk.js()["tokens"][0].get<int>());

  const std::string cases = testing::TempDir() + "gem4_strict_tools_" + std::to_string(getpid()) + ".jsonl";
  std::ofstream out(cases);
  int strict_calls = 0, auto_calls = 0;
  const struct {
    const char* label;
    json tool_choice;
    bool bias;
  } choices[] = {{"required", "required", false},
                 {"named", {{"type", "function"}, {"function", {{"name", "add_user"}}}}, false},
                 {"auto", "auto", true}};
  for (const auto& choice : choices) {
    for (int run = 0; run < 4; ++run) {
      const bool streamed = run % 2 == 1;
      const double temp = run < 2 ? 0.0 : 1.0;
      json body = {{"messages", user_message("Call a tool.")},
                   {"tools", tools},
                   {"tool_choice", choice.tool_choice},
                   {"temperature", temp},
                   {"seed", 3 + run},
                   {"max_tokens", 60}};
      if (choice.bias) body["logit_bias"] = {{trigger, 16}};
      const std::string label =
          std::string(choice.label) + " temp " + std::to_string(int(temp)) + (streamed ? " streamed" : "");
      json calls;
      std::string finish;
      if (streamed) {
        const StreamResult s = stream_chat(srv.port(), "/v1/chat/completions", body);
        ASSERT_EQ(s.status, 200) << label << " " << s.error;
        calls = s.tool_calls;
        finish = s.finish_reason;
      } else {
        const HttpReply r = post(srv.port(), "/v1/chat/completions", body);
        ASSERT_EQ(r.status, 200) << label << " " << r.body;
        const json msg = r.js()["choices"][0]["message"];
        calls = msg.contains("tool_calls") ? msg["tool_calls"] : json::array();
        finish = r.js()["choices"][0]["finish_reason"];
      }
      if (choice.bias)
        auto_calls += int(calls.size());
      else
        EXPECT_GE(calls.size(), 1u) << label;
      if (std::string(choice.label) == "named") {
        for (const auto& c : calls) EXPECT_EQ(c["function"]["name"], "add_user") << label;
      }
      for (const auto& c : calls) {
        const std::string name = c["function"]["name"];
        const std::string args = c["function"]["arguments"];
        const json parsed = json::parse(args, nullptr, false);
        EXPECT_TRUE(parsed.is_object()) << label << ": " << args;
        ASSERT_TRUE(schema_of.count(name)) << label << ": " << name;
        out << json{{"schema", schema_of[name]}, {"output", args}, {"label", label + " " + name}}.dump()
            << "\n";
        ++strict_calls;
      }
    }
  }
  out.close();
  EXPECT_GE(auto_calls, 1) << "the lazy path was never taken";
  EXPECT_GE(strict_calls, 8);
  const auto [rc, report] = test::validate_json_cases(cases);
  EXPECT_EQ(rc, 0) << report;
  EXPECT_NE(report.find(std::to_string(strict_calls) + "/" + std::to_string(strict_calls) + " valid"),
            std::string::npos)
      << report;
  std::remove(cases.c_str());
  EXPECT_EQ(http(srv.port(), "GET", "/health").status, 200);
  EXPECT_EQ(srv.stop(), 0);
}

// The body goes over the wire as written here (not through nlohmann::json, which sorts keys).
TEST(ServerTest, SchemasKeepTheRequestsPropertyOrder) {
  ServerProcess srv({"-m", tiny_model(), "-t", "1", "--ctx", "1024"});
  ASSERT_TRUE(srv.ok()) << srv.log();
  const std::string rf = R"({"messages":[{"role":"user","content":"JSON"}],"temperature":0,"max_tokens":80,
    "response_format":{"type":"json_schema","json_schema":{"name":"o","schema":{"type":"object",
    "properties":{"zeta":{"type":"integer"},"alpha":{"type":"string","maxLength":4},"mid":{"type":"boolean"}},
    "required":["zeta","alpha","mid"],"additionalProperties":false}}}})";
  const HttpReply r = http(srv.port(), "POST", "/v1/chat/completions", rf);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string content = r.js()["choices"][0]["message"]["content"];
  const size_t z = content.find("\"zeta\""), a = content.find("\"alpha\""), m = content.find("\"mid\"");
  ASSERT_NE(m, std::string::npos) << content;
  EXPECT_LT(z, a) << content;
  EXPECT_LT(a, m) << content;

  const std::string tool = R"({"messages":[{"role":"user","content":"x"}],"temperature":0,"max_tokens":60,
    "tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object",
    "properties":{"zeta":{"type":"integer"},"alpha":{"type":"string","maxLength":4}},
    "required":["zeta","alpha"]}}}],"tool_choice":{"type":"function","function":{"name":"f"}}})";
  const HttpReply t = http(srv.port(), "POST", "/v1/chat/completions", tool);
  ASSERT_EQ(t.status, 200) << t.body;
  const json calls = t.js()["choices"][0]["message"]["tool_calls"];
  ASSERT_GE(calls.size(), 1u) << t.body;
  const std::string args = calls[0]["function"]["arguments"];
  EXPECT_LT(args.find("\"zeta\""), args.find("\"alpha\"")) << args;
  EXPECT_NE(args.find("\"alpha\""), std::string::npos) << args;
  EXPECT_EQ(srv.stop(), 0);
}

TEST(ServerTest, StrictToolErrorsNameTheSchemaPath) {
  ServerProcess srv({"-m", tiny_model(), "-t", "1", "--ctx", "1024"});
  ASSERT_TRUE(srv.ok()) << srv.log();
  auto body = [](const std::string& tools, const std::string& extra = "") {
    return R"({"messages":[{"role":"user","content":"x"}],"max_tokens":4,"tools":)" + tools + extra + "}";
  };
  const struct {
    std::string body, param, message;
  } cases[] = {
      {body(R"([{"type":"function","function":{"name":"ok","strict":true}},
               {"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object",
               "properties":{"n":{"type":"integer","minimum":"low"}}}}}])"),
       "tools[1].function.parameters.properties.n.minimum", "must be a number"},
      {body(R"([{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"string"}}}])"),
       "tools[0].function.parameters", "must describe an object"},
      {body(R"([{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object",
               "properties":{"e":{"enum":["a<|\"|>b"]}}}}}])"),
       "tools[0].function.parameters.properties.e.enum[0]", "<|\"|>"},
      {body(R"([{"type":"function","function":{"name":"f","strict":"yes"}}])"), "tools[0].function.strict",
       "must be a boolean"},
      {body(R"([{"type":"function","function":{"name":"f","strict":true}}])",
            R"(,"response_format":{"type":"json_object"})"),
       "response_format", "strict tools"},
  };
  for (const auto& c : cases) {
    const HttpReply r = http(srv.port(), "POST", "/v1/chat/completions", c.body);
    EXPECT_EQ(r.status, 400) << c.body << "\n" << r.body;
    EXPECT_EQ(r.js()["error"]["param"], c.param) << r.body;
    EXPECT_NE(r.js()["error"]["message"].get<std::string>().find(c.message), std::string::npos) << r.body;
  }
  // A strict tool without parameters takes no arguments; the server stays healthy.
  const HttpReply ok = http(
      srv.port(), "POST", "/v1/chat/completions",
      body(R"([{"type":"function","function":{"name":"f","strict":true}}])", R"(,"tool_choice":"required")"));
  ASSERT_EQ(ok.status, 200) << ok.body;
  const json calls = ok.js()["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 1u) << ok.body;
  EXPECT_EQ(calls[0]["function"]["arguments"], "{}") << "no parameters: no arguments";
  EXPECT_EQ(http(srv.port(), "GET", "/health").status, 200);
  EXPECT_EQ(srv.stop(), 0);
}

}  // namespace
}  // namespace gem4
