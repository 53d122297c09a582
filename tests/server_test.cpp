// Acceptance tests of `gem4 serve`: each test starts the real binary (GEM4_BINARY) on a free loopback
// port, talks HTTP over a plain socket (no client library, so what we check is what goes over the
// wire), and always stops the server. Every wait is bounded.
//
// Generated text is compared with the library's own single-session greedy generation (Session +
// argmax over the same rendered prompt), computed here.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "generate/drafter_factory.h"
#include "generate/generate.h"
#include "generate/sampler.h"
#include "generate/session.h"
#include "kernels/thread_pool.h"
#include "model/model.h"
#include "server_harness.h"
#include "test_util.h"
#include "text/chat_format.h"
#include "text/detokenizer.h"
#include "text/output_parser.h"
#include "text/tokenizer.h"

namespace gem4 {
namespace {

using namespace test;  // server_harness.h: ServerProcess, http(), post(), stream_chat()

// ---- the reference: single-session greedy generation ---------------------------------------------

struct Reference {
  std::vector<int32_t> prompt;
  std::string text;  // content after the output parser
  std::string reasoning;
  int generated = 0;  // tokens generated (EOG not counted)
  bool hit_eog = false;
};

class Library {
 public:
  explicit Library(const std::string& path)
      : model_(Model::load(path)), tok_(text::Tokenizer::from_gguf(*model_->file)), pool_(1) {}

  const text::Tokenizer& tok() const { return tok_; }
  const Model& model() const { return *model_; }

  std::vector<int32_t> chat_prompt(const json& messages) const {
    const std::string text =
        text::render_chat(text::normalize_tool_call_arguments(messages), json(), true, false);
    return tok_.encode(text, false, true);
  }

  // Greedy by default; with `sampling`, the library's sampler chain (logit bias, penalties).
  Reference greedy(const std::vector<int32_t>& prompt, int max_tokens, bool parse_chat,
                   const generate::SamplingParams* sampling = nullptr, const json* logit_bias = nullptr) {
    std::optional<generate::Sampler> sampler;
    if (sampling) sampler.emplace(*sampling);
    if (logit_bias) {
      generate::SamplingParams sp;
      sp.temperature = 0;
      for (const auto& [id, bias] : logit_bias->items()) sp.logit_bias[std::stoi(id)] = bias.get<float>();
      sampler.emplace(sp);
    }
    SessionOptions so;
    so.n_ctx = int(prompt.size()) + max_tokens + 1;
    so.ubatch = 512;
    so.kv_type = KvType::F16;  // the server's default
    Session session(*model_, &pool_, so);
    session.set_tokens(prompt);
    Reference ref;
    ref.prompt = prompt;
    text::StreamingDetokenizer detok(tok_, /*special=*/false);
    std::string raw;
    for (;;) {
      const float* l = session.logits();
      const int32_t t = sampler ? sampler->sample(l, session.n_vocab())
                                : int32_t(std::max_element(l, l + session.n_vocab()) - l);
      if (sampler) sampler->accept(t);
      if (tok_.is_eog(t)) {
        ref.hit_eog = true;
        break;
      }
      raw += detok.push(t);
      if (++ref.generated == max_tokens) break;
      session.push(t);
    }
    raw += detok.flush();
    ref.text = parse_chat ? text::parse_output(raw).content : raw;
    ref.reasoning = parse_chat ? text::parse_output(raw).reasoning : "";
    return ref;
  }

 private:
  std::unique_ptr<Model> model_;
  text::Tokenizer tok_;
  ThreadPool pool_;
};

// A tiny-shaped model (random weights, the tiny vocabulary) whose context is 4,096 tokens, for prompts
// longer than the trained tiny model's context.
bool make_long_context_model(const std::string& path) {
  const std::string cmd = std::string(GEM4_BINARY) + " make-model --preset tiny --ctx 4096 --vocab " +
                          tiny_model() + " -t 1 -o " + path + " 2>/dev/null";
  return std::system(cmd.c_str()) == 0;
}

json user(const std::string& content) { return json::array({{{"role", "user"}, {"content", content}}}); }

const std::vector<std::string> kPrompts = {"In the beginning God created", "And the LORD said unto Moses,",
                                           "Blessed are the", "Write a psalm about the sea."};

// ---- tests ---------------------------------------------------------------------------------------

TEST(ServerTest, ChatMatchesSingleSessionGreedy) {
  Library lib(tiny_model());
  ServerProcess srv({"-m", tiny_model(), "--parallel", "2", "-t", "1"});
  ASSERT_TRUE(srv.ok());
  for (const std::string& p : kPrompts) {
    const Reference ref = lib.greedy(lib.chat_prompt(user(p)), 40, true);
    const json body = {{"model", "x"}, {"messages", user(p)}, {"max_tokens", 40}, {"temperature", 0}};

    const HttpReply r = post(srv.port(), "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = r.js();
    ASSERT_TRUE(j.is_object()) << r.body;
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(j["choices"][0]["message"]["content"], ref.text) << "prompt: " << p;
    EXPECT_EQ(j["choices"][0]["finish_reason"], ref.hit_eog ? "stop" : "length");
    EXPECT_EQ(j["usage"]["prompt_tokens"], int(ref.prompt.size()));
    EXPECT_EQ(j["usage"]["completion_tokens"], ref.generated);
    EXPECT_EQ(j["usage"]["total_tokens"], int(ref.prompt.size()) + ref.generated);
    EXPECT_TRUE(j["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());

    const StreamResult s = stream_chat(srv.port(), "/v1/chat/completions", body);
    EXPECT_EQ(s.status, 200);
    EXPECT_TRUE(s.error.empty()) << s.error;
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.content, ref.text) << "prompt: " << p;
    EXPECT_EQ(s.finish_reason, ref.hit_eog ? "stop" : "length");
    EXPECT_EQ(s.usage["completion_tokens"], ref.generated);
    // The same prompt again: everything but the last prompt token comes from the cache.
    EXPECT_EQ(s.usage["prompt_tokens_details"]["cached_tokens"], int(ref.prompt.size()) - 1);
  }

  // /v1/completions on raw text: BOS + the text, as llama.cpp's completion does. The README of the
  // model gives llama.cpp's greedy continuation of this prompt.
  const Reference ref = lib.greedy(lib.tok().encode("In the beginning God created", true, true), 24, false);
  const HttpReply c =
      post(srv.port(), "/v1/completions",
           {{"prompt", "In the beginning God created"}, {"max_tokens", 24}, {"temperature", 0}});
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.js()["object"], "text_completion");
  EXPECT_EQ(c.js()["choices"][0]["text"], ref.text);
  EXPECT_EQ(ref.text.rfind(" his word; and in the earthquake his words;", 0), 0u) << ref.text;
  const StreamResult cs =
      stream_chat(srv.port(), "/v1/completions",
                  {{"prompt", "In the beginning God created"}, {"max_tokens", 24}, {"temperature", 0}});
  EXPECT_EQ(cs.content, ref.text);
  EXPECT_EQ(cs.finish_reason, "length");

  // Token-id prompts and stop strings.
  const HttpReply ids =
      post(srv.port(), "/v1/completions",
           {{"prompt", ref.prompt}, {"max_tokens", 24}, {"temperature", 0}, {"stop", {"earthquake"}}});
  ASSERT_EQ(ids.status, 200) << ids.body;
  EXPECT_EQ(ids.js()["choices"][0]["text"], " his word; and in the ");
  EXPECT_EQ(ids.js()["choices"][0]["finish_reason"], "stop");

  // Sampling with a seed is reproducible, and the sampler's chain matches the library's.
  const json seeded = {{"messages", user(kPrompts[3])},
                       {"max_tokens", 24},
                       {"temperature", 0.9},
                       {"top_k", 40},
                       {"top_p", 0.9},
                       {"min_p", 0.02},
                       {"seed", 1234}};
  const HttpReply s1 = post(srv.port(), "/v1/chat/completions", seeded);
  const HttpReply s2 = post(srv.port(), "/v1/chat/completions", seeded);
  ASSERT_EQ(s1.status, 200) << s1.body;
  EXPECT_EQ(s1.js()["choices"][0]["message"]["content"], s2.js()["choices"][0]["message"]["content"]);
  generate::SamplingParams sp;
  sp.temperature = 0.9f;
  sp.top_k = 40;
  sp.top_p = 0.9f;
  sp.min_p = 0.02f;
  sp.seed = 1234;
  sp.repeat_last_n = -1;
  EXPECT_EQ(s1.js()["choices"][0]["message"]["content"],
            lib.greedy(lib.chat_prompt(user(kPrompts[3])), 24, true, &sp).text);
  EXPECT_EQ(srv.stop(), 0) << srv.log();
}

TEST(ServerTest, ToolCallRoundTrip) {
  Library lib(tiny_model());
  ServerProcess srv({"-m", tiny_model(), "-t", "1"});
  ASSERT_TRUE(srv.ok());
  const json tools = json::parse(R"([{"type":"function","function":{"name":"get_weather",
      "description":"Current weather in a city","parameters":{"type":"object",
      "properties":{"city":{"type":"string"}},"required":["city"]}}}])");
  // A full round: the user asks, the assistant called the tool (OpenAI form: arguments as a JSON
  // string), the tool answered; the model continues its turn.
  const json messages = json::parse(R"([
      {"role":"system","content":"You are a helpful assistant."},
      {"role":"user","content":"What is the weather in Paris?"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"{\"temperature\": 21, \"sky\": \"clear\"}"}])");
  const std::string expected =
      text::render_chat(text::normalize_tool_call_arguments(messages), tools, true, false);
  const HttpReply t = post(srv.port(), "/apply-template", {{"messages", messages}, {"tools", tools}});
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(t.js()["prompt"], expected);
  EXPECT_NE(expected.find("<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>"),
            std::string::npos)
      << expected;
  EXPECT_NE(expected.find("<|tool_response>response:get_weather"), std::string::npos) << expected;

  // The request path: the same conversation generates (greedy), like the library does.
  {
    const std::vector<int32_t> prompt = lib.tok().encode(expected, false, true);
    const Reference ref = lib.greedy(prompt, 16, true);
    const HttpReply r =
        post(srv.port(), "/v1/chat/completions",
             {{"messages", messages}, {"tools", tools}, {"max_tokens", 16}, {"temperature", 0}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.js()["choices"][0]["message"]["content"], ref.text);
    EXPECT_EQ(r.js()["usage"]["prompt_tokens"], int(prompt.size()));
  }

  // The output path: the tiny model never calls tools by itself. tool_choice naming the function
  // opens the call in the prompt ("<|tool_call>call:get_weather{"); logit_bias plus a presence
  // penalty then force "}" , "<tool_call|>", "<|tool_response>" (each biased token wins once, then
  // the penalty hands over to the next). The parser must turn that into an OpenAI tool call.
  const int32_t brace = lib.tok().encode("}", false, false).at(0);
  const int32_t close = *lib.tok().find_token("<tool_call|>");
  const int32_t respond = *lib.tok().find_token("<|tool_response>");
  const json forced = {
      {"messages", user("What is the weather in Paris?")},
      {"tools", tools},
      {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
      {"logit_bias",
       {{std::to_string(brace), 400}, {std::to_string(close), 200}, {std::to_string(respond), 100}}},
      {"presence_penalty", 400},
      {"max_tokens", 8},
      {"temperature", 0}};
  const HttpReply r = post(srv.port(), "/v1/chat/completions", forced);
  ASSERT_EQ(r.status, 200) << r.body;
  const json msg = r.js()["choices"][0]["message"];
  EXPECT_EQ(r.js()["choices"][0]["finish_reason"], "tool_calls") << r.body;
  ASSERT_TRUE(msg["tool_calls"].is_array()) << r.body;
  ASSERT_EQ(msg["tool_calls"].size(), 1u) << r.body;
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], "{}");
  EXPECT_TRUE(msg["tool_calls"][0]["id"].is_string());
  EXPECT_TRUE(msg["content"].is_null()) << r.body;
  EXPECT_EQ(r.js()["usage"]["completion_tokens"], 2);  // "}" and "<tool_call|>"; the EOG is not counted

  const StreamResult s = stream_chat(srv.port(), "/v1/chat/completions", forced);
  EXPECT_EQ(s.finish_reason, "tool_calls");
  ASSERT_EQ(s.tool_calls.size(), 1u);
  EXPECT_EQ(s.tool_calls[0]["index"], 0);
  EXPECT_EQ(s.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(s.tool_calls[0]["function"]["arguments"], "{}");

  // The call goes back in as an assistant message (arguments as a string) plus the tool's answer.
  json round2 = user("What is the weather in Paris?");
  round2.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", msg["tool_calls"]}});
  round2.push_back({{"role", "tool"}, {"tool_call_id", msg["tool_calls"][0]["id"]}, {"content", "sunny"}});
  const HttpReply r2 = post(srv.port(), "/apply-template", {{"messages", round2}, {"tools", tools}});
  ASSERT_EQ(r2.status, 200) << r2.body;
  EXPECT_EQ(r2.js()["prompt"],
            text::render_chat(text::normalize_tool_call_arguments(round2), tools, true, false));
  EXPECT_NE(
      r2.js()["prompt"].get<std::string>().find("<|tool_call>call:get_weather{}<tool_call|><|tool_response>"
                                                "response:get_weather{value:<|\"|>sunny<|\"|>}"),
      std::string::npos)
      << r2.body;
  EXPECT_EQ(srv.stop(), 0);
}

// Thinking on/off per request, and reasoning returned as reasoning_content.
TEST(ServerTest, ThinkingSwitchAndReasoningContent) {
  Library lib(tiny_model());
  ServerProcess srv({"-m", tiny_model(), "-t", "1"});
  ASSERT_TRUE(srv.ok());
  const json msgs = user("Blessed are the");
  auto rendered = [&](const json& extra) {
    json body = {{"messages", msgs}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    const HttpReply r = post(srv.port(), "/apply-template", body);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.js()["prompt"].get<std::string>();
  };
  const std::string off = text::render_chat(msgs, json(), true, false),
                    on = text::render_chat(msgs, json(), true, true);
  EXPECT_NE(off, on);
  EXPECT_EQ(rendered(json::object()), off);  // default: thinking off
  EXPECT_EQ(rendered({{"chat_template_kwargs", {{"enable_thinking", true}}}}), on);
  EXPECT_EQ(rendered({{"chat_template_kwargs", {{"enable_thinking", false}}}}), off);
  EXPECT_EQ(rendered({{"reasoning_effort", "high"}}), on);
  EXPECT_EQ(rendered({{"reasoning_effort", "none"}}), off);
  EXPECT_EQ(rendered({{"think", true}}), on);

  // The tiny model never opens a thought channel by itself: logit_bias forces "<|channel>" first
  // (the presence penalty then lets the model write on) and bans "<channel|>" and the end markers,
  // so everything after it is reasoning. The reference is the library's sampler over the same
  // prompt with the same settings.
  const int32_t channel = *lib.tok().find_token("<|channel>"),
                channel_end = *lib.tok().find_token("<channel|>");
  generate::SamplingParams sp;
  sp.temperature = 0;
  sp.presence_penalty = 400;
  sp.repeat_last_n = -1;
  sp.logit_bias = {{channel, 400}, {channel_end, -100}, {1, -100}, {6, -100}, {14, -100}};
  const Reference ref = lib.greedy(lib.tok().encode(on, false, true), 10, true, &sp);
  ASSERT_FALSE(ref.reasoning.empty());
  const json body = {{"messages", msgs},
                     {"chat_template_kwargs", {{"enable_thinking", true}}},
                     {"max_tokens", 10},
                     {"temperature", 0},
                     {"presence_penalty", 400},
                     {"logit_bias",
                      {{std::to_string(channel), 400},
                       {std::to_string(channel_end), -100},
                       {"1", -100},
                       {"6", -100},
                       {"14", -100}}}};
  const HttpReply r = post(srv.port(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.js()["choices"][0]["message"]["reasoning_content"], ref.reasoning) << r.body;
  EXPECT_EQ(r.js()["choices"][0]["message"]["content"], ref.text) << r.body;
  const StreamResult s = stream_chat(srv.port(), "/v1/chat/completions", body);
  EXPECT_EQ(s.reasoning, ref.reasoning);
  EXPECT_EQ(s.content, ref.text);
  EXPECT_EQ(srv.stop(), 0);
}

bool is_metric_name(const std::string& s) {
  if (s.empty() || std::isdigit(uint8_t(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(uint8_t(c)) && c != '_' && c != ':') return false;
  return true;
}

// name{label="value",...} value [timestamp]
bool parse_prometheus_sample(const std::string& line, std::string* name, bool* labelled, double* value) {
  size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
  *name = line.substr(0, i);
  if (!is_metric_name(*name)) return false;
  *labelled = i < line.size() && line[i] == '{';
  if (*labelled) {
    ++i;
    while (i < line.size() && line[i] != '}') {
      const size_t eq = line.find('=', i);
      if (eq == std::string::npos || !is_metric_name(line.substr(i, eq - i)) || line.find(':', i) < eq)
        return false;
      i = eq + 1;
      if (i >= line.size() || line[i] != '"') return false;
      for (++i; i < line.size() && line[i] != '"'; ++i)
        if (line[i] == '\\') {
          if (++i >= line.size() || (line[i] != '\\' && line[i] != '"' && line[i] != 'n')) return false;
        }
      if (i >= line.size()) return false;
      ++i;  // closing quote
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return false;
    ++i;  // '}'
  }
  if (i >= line.size() || line[i] != ' ') return false;
  std::istringstream rest(line.substr(i + 1));
  std::string v, ts, extra;
  rest >> v >> ts >> extra;
  if (v.empty() || !extra.empty()) return false;
  if (v == "NaN" || v == "+Inf" || v == "-Inf") {
    *value = std::strtod(v.c_str(), nullptr);
  } else {
    char* end = nullptr;
    *value = std::strtod(v.c_str(), &end);
    if (*end != '\0') return false;
  }
  if (!ts.empty()) {
    char* end = nullptr;
    std::strtoll(ts.c_str(), &end, 10);
    if (*end != '\0') return false;
  }
  return true;
}

// Prometheus text format 0.0.4: "# HELP name text", "# TYPE name type", "name{labels} value".
TEST(ServerTest, MetricsIsPrometheusText) {
  ServerProcess srv({"-m", tiny_model(), "--parallel", "2", "-t", "1"});
  ASSERT_TRUE(srv.ok());
  ASSERT_EQ(post(srv.port(), "/v1/chat/completions", {{"messages", user("Hi")}, {"max_tokens", 5}}).status,
            200);
  const HttpReply m = http(srv.port(), "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_NE(m.headers.at("content-type").find("text/plain"), std::string::npos);
  std::map<std::string, std::string> types;
  std::map<std::string, double> values;  // unlabelled samples
  std::istringstream in(m.body);
  std::string line;
  int samples = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream f(line.substr(7));
      std::string name, type, extra;
      f >> name >> type;
      EXPECT_TRUE(is_metric_name(name)) << line;
      EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram" || type == "summary" ||
                  type == "untyped")
          << line;
      EXPECT_FALSE(f >> extra) << line;
      EXPECT_FALSE(types.count(name)) << "TYPE twice: " << line;
      types[name] = type;
    } else if (line.rfind("# HELP ", 0) == 0) {
      std::istringstream f(line.substr(7));
      std::string name;
      f >> name;
      EXPECT_TRUE(is_metric_name(name)) << line;
    } else if (line[0] == '#') {
      // other comments are allowed
    } else {
      std::string name;
      bool labelled = false;
      double value = 0;
      ASSERT_TRUE(parse_prometheus_sample(line, &name, &labelled, &value))
          << "not Prometheus text: '" << line << "'";
      std::string family = name;  // a histogram's samples: NAME_bucket, NAME_sum, NAME_count
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string base = name.substr(0, name.size() - std::min(name.size(), std::strlen(suffix)));
        if (name.size() > std::strlen(suffix) && name.compare(base.size(), std::string::npos, suffix) == 0 &&
            types.count(base) && types[base] == "histogram")
          family = base;
      }
      EXPECT_TRUE(types.count(family)) << "sample before its TYPE: " << line;
      if (!labelled) values[name] = value;
      ++samples;
    }
  }
  EXPECT_GT(samples, 10);
  for (const char* name :
       {"gem4_prompt_tokens_total", "gem4_generated_tokens_total", "gem4_prompt_tokens_per_second",
        "gem4_generation_tokens_per_second", "gem4_requests_queued", "gem4_kv_cache_usage_ratio",
        "gem4_kv_cache_used_cells", "gem4_slots_busy"})
    EXPECT_TRUE(values.count(name)) << name;
  EXPECT_EQ(types["gem4_generated_tokens_total"], "counter");
  EXPECT_EQ(types["gem4_requests_queued"], "gauge");
  EXPECT_EQ(values["gem4_generated_tokens_total"], 5);
  EXPECT_GT(values["gem4_prompt_tokens_total"], 5);
  EXPECT_GT(values["gem4_generation_tokens_per_second"], 0);
  EXPECT_GT(values["gem4_kv_cache_used_cells"], 0);
  EXPECT_NE(m.body.find("gem4_http_requests_total{path=\"/v1/chat/completions\",status=\"200\"} 1"),
            std::string::npos);
  EXPECT_EQ(srv.stop(), 0);
}

struct BadCase {
  std::string name, method, path, body;
  int status;
  std::string param;  // "" : null
  std::string code;   // "" : not checked
};

TEST(ServerTest, RejectsMalformedRequests) {
  Library lib(tiny_model());
  ServerProcess srv({"-m", tiny_model(), "-t", "1", "--max-body", "65536"});
  ASSERT_TRUE(srv.ok());
  const std::string C = "/v1/chat/completions";
  auto chat = [](const std::string& extra) {
    return R"({"messages":[{"role":"user","content":"Hi"}])" + (extra.empty() ? "" : "," + extra) + "}";
  };
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += "and the LORD said ";
  std::string deep = R"({"messages":[{"role":"user","content":"Hi"}],"x":)" + std::string(200, '[') +
                     std::string(200, ']') + "}";
  const std::vector<BadCase> cases = {
      {"truncated JSON", "POST", C, R"({"messages": [)", 400, "", "invalid_json"},
      {"array body", "POST", C, "[1,2]", 400, "", "invalid_type"},
      {"string body", "POST", C, R"("hello")", 400, "", "invalid_type"},
      {"empty body", "POST", C, "", 400, "", "invalid_json"},
      {"invalid UTF-8", "POST", C, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 400, "",
       "invalid_utf8"},
      {"overlong UTF-8", "POST", C, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xc0\xaf\"}]}", 400, "",
       "invalid_utf8"},
      {"nested too deep", "POST", C, deep, 400, "", "invalid_json"},
      {"no messages", "POST", C, "{}", 400, "messages", "missing_required_parameter"},
      {"messages not array", "POST", C, R"({"messages":"hi"})", 400, "messages", "invalid_type"},
      {"messages empty", "POST", C, R"({"messages":[]})", 400, "messages", ""},
      {"message not object", "POST", C, R"({"messages":[42]})", 400, "messages[0]", "invalid_type"},
      {"no role", "POST", C, R"({"messages":[{"content":"x"}]})", 400, "messages[0].role", ""},
      {"role not string", "POST", C, R"({"messages":[{"role":7,"content":"x"}]})", 400, "messages[0].role",
       "invalid_type"},
      {"unknown role", "POST", C, R"({"messages":[{"role":"wizard","content":"x"}]})", 400,
       "messages[0].role", ""},
      {"content number", "POST", C, R"({"messages":[{"role":"user","content":5}]})", 400,
       "messages[0].content", "invalid_type"},
      {"content missing", "POST", C, R"({"messages":[{"role":"user"}]})", 400, "messages[0].content", ""},
      {"image part, not a data: URI", "POST", C,
       R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})", 400,
       "messages[0].content[0].image_url.url", "unsupported_value"},
      {"audio part without audio", "POST", C,
       R"({"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x"}}]}]})", 400,
       "messages[0].content[0].input_audio.data", ""},
      {"audio part of another format", "POST", C,
       R"({"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"mp3"}}]}]})",
       400, "messages[0].content[0].input_audio.format", "unsupported_value"},
      {"text part without text", "POST", C, R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})",
       400, "messages[0].content[0].text", ""},
      {"model not string", "POST", C, chat(R"("model":5)"), 400, "model", "invalid_type"},
      {"stream not bool", "POST", C, chat(R"("stream":"yes")"), 400, "stream", "invalid_type"},
      {"max_tokens negative", "POST", C, chat(R"("max_tokens":-1)"), 400, "max_tokens", ""},
      {"max_tokens string", "POST", C, chat(R"("max_tokens":"10")"), 400, "max_tokens", "invalid_type"},
      {"max_tokens beyond context", "POST", C, chat(R"("max_tokens":100000)"), 400, "max_tokens",
       "context_length_exceeded"},
      {"max_completion_tokens zero", "POST", C, chat(R"("max_completion_tokens":0)"), 400,
       "max_completion_tokens", ""},
      {"temperature negative", "POST", C, chat(R"("temperature":-1)"), 400, "temperature", ""},
      {"temperature string", "POST", C, chat(R"("temperature":"hot")"), 400, "temperature", "invalid_type"},
      {"top_p above 1", "POST", C, chat(R"("top_p":1.5)"), 400, "top_p", ""},
      {"top_k fractional", "POST", C, chat(R"("top_k":2.5)"), 400, "top_k", "invalid_type"},
      {"min_p negative", "POST", C, chat(R"("min_p":-0.1)"), 400, "min_p", ""},
      {"repeat_penalty zero", "POST", C, chat(R"("repeat_penalty":0)"), 400, "repeat_penalty", ""},
      {"n = 2", "POST", C, chat(R"("n":2)"), 400, "n", "unsupported_value"},
      {"stop number", "POST", C, chat(R"("stop":5)"), 400, "stop", "invalid_type"},
      {"stop array of numbers", "POST", C, chat(R"("stop":[1])"), 400, "stop[0]", "invalid_type"},
      {"logit_bias array", "POST", C, chat(R"("logit_bias":[])"), 400, "logit_bias", "invalid_type"},
      {"logit_bias key not id", "POST", C, chat(R"("logit_bias":{"abc":1})"), 400, "logit_bias.abc", ""},
      {"logit_bias id out of range", "POST", C, chat(R"("logit_bias":{"999999":1})"), 400,
       "logit_bias.999999", ""},
      {"logit_bias value string", "POST", C, chat(R"("logit_bias":{"5":"x"})"), 400, "logit_bias.5",
       "invalid_type"},
      {"seed string", "POST", C, chat(R"("seed":"x")"), 400, "seed", "invalid_type"},
      {"presence_penalty string", "POST", C, chat(R"("presence_penalty":"x")"), 400, "presence_penalty",
       "invalid_type"},
      {"tools not array", "POST", C, chat(R"("tools":"x")"), 400, "tools", "invalid_type"},
      {"tool without name", "POST", C, chat(R"("tools":[{"type":"function","function":{}}])"), 400,
       "tools[0].function.name", ""},
      {"tool_choice unknown", "POST", C, chat(R"("tool_choice":"sometimes")"), 400, "tool_choice", ""},
      {"tool_choice names a missing tool", "POST", C,
       chat(
           R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}})"),
       400, "tool_choice.function.name", ""},
      {"tool_calls not array", "POST", C,
       R"({"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":{}}]})", 400,
       "messages[1].tool_calls", "invalid_type"},
      {"tool call without function", "POST", C,
       R"({"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a","type":"function"}]}]})",
       400, "messages[1].tool_calls[0].function", ""},
      {"reasoning_effort unknown", "POST", C, chat(R"("reasoning_effort":"extreme")"), 400,
       "reasoning_effort", ""},
      {"enable_thinking not bool", "POST", C, chat(R"("chat_template_kwargs":{"enable_thinking":"yes"})"),
       400, "chat_template_kwargs.enable_thinking", "invalid_type"},
      {"response_format json_schema without json_schema", "POST", C,
       chat(R"("response_format":{"type":"json_schema"})"), 400, "response_format.json_schema",
       "missing_required_parameter"},
      {"response_format bad schema", "POST", C,
       chat(R"("response_format":{"type":"json_schema","json_schema":{"schema":{"type":"strin"}}})"), 400,
       "response_format.json_schema.schema", ""},
      {"response_format yaml", "POST", C, chat(R"("response_format":{"type":"yaml"})"), 400,
       "response_format.type", "unsupported_value"},
      {"logprobs", "POST", C, chat(R"("logprobs":true)"), 400, "logprobs", "unsupported_value"},
      {"prompt longer than the context", "POST", C, json({{"messages", user(long_prompt)}}).dump(), 400,
       "messages", "context_length_exceeded"},
      {"completion without prompt", "POST", "/v1/completions", "{}", 400, "prompt",
       "missing_required_parameter"},
      {"completion prompt number", "POST", "/v1/completions", R"({"prompt":5})", 400, "prompt",
       "invalid_type"},
      {"completion token out of range", "POST", "/v1/completions", R"({"prompt":[1,99999]})", 400,
       "prompt[1]", ""},
      {"completion two prompts", "POST", "/v1/completions", R"({"prompt":["a","b"]})", 400, "prompt",
       "unsupported_value"},
      {"completion echo", "POST", "/v1/completions", R"({"prompt":"a","echo":true})", 400, "echo",
       "unsupported_value"},
      {"tokenize without content", "POST", "/tokenize", "{}", 400, "content", "missing_required_parameter"},
      {"detokenize negative id", "POST", "/detokenize", R"({"tokens":[-1]})", 400, "tokens[0]", ""},
      {"detokenize not array", "POST", "/detokenize", R"({"tokens":"1 2"})", 400, "tokens", "invalid_type"},
      {"body over --max-body", "POST", C, chat("\"user\":\"" + std::string(100000, 'a') + "\""), 413, "",
       "request_too_large"},
      {"unknown route", "GET", "/v1/nope", "", 404, "", "not_found"},
      {"GET on a POST route", "GET", C, "", 404, "", "not_found"},
  };
  ASSERT_GE(cases.size(), 30u);
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    const HttpReply r = http(srv.port(), c.method, c.path, c.body, {}, 30);
    ASSERT_TRUE(r.error.empty()) << r.error << "\n" << srv.log();
    EXPECT_EQ(r.status, c.status) << r.body;
    const json j = r.js();
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    const json& e = j["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
    EXPECT_TRUE(e["type"].is_string()) << r.body;
    EXPECT_TRUE(e.contains("param") && e.contains("code")) << r.body;
    if (c.param.empty()) {
      EXPECT_TRUE(e["param"].is_null()) << r.body;
    } else {
      EXPECT_EQ(e["param"], c.param) << r.body;
    }
    if (!c.code.empty()) {
      EXPECT_EQ(e["code"], c.code) << r.body;
    }
    if (c.status == 400) {
      EXPECT_EQ(e["type"], "invalid_request_error");
    }
  }
  // Malformed HTTP (not a request line) gets an error too, and the server lives on.
  const HttpReply garbage = raw_request(srv.port(), "\x01\x02 nonsense\r\n\r\n", 10);
  EXPECT_GE(garbage.status, 400);

  // Still healthy, and still right.
  EXPECT_EQ(http(srv.port(), "GET", "/health").status, 200);
  const Reference ref = lib.greedy(lib.chat_prompt(user(kPrompts[0])), 20, true);
  const HttpReply ok =
      post(srv.port(), C, {{"messages", user(kPrompts[0])}, {"max_tokens", 20}, {"temperature", 0}});
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.js()["choices"][0]["message"]["content"], ref.text);
  EXPECT_EQ(srv.stop(), 0) << srv.log();
}

TEST(ServerTest, ApiKey) {
  ServerProcess srv({"-m", tiny_model(), "-t", "1", "--api-key", "sekrit"});
  ASSERT_TRUE(srv.ok());
  const std::string body = json({{"messages", user("Hi")}, {"max_tokens", 2}}).dump();
  for (const auto& [headers, status] :
       std::vector<std::pair<std::vector<std::string>, int>>{{{}, 401},
                                                             {{"Authorization: Bearer wrong"}, 401},
                                                             {{"Authorization: sekrit"}, 401},
                                                             {{"Authorization: Bearer sekrit"}, 200}}) {
    const HttpReply r = http(srv.port(), "POST", "/v1/chat/completions", body, headers);
    EXPECT_EQ(r.status, status) << r.body;
    if (status == 401) {
      EXPECT_EQ(r.js()["error"]["code"], "invalid_api_key") << r.body;
      EXPECT_EQ(r.js()["error"]["type"], "authentication_error") << r.body;
    }
  }
  EXPECT_EQ(http(srv.port(), "GET", "/v1/models").status, 401);
  EXPECT_EQ(http(srv.port(), "GET", "/metrics").status, 401);
  EXPECT_EQ(http(srv.port(), "GET", "/health").status, 200);  // probes need no key
  const HttpReply models = http(srv.port(), "GET", "/v1/models", "", {"Authorization: Bearer sekrit"});
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.js()["data"][0]["id"], "tiny-gemma4-f32");
  EXPECT_EQ(srv.stop(), 0);
}

TEST(ServerTest, TokenizeDetokenize) {
  Library lib(tiny_model());
  ServerProcess srv({"-m", tiny_model(), "-t", "1"});
  ASSERT_TRUE(srv.ok());
  const HttpReply t =
      post(srv.port(), "/tokenize", {{"content", "In the beginning God created"}, {"add_special", true}});
  ASSERT_EQ(t.status, 200) << t.body;
  // The model README: <bos> In ▁the ▁beginning ▁God ▁creat ed
  EXPECT_EQ(t.js()["tokens"], json({2, 1294, 349, 2793, 478, 2447, 373}));
  const HttpReply d = post(srv.port(), "/detokenize", {{"tokens", {1294, 349, 2793}}});
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(d.js()["content"], "In the beginning");
  EXPECT_EQ(srv.stop(), 0);
}

// A client that disconnects mid-generation frees its slot at once (streaming and not).
TEST(ServerTest, ClientDisconnectFreesSlot) {
  ServerProcess srv({"-m", tiny_model(), "-t", "1", "--parallel", "1"});
  ASSERT_TRUE(srv.ok());
  auto busy_slots = [&] {
    const std::string m = http(srv.port(), "GET", "/metrics").body;
    const size_t at = m.find("\ngem4_slots_busy ");
    return at == std::string::npos ? -1 : std::atoi(m.c_str() + at + 17);
  };
  auto wait_idle = [&](double timeout_s) {
    const auto t0 = Clock::now();
    while (seconds_since(t0) < timeout_s) {
      if (busy_slots() == 0) return seconds_since(t0);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1.0;
  };
  const json body = {{"messages", user("Blessed are the")},
                     {"max_tokens", 480},
                     {"temperature", 0},
                     {"logit_bias", {{"1", -100}, {"6", -100}, {"14", -100}}},
                     {"stream", true}};
  int seen = 0;
  const HttpReply r = http(srv.port(), "POST", "/v1/chat/completions", body.dump(), {}, 30,
                           [&](const std::string&) { return ++seen < 4; });  // hang up after 3 events
  EXPECT_EQ(r.status, 200);
  const double freed = wait_idle(2.0);
  EXPECT_GE(freed, 0) << "slot still busy 2 s after the client left";
  std::printf("[          ] streaming disconnect: slot free after %.3f s\n", freed);

  // Non-streaming: the client gives up while the server generates.
  std::thread client([&] {
    http(srv.port(), "POST", "/v1/chat/completions",
         json({{"messages", user("Blessed are the")},
               {"max_tokens", 480},
               {"logit_bias", {{"1", -100}, {"6", -100}, {"14", -100}}}})
             .dump(),
         {}, 0.3);
  });
  client.join();  // returned after its 0.3 s timeout, closing the socket
  const double freed2 = wait_idle(2.0);
  EXPECT_GE(freed2, 0) << "slot still busy 2 s after the non-streaming client left";
  std::printf("[          ] non-streaming disconnect: slot free after %.3f s\n", freed2);
  // The server still serves.
  EXPECT_EQ(post(srv.port(), "/v1/chat/completions", {{"messages", user("Hi")}, {"max_tokens", 3}}).status,
            200);
  EXPECT_EQ(srv.stop(), 0);
}

// SIGTERM drains: the running stream completes, new requests are refused, the process exits 0.
TEST(ServerTest, SigtermDrainsInFlightRequests) {
  ServerProcess srv({"-m", tiny_model(), "-t", "1"});
  ASSERT_TRUE(srv.ok());
  const json body = {{"messages", user("Blessed are the")},
                     {"max_tokens", 200},
                     {"temperature", 0},
                     {"logit_bias", {{"1", -100}, {"6", -100}, {"14", -100}}}};
  StreamResult s;
  std::atomic<bool> got_first{false};
  std::thread client([&] {
    json b = body;
    b["stream"] = true;
    const HttpReply r =
        http(srv.port(), "POST", "/v1/chat/completions", b.dump(), {}, 60, [&](const std::string&) {
          got_first = true;
          return true;
        });
    s.status = r.status;
    for (const auto& e : r.events) {
      if (e == "[DONE]") s.done = true;
      const json c = json::parse(e, nullptr, false);
      if (c.is_object() && c.contains("choices") && !c["choices"].empty() &&
          !c["choices"][0]["finish_reason"].is_null())
        s.finish_reason = c["choices"][0]["finish_reason"];
    }
  });
  const auto t0 = Clock::now();
  while (!got_first && seconds_since(t0) < 30) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(got_first);
  kill(srv.pid(), SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const HttpReply refused =
      post(srv.port(), "/v1/chat/completions", {{"messages", user("Hi")}, {"max_tokens", 2}}, 10);
  if (refused.error.empty()) {  // (the listener may already be closed)
    EXPECT_EQ(refused.status, 503) << refused.body;
  }
  client.join();
  EXPECT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.finish_reason, "length");
  EXPECT_EQ(srv.wait_exit(30), 0) << srv.log();
}

TEST(ServerTest, PromptProgressEvents) {
  ServerProcess srv({"-m", tiny_model(), "-t", "1", "--ubatch", "16"});
  ASSERT_TRUE(srv.ok());
  const json body = {
      {"messages", user("And the LORD said unto Moses, Stretch out thine hand over the sea, that the "
                        "waters may come again upon the Egyptians.")},
      {"max_tokens", 3},
      {"stream", true},
      {"return_progress", true}};
  const HttpReply r = http(srv.port(), "POST", "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200);
  std::vector<json> progress;
  for (const auto& e : r.events) {
    const json c = json::parse(e, nullptr, false);
    if (c.is_object() && c.contains("prompt_progress")) progress.push_back(c["prompt_progress"]);
  }
  ASSERT_GE(progress.size(), 2u) << r.body;
  for (size_t i = 1; i < progress.size(); ++i)
    EXPECT_GT(progress[i]["processed"], progress[i - 1]["processed"]);
  EXPECT_EQ(progress.back()["processed"], progress.back()["total"]);
  EXPECT_EQ(srv.stop(), 0);
}

// A long prompt is processed in chunks between the decode steps of the other slots: while it is
// being processed, a generating slot keeps producing one token per engine step.
TEST(ServerTest, LongPromptDoesNotStallDecoding) {
  Library lib(tiny_model());
  ServerProcess srv({"-m", tiny_model(), "-t", "1", "--parallel", "2", "--ubatch", "32"});
  ASSERT_TRUE(srv.ok());
  std::mutex mu;
  std::vector<Clock::time_point> a_times;
  std::atomic<bool> stop_a{false};
  std::thread a([&] {
    const json body = {{"messages", user("Blessed are the")},
                       {"max_tokens", 400},
                       {"stream", true},
                       {"logit_bias", {{"1", -100}, {"6", -100}, {"14", -100}}}};
    http(srv.port(), "POST", "/v1/chat/completions", body.dump(), {}, 60, [&](const std::string&) {
      std::lock_guard<std::mutex> lock(mu);
      a_times.push_back(Clock::now());
      return !stop_a.load();
    });
  });
  const auto t0 = Clock::now();
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (a_times.size() >= 3) break;
    }
    ASSERT_LT(seconds_since(t0), 30);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // 480 prompt tokens: with one decode row per step, 31 per chunk, so 16 engine steps.
  const std::vector<int32_t> text =
      lib.tok().encode(read_file(test::testdata("tiny-gemma4/valid.txt")), false, false);
  std::vector<int32_t> long_prompt(text.begin(), text.begin() + 480);
  const auto b0 = Clock::now();
  Clock::time_point b_first{};
  const HttpReply b = http(srv.port(), "POST", "/v1/completions",
                           json({{"prompt", long_prompt}, {"max_tokens", 1}, {"stream", true}}).dump(), {},
                           60, [&](const std::string&) {
                             if (b_first == Clock::time_point{}) b_first = Clock::now();
                             return true;
                           });
  stop_a = true;
  a.join();
  ASSERT_EQ(b.status, 200);
  int during = 0;
  for (const auto& t : a_times) during += t > b0 && t < b_first;
  std::printf("[          ] tokens streamed to the other client while a 480-token prompt was processed: %d\n",
              during);
  EXPECT_GE(during, 8);  // one big prefill step would have allowed about 1
  EXPECT_EQ(srv.stop(), 0);
}

// 16 concurrent streaming clients x 20 requests; every answer must equal the greedy reference.
struct LoadResult {
  double tokens_per_s = 0;
  long rss_first_kib = 0, rss_end_kib = 0;    // VmRSS after the first request / after the run
  long anon_first_kib = 0, anon_end_kib = 0;  // RssAnon (heap, stacks, KV cache)
  int errors = 0, wrong = 0, completed = 0;
};

LoadResult run_load(const std::vector<Reference>& refs, int parallel, int clients, int requests_each,
                    int max_tokens) {
  ServerProcess srv({"-m", tiny_model(), "-t", "1", "--parallel", std::to_string(parallel)});
  LoadResult res;
  if (!srv.ok()) return res;
  post(srv.port(), "/v1/chat/completions",
       {{"messages", user(kPrompts[0])}, {"max_tokens", max_tokens}, {"temperature", 0}});
  res.rss_first_kib = srv.status_kib("VmRSS");
  res.anon_first_kib = srv.status_kib("RssAnon");
  std::atomic<int> errors{0}, wrong{0}, completed{0}, tokens{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int k = 0; k < requests_each; ++k) {
        const int p = (c + k) % int(kPrompts.size());
        const StreamResult s = stream_chat(
            srv.port(), "/v1/chat/completions",
            {{"messages", user(kPrompts[p])}, {"max_tokens", max_tokens}, {"temperature", 0}}, 120);
        if (s.status != 200 || !s.error.empty() || !s.done) {
          if (errors++ < 3) ADD_FAILURE() << "request failed: status " << s.status << " " << s.error;
          continue;
        }
        if (s.content != refs[p].text) {
          if (wrong++ < 3)
            ADD_FAILURE() << "prompt " << p << ": got '" << s.content << "' want '" << refs[p].text << "'";
        }
        tokens += s.usage.value("completion_tokens", 0);
        completed++;
      }
    });
  }
  for (auto& t : threads) t.join();
  res.tokens_per_s = tokens / seconds_since(t0);
  res.rss_end_kib = srv.status_kib("VmRSS");
  res.anon_end_kib = srv.status_kib("RssAnon");
  res.errors = errors;
  res.wrong = wrong;
  res.completed = completed;
  EXPECT_EQ(srv.stop(), 0);
  return res;
}

#ifdef __SANITIZE_ADDRESS__
constexpr bool kSanitized = true;  // slower, and ASan's allocator keeps freed memory: no perf/RSS checks
#else
constexpr bool kSanitized = false;
#endif

TEST(ServerTest, LoadSixteenStreamingClients) {
  Library lib(tiny_model());
  const int clients = 16, each = kSanitized ? 4 : 20, max_tokens = 8;
  std::vector<Reference> refs;
  for (const auto& p : kPrompts) refs.push_back(lib.greedy(lib.chat_prompt(user(p)), max_tokens, true));

  // Throughput on a shared machine is noisy: the two settings run interleaved, up to three rounds,
  // and the best of each is compared.
  LoadResult first4;
  double best4 = 0, best1 = 0;
  for (int round = 0; round < 3; ++round) {
    const LoadResult p4 = run_load(refs, 4, clients, each, max_tokens);
    const LoadResult p1 = run_load(refs, 1, clients, each, max_tokens);
    for (const LoadResult* r : {&p4, &p1}) {
      EXPECT_EQ(r->completed, clients * each);
      EXPECT_EQ(r->errors, 0);
      EXPECT_EQ(r->wrong, 0);
    }
    if (round == 0) first4 = p4;
    best4 = std::max(best4, p4.tokens_per_s);
    best1 = std::max(best1, p1.tokens_per_s);
    std::printf("[          ] round %d: --parallel 4: %.1f tok/s, --parallel 1: %.1f tok/s (ratio %.2f)\n",
                round, p4.tokens_per_s, p1.tokens_per_s,
                p1.tokens_per_s > 0 ? p4.tokens_per_s / p1.tokens_per_s : 0.0);
    if (best4 > best1 || kSanitized || HasFailure()) break;
  }
  const LoadResult& r = first4;
  std::printf(
      "[          ] RSS after the first request %ld KiB, after %d requests %ld KiB (%+.1f %%); "
      "RssAnon %ld -> %ld KiB\n",
      r.rss_first_kib, clients * each, r.rss_end_kib,
      100.0 * (r.rss_end_kib - r.rss_first_kib) / std::max(1L, r.rss_first_kib), r.anon_first_kib,
      r.anon_end_kib);
  if (kSanitized) return;
  EXPECT_GT(best4, best1);
  EXPECT_GT(r.rss_first_kib, 0);
  EXPECT_LE(std::abs(r.rss_end_kib - r.rss_first_kib), r.rss_first_kib / 10);
}

// A second request sharing a 1,000-token prefix with the first reuses its K/V.
TEST(ServerTest, PrefixReuseCutsTimeToFirstToken) {
  Library lib(tiny_model());
  const std::string model = "/tmp/gem4_server_test_ctx4096_" + std::to_string(getpid()) + ".gguf";
  ASSERT_TRUE(make_long_context_model(model));
  // Token prompts cut from held-out KJV text.
  const std::vector<int32_t> text =
      lib.tok().encode(read_file(test::testdata("tiny-gemma4/valid.txt")), false, false);
  ASSERT_GT(text.size(), 12000u);
  auto prompt = [&](size_t prefix_at, size_t suffix_at) {
    std::vector<int32_t> p = {lib.tok().bos()};
    p.insert(p.end(), text.begin() + prefix_at, text.begin() + prefix_at + 1000);
    p.insert(p.end(), text.begin() + suffix_at, text.begin() + suffix_at + 12);
    return p;
  };
  ServerProcess srv({"-m", model, "-t", "1", "--parallel", "2", "--ctx", "2048"});
  ASSERT_TRUE(srv.ok());
  // Force a plain first token (" the") so the first streamed chunk always carries text.
  const int32_t the = lib.tok().encode(" the", false, false).at(0);
  auto request = [&](const std::vector<int32_t>& p) {
    return stream_chat(
        srv.port(), "/v1/completions",
        {{"prompt", p}, {"max_tokens", 2}, {"temperature", 0}, {"logit_bias", {{std::to_string(the), 100}}}});
  };
  double cold = 1e9, warm = 1e9;
  int min_cached = 1 << 30;
  for (int trial = 0; trial < 3; ++trial) {
    const size_t at = 1000 + trial * 3000;
    const StreamResult first = request(prompt(at, 100 + trial * 50));
    ASSERT_EQ(first.status, 200) << first.error;
    ASSERT_GT(first.first_token_s, 0);
    cold = std::min(cold, first.first_token_s);
    const StreamResult second = request(prompt(at, 200 + trial * 50));  // same 1,001-token prefix, new suffix
    ASSERT_EQ(second.status, 200) << second.error;
    ASSERT_GT(second.first_token_s, 0);
    warm = std::min(warm, second.first_token_s);
    min_cached = std::min(min_cached, second.usage["prompt_tokens_details"]["cached_tokens"].get<int>());
    EXPECT_EQ(second.usage["prompt_tokens"], 1013);
  }
  std::printf(
      "[          ] time to first token: %.1f ms cold, %.1f ms with a cached 1,000-token prefix (ratio "
      "%.1fx)\n",
      cold * 1e3, warm * 1e3, cold / warm);
  EXPECT_GE(min_cached, 990);
  EXPECT_LT(warm, cold);

  // The prefix may also come from a slot that is still generating: it is copied into the free slot,
  // and the answer must be what a fresh computation of the whole prompt gives.
  Library generated(model);
  const std::vector<int32_t> pa = prompt(10000, 300), pb = prompt(10000, 400);
  std::atomic<bool> a_running{false}, b_done{false};
  std::thread a([&] {
    const json body = {{"prompt", pa},
                       {"max_tokens", 600},
                       {"stream", true},
                       {"logit_bias", {{"1", -100}, {"6", -100}, {"14", -100}}}};
    http(srv.port(), "POST", "/v1/completions", body.dump(), {}, 60, [&](const std::string&) {
      a_running = true;
      return !b_done.load();  // hang up once B is answered
    });
  });
  const auto t0 = Clock::now();
  while (!a_running && seconds_since(t0) < 30) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_TRUE(a_running);
  const HttpReply b =
      post(srv.port(), "/v1/completions", {{"prompt", pb}, {"max_tokens", 8}, {"temperature", 0}});
  b_done = true;
  a.join();
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_GE(b.js()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 990) << b.body;
  EXPECT_EQ(b.js()["choices"][0]["text"], generated.greedy(pb, 8, false).text);
  EXPECT_EQ(srv.stop(), 0);
  std::remove(model.c_str());
}

// ---- speculation in the server ----------------------------------------------------------------

std::vector<std::string> spec_prompts() {
  std::ifstream f(test::testdata("tiny-gemma4/spec-prompts.txt"));
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);)
    if (!l.empty()) lines.push_back(l);
  return lines;
}

// Per prompt: the text and the accepted drafts of each request, the requests sent by `clients`
// threads at once (so that with --parallel 4 the slots' verify rows share engine steps).
struct SpecReplies {
  std::vector<std::string> text;
  std::vector<int> accepted, completion;
  bool ok = true;
  std::string error;
};

SpecReplies complete_all(int port, const std::vector<std::vector<int32_t>>& prompts, int max_tokens,
                         int clients) {
  SpecReplies r;
  r.text.resize(prompts.size());
  r.accepted.resize(prompts.size());
  r.completion.resize(prompts.size());
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&] {
      for (size_t i; (i = next++) < prompts.size();) {
        const HttpReply h =
            post(port, "/v1/completions",
                 {{"prompt", prompts[i]}, {"max_tokens", max_tokens}, {"temperature", 0}}, 120);
        const json j = h.js();
        std::lock_guard<std::mutex> lock(mu);
        if (h.status != 200 || !j.contains("choices")) {
          r.ok = false;
          r.error = h.body + h.error;
          continue;
        }
        r.text[i] = j["choices"][0]["text"];
        r.accepted[i] = j["usage"]["completion_tokens_details"]["accepted_prediction_tokens"];
        r.completion[i] = j["usage"]["completion_tokens"];
      }
    });
  for (auto& t : threads) t.join();
  return r;
}

double metric_value(int port, const std::string& name) {
  const HttpReply m = http(port, "GET", "/metrics");
  std::istringstream in(m.body);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  return -1;
}

// Greedy text through the server is the same with and without speculation (MTP with the trained
// tiny model's assistant, n-gram, both), with one slot and with four slots generating at once, and
// the accepted drafts it reports (usage and /metrics) are those of the same drafter in the library
// (gem4 run's path).
TEST(ServerTest, SpeculationGivesPlainGreedyText) {
  Library lib(tiny_model());
  const std::string assistant = test::testdata("tiny-gemma4/tiny-gemma4-assistant-f32.gguf");
  auto assistant_model = Model::load(assistant);
  const auto lines = spec_prompts();
  ASSERT_EQ(lines.size(), 24u);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& l : lines) prompts.push_back(lib.tok().encode(l, true, false));
  const int n = test::quick_mode() ? 24 : 64;

  std::vector<std::string> plain(prompts.size());
  {
    ServerProcess srv({"-m", tiny_model(), "-t", "1"});
    ASSERT_TRUE(srv.ok());
    const SpecReplies r = complete_all(srv.port(), prompts, n, 1);
    ASSERT_TRUE(r.ok) << r.error;
    plain = r.text;
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(r.accepted[i], 0);
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(plain[i], lib.greedy(prompts[i], n, false).text) << lines[i];

  for (const char* spec : {"mtp", "ngram", "mtp+ngram"}) {
    // The library's count of accepted drafts for each prompt: the same drafter, the same step.
    ThreadPool pool(1);
    SessionOptions so;
    so.n_ctx = 4096;
    so.kv_type = KvType::F16;
    Session session(lib.model(), &pool, so);
    auto drafter = generate::make_drafter(spec, lib.model(), {assistant_model.get()}, &pool, so);
    generate::SpecOptions opt;
    opt.draft_max = 3;
    session.speculate(drafter.get(), opt);
    for (int parallel : {1, 4}) {
      ServerProcess srv({"-m", tiny_model(), "-t", "1", "--spec", spec, "-md", assistant, "--draft-max", "3",
                         "--parallel", std::to_string(parallel)});
      ASSERT_TRUE(srv.ok());
      const SpecReplies r = complete_all(srv.port(), prompts, n, parallel);
      ASSERT_TRUE(r.ok) << r.error;
      int identical = 0, same_acceptance = 0;
      long long accepted = 0;
      for (size_t i = 0; i < prompts.size(); ++i) {
        identical += r.text[i] == plain[i];
        EXPECT_EQ(r.text[i], plain[i]) << spec << ", --parallel " << parallel << ": " << lines[i];
        accepted += r.accepted[i];
        const generate::TokenRun cli = generate::generate_tokens(session, prompts[i], r.completion[i]);
        same_acceptance += cli.stats.accepted == r.accepted[i];
        if (parallel == 1) {
          EXPECT_EQ(r.accepted[i], cli.stats.accepted) << spec << ": " << lines[i];
        }
      }
      EXPECT_GT(accepted, 0) << spec;
      EXPECT_EQ(metric_value(srv.port(), "gem4_draft_tokens_accepted_total"), double(accepted)) << spec;
      std::printf(
          "[          ] --spec %-9s --parallel %d: identical %d/24, accepted %lld drafts, as the library's "
          "in %d/24\n",
          spec, parallel, identical, accepted, same_acceptance);
      EXPECT_EQ(srv.stop(), 0);
    }
  }
}

// A long system prompt shared by many requests stays cached: after the sliding window has moved past
// it (a long reply), after an unrelated prompt took the slot's cells, and after a restart with the
// same --prompt-cache. A damaged cache file is never used and the request is still answered right.
TEST(ServerTest, SharedSystemPromptSurvivesWindowAndRestart) {
  Library tiny_lib(tiny_model());
  const std::string model = "/tmp/gem4_server_test_sys_" + std::to_string(getpid()) + ".gguf";
  ASSERT_TRUE(make_long_context_model(model));
  Library lib(model);
  const std::string dir = "/tmp/gem4_server_test_pc_" + std::to_string(getpid());
  std::system(("rm -rf " + dir).c_str());
  const std::vector<int32_t> text =
      lib.tok().encode(read_file(test::testdata("tiny-gemma4/valid.txt")), false, false);
  ASSERT_GT(text.size(), 8000u);
  const std::vector<int32_t> system(text.begin(), text.begin() + 2000);
  auto prompt = [&](int turn) {
    std::vector<int32_t> p = {lib.tok().bos()};
    p.insert(p.end(), system.begin(), system.end());
    p.insert(p.end(), text.begin() + 3000 + turn * 40, text.begin() + 3000 + turn * 40 + 30);
    return p;
  };
  // No end-of-generation, so that a long reply really moves the window.
  const json no_eog = {{"1", -100}, {"6", -100}, {"14", -100}, {"106", -100}};
  auto ask = [&](int port, const std::vector<int32_t>& p, int max_tokens) {
    return post(port, "/v1/completions",
                {{"prompt", p}, {"max_tokens", max_tokens}, {"temperature", 0}, {"logit_bias", no_eog}}, 120);
  };
  auto cached = [](const HttpReply& r) {
    return r.js()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  };
  const int need = int(0.95 * 2001);
  {
    ServerProcess srv({"-m", model, "-t", "1", "--parallel", "1", "--ctx", "4096", "--prompt-cache", dir});
    ASSERT_TRUE(srv.ok());
    const HttpReply first =
        ask(srv.port(), prompt(0), 1200);  // the rings (64 + 1024 cells) move past the prefix
    ASSERT_EQ(first.status, 200) << first.body;
    EXPECT_EQ(cached(first), 0);
    EXPECT_EQ(first.js()["usage"]["completion_tokens"], 1200) << first.body;
    for (int turn = 1; turn <= 2; ++turn) {
      const HttpReply r = ask(srv.port(), prompt(turn), 8);
      ASSERT_EQ(r.status, 200) << r.body;
      EXPECT_GE(cached(r), need) << "turn " << turn;
      std::printf("[          ] turn %d after a 1,200-token reply: %d of 2,031 prompt tokens cached\n", turn,
                  cached(r));
      EXPECT_EQ(r.js()["choices"][0]["text"], lib.greedy(prompt(turn), 8, false, nullptr, &no_eog).text);
    }
    // An unrelated prompt takes the slot; the shared prefix then comes from the prefix store alone.
    std::vector<int32_t> other = {lib.tok().bos()};
    other.insert(other.end(), text.begin() + 5000, text.begin() + 6500);
    ASSERT_EQ(ask(srv.port(), other, 4).status, 200);
    const HttpReply r = ask(srv.port(), prompt(3), 8);
    EXPECT_GE(cached(r), need);
    EXPECT_GT(metric_value(srv.port(), "gem4_prefix_store_bytes"), 0);
    EXPECT_GE(metric_value(srv.port(), "gem4_prompt_cache_entries"), 1);
    EXPECT_EQ(srv.stop(), 0);
  }
  {
    ServerProcess srv({"-m", model, "-t", "1", "--parallel", "1", "--ctx", "4096", "--prompt-cache", dir});
    ASSERT_TRUE(srv.ok());
    const HttpReply r = ask(srv.port(), prompt(4), 8);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_GE(cached(r), need) << "after a restart";
    EXPECT_EQ(r.js()["choices"][0]["text"], lib.greedy(prompt(4), 8, false, nullptr, &no_eog).text);
    EXPECT_EQ(srv.stop(), 0);
  }
  // Flip one byte in the middle of every entry: none is used, the answer is still the fresh one.
  int damaged = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".gem4pc") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const std::streamoff size = f.tellg();
    f.seekg(size / 2);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(size / 2);
    f.write(&c, 1);
    damaged++;
  }
  EXPECT_GE(damaged, 1);
  {
    ServerProcess srv({"-m", model, "-t", "1", "--parallel", "1", "--ctx", "4096", "--prompt-cache", dir});
    ASSERT_TRUE(srv.ok());
    const HttpReply r = ask(srv.port(), prompt(5), 8);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_LT(cached(r), 64) << "a damaged entry must not be used";
    EXPECT_EQ(r.js()["choices"][0]["text"], lib.greedy(prompt(5), 8, false, nullptr, &no_eog).text);
    EXPECT_EQ(srv.stop(), 0);
  }
  // A cache made from another model file is not used either.
  {
    ServerProcess srv({"-m", tiny_model(), "-t", "1", "--parallel", "1", "--prompt-cache", dir});
    ASSERT_TRUE(srv.ok());
    const std::vector<int32_t> full = prompt(6);
    const std::vector<int32_t> p(full.begin(), full.begin() + 300);
    const HttpReply r =
        post(srv.port(), "/v1/completions", {{"prompt", p}, {"max_tokens", 4}, {"temperature", 0}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(cached(r), 0);
    EXPECT_EQ(r.js()["choices"][0]["text"], tiny_lib.greedy(p, 4, false).text);
    EXPECT_EQ(srv.stop(), 0);
  }
  std::system(("rm -rf " + dir).c_str());
  std::remove(model.c_str());
}

// The official OpenAI Node.js client against the server. npm installs the `openai` package once
// into the build tree (<build>/node-openai); node and npm must be on PATH.
TEST(ServerTest, OpenAINodeClient) {
  std::string npm_error;
  const std::string dir = openai_node_dir(npm_error);
  ASSERT_FALSE(dir.empty()) << npm_error;
  Library lib(tiny_model());
  ServerProcess srv({"-m", tiny_model(), "-t", "1", "--parallel", "2", "--api-key", "node-key"});
  ASSERT_TRUE(srv.ok());
  const json messages = user(kPrompts[1]);
  const Reference ref = lib.greedy(lib.chat_prompt(messages), 24, true);
  const int32_t brace = lib.tok().encode("}", false, false).at(0);
  const json spec = {
      {"messages", messages},
      {"max_tokens", 24},
      {"tool",
       {{"messages", user("What is the weather in Paris?")},
        {"tools",
         json::parse(R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
            "properties":{"city":{"type":"string"}}}}}])")},
        {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
        {"logit_bias", {{std::to_string(brace), 400}, {"11", 200}, {"14", 100}}},
        {"presence_penalty", 400},
        {"max_tokens", 8},
        {"temperature", 0}}}};
  const std::string out_path = "/tmp/gem4_node_out_" + std::to_string(getpid()) + ".json";
  const std::string script = std::string(GEM4_SOURCE_DIR) + "/tests/server_openai_node/client_test.cjs";
  setenv("OPENAI_NODE_DIR", dir.c_str(), 1);
  setenv("GEM4_BASE_URL", ("http://127.0.0.1:" + std::to_string(srv.port()) + "/v1").c_str(), 1);
  setenv("GEM4_API_KEY", "node-key", 1);
  setenv("GEM4_REQUESTS", spec.dump().c_str(), 1);
  const int rc = std::system(("timeout 120 node " + script + " > " + out_path + " 2>&1").c_str());
  const std::string out = read_file(out_path);
  std::remove(out_path.c_str());
  ASSERT_EQ(rc, 0) << out;
  const json j = json::parse(out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["models"], json({"tiny-gemma4-f32"}));
  EXPECT_EQ(j["nonstream"]["content"], ref.text);
  EXPECT_EQ(j["nonstream"]["usage"]["completion_tokens"], ref.generated);
  EXPECT_EQ(j["stream"]["content"], ref.text);
  EXPECT_EQ(j["stream"]["finish_reason"], ref.hit_eog ? "stop" : "length");
  EXPECT_EQ(j["stream"]["usage"]["completion_tokens"], ref.generated);
  EXPECT_EQ(j["tool"]["finish_reason"], "tool_calls") << out;
  ASSERT_EQ(j["tool"]["tool_calls"].size(), 1u) << out;
  EXPECT_EQ(j["tool"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(j["tool"]["tool_calls"][0]["function"]["arguments"], "{}");
  EXPECT_EQ(j["tool_stream"]["finish_reason"], "tool_calls") << out;
  ASSERT_EQ(j["tool_stream"]["tool_calls"].size(), 1u) << out;
  EXPECT_EQ(j["tool_stream"]["tool_calls"][0]["name"], "get_weather");
  EXPECT_EQ(j["tool_stream"]["tool_calls"][0]["arguments"], "{}");
  EXPECT_EQ(j["bad_request"]["status"], 400) << out;
  EXPECT_EQ(srv.stop(), 0);
}

}  // namespace
}  // namespace gem4
