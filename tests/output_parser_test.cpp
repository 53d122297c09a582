// Output parser: hand-written model outputs, each fed whole, one byte at a time, and in other cuts;
// every way of feeding must give the same reasoning, content and tool calls, and those must be what
// the Gemma 4 markup (spec section 4.5) says they are.
#include "text/output_parser.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "text/chat_format.h"

namespace gem4::text {
namespace {

using json = nlohmann::json;

struct Result {
  std::string reasoning, content;
  std::vector<json> tool_calls;
};

// Feeds `text` cut at `cuts` (sorted offsets) and collects the deltas; also checks that the
// parser's running totals equal the deltas. (Half a marker leaking into a delta would show up as a
// difference between feeding whole and feeding in pieces, which every test compares.)
Result feed(const std::string& text, const std::vector<size_t>& cuts, OutputParserOptions options = {}) {
  OutputParser parser(options);
  Result r;
  auto take = [&](const OutputDelta& d) {
    r.reasoning += d.reasoning;
    r.content += d.content;
    r.tool_calls.insert(r.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  };
  size_t prev = 0;
  for (size_t c : cuts) {
    take(parser.push(std::string_view(text).substr(prev, c - prev)));
    prev = c;
  }
  take(parser.push(std::string_view(text).substr(prev)));
  take(parser.finish());
  EXPECT_TRUE(parser.done());
  EXPECT_EQ(parser.reasoning(), r.reasoning);
  EXPECT_EQ(parser.content(), r.content);
  EXPECT_EQ(parser.tool_calls(), r.tool_calls);
  EXPECT_TRUE(parser.push("more text").empty());  // ignored after finish()
  return r;
}

// Every feeding pattern we test: whole, byte by byte, fixed chunk sizes, random cuts.
std::vector<std::vector<size_t>> cut_patterns(size_t n) {
  std::vector<std::vector<size_t>> patterns = {{}};
  for (size_t step : {1, 2, 3, 5, 7, 11}) {
    std::vector<size_t> cuts;
    for (size_t c = step; c < n; c += step) cuts.push_back(c);
    patterns.push_back(cuts);
  }
  std::mt19937 rng(1234);
  for (int t = 0; t < 8; ++t) {
    std::vector<size_t> cuts;
    for (size_t c = 0; c < n; ++c)
      if (rng() % 4 == 0) cuts.push_back(c);
    patterns.push_back(cuts);
  }
  return patterns;
}

// A tool call as the parser should produce it; `args` is compared as JSON (key order aside).
struct Call {
  std::string name;
  json args;
};

void expect_output(const std::string& text, const std::string& reasoning, const std::string& content,
                   const std::vector<Call>& calls) {
  SCOPED_TRACE("output: " + json(text).dump());
  for (const auto& cuts : cut_patterns(text.size())) {
    const Result r = feed(text, cuts);
    SCOPED_TRACE("pieces: " + std::to_string(cuts.size() + 1));
    EXPECT_EQ(r.reasoning, reasoning);
    EXPECT_EQ(r.content, content);
    ASSERT_EQ(r.tool_calls.size(), calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      const json& tc = r.tool_calls[i];
      EXPECT_EQ(tc.at("id"), "call_" + std::to_string(i));
      EXPECT_EQ(tc.at("type"), "function");
      EXPECT_EQ(tc.at("function").at("name"), calls[i].name);
      ASSERT_TRUE(tc.at("function").at("arguments").is_string());
      EXPECT_EQ(json::parse(tc.at("function").at("arguments").get<std::string>()), calls[i].args);
    }
  }
}

TEST(OutputParser, PlainContent) {
  expect_output("Hello world. 1 < 2 and a <b> tag.", "", "Hello world. 1 < 2 and a <b> tag.", {});
  expect_output("", "", "", {});
}

TEST(OutputParser, ReasoningThenContent) {
  expect_output("<|channel>thought\nLet me think: 2+2.\nIt is 4.<channel|>The answer is 4.",
                "Let me think: 2+2.\nIt is 4.", "The answer is 4.", {});
}

TEST(OutputParser, EmptyThoughtChannel) {
  expect_output("<|channel>thought\n<channel|>Paris.", "", "Paris.", {});
  expect_output("<|channel>thought<channel|>Paris.", "", "Paris.", {});
  expect_output("<|channel><channel|>Paris.", "", "Paris.", {});
}

TEST(OutputParser, ThinkingWithoutClosingMarker) {
  expect_output("<|channel>thought\nStill thinking about <chan", "Still thinking about <chan", "", {});
  expect_output("<|channel>thought\nStill thinking<turn|>junk", "Still thinking", "", {});
  expect_output("<|channel>thou", "", "", {});  // header cut off
}

TEST(OutputParser, EndMarkersStopTheOutput) {
  expect_output("Done.<turn|>\n<|turn>user\nmore", "", "Done.", {});
  expect_output("Done.<eos>more", "", "Done.", {});
  expect_output("Done<tur", "", "Done<tur", {});  // not a marker after all: kept
}

TEST(OutputParser, MarkerLookalikesStayContent) {
  expect_output("a <|chan b <channel c <|tool_cal d <tool_call| e <turn| f <|tool_response g <eo", "",
                "a <|chan b <channel c <|tool_cal d <tool_call| e <turn| f <|tool_response g <eo", {});
  // A stray closing marker outside a channel or call is just text.
  expect_output("x<channel|>y<tool_call|>z", "", "x<channel|>y<tool_call|>z", {});
}

TEST(OutputParser, SingleToolCall) {
  expect_output(
      "<|tool_call>call:get_weather{location:<|\"|>Paris, France<|\"|>,unit:<|\"|>celsius<|\"|>}"
      "<tool_call|><|tool_response>",
      "", "", {{"get_weather", {{"location", "Paris, France"}, {"unit", "celsius"}}}});
}

TEST(OutputParser, ReasoningContentAndSeveralCalls) {
  expect_output(
      "<|channel>thought\nNeed both cities.<channel|>Checking both.<|tool_call>call:get_weather{city:"
      "<|\"|>Oslo<|\"|>}<tool_call|><|tool_call>call:get_time{}<tool_call|>"
      "<|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>,days:3}<tool_call|><|tool_response>",
      "Need both cities.", "Checking both.",
      {{"get_weather", {{"city", "Oslo"}}},
       {"get_time", json::object()},
       {"get_weather", {{"city", "Rome"}, {"days", 3}}}});
}

TEST(OutputParser, NestedValuesAndQuotedPunctuation) {
  expect_output(
      "Sure.<|tool_call>call:plan{steps:[{title:<|\"|>a, b} [c]: d<|\"|>,done:false},{n:-3.5e2,m:0}],"
      "meta:{z:null,ok:true,deep:{list:[[1,2],[]]}},empty:[],"
      "code:<|\"|>if (x) { return {\"k\": [1,2]}; }\n<|\"|>}<tool_call|>",
      "", "Sure.",
      {{"plan", json::parse(R"({"steps":[{"title":"a, b} [c]: d","done":false},{"n":-350.0,"m":0}],
                        "meta":{"z":null,"ok":true,"deep":{"list":[[1,2],[]]}},"empty":[],
                        "code":"if (x) { return {\"k\": [1,2]}; }\n"})")}});
}

TEST(OutputParser, LenientSpellings) {
  // Whitespace, a trailing comma, quoted keys, JSON strings, Python literals, unquoted text.
  expect_output(
      "<|tool_call>call:f { <|\"|>a<|\"|> : 1 , \"b\":\"x,y\" , c : True, d:None, e: plain words ,}"
      "<tool_call|>",
      "", "", {{"f", {{"a", 1}, {"b", "x,y"}, {"c", true}, {"d", nullptr}, {"e", "plain words"}}}});
}

TEST(OutputParser, MalformedToolCallsAreKeptAsContent) {
  const std::vector<std::string> bad = {
      "<|tool_call>call:f{a:<|\"|>unterminated}<tool_call|>",
      "<|tool_call>nocall{}<tool_call|>",
      "<|tool_call>call:f{a:1}junk<tool_call|>",
      "<|tool_call>call:f{a 1}<tool_call|>",
      "<|tool_call>call:{a:1}<tool_call|>",
      "<|tool_call>call:two words{a:1}<tool_call|>",
      "<|tool_call>call:f{a:1,,b:2}<tool_call|>",
      "<|tool_call>call:f{a:[1,2}<tool_call|>",
      "<|tool_call>call:f{a:}<tool_call|>",
      "<|tool_call>call:f{:1}<tool_call|>",
      "<|tool_call>call:f{a:1 2 {x}}<tool_call|>",
      "<|tool_call>call:f<tool_call|>",
      "<|tool_call><tool_call|>",
  };
  for (const std::string& b : bad) expect_output("pre " + b + " post", "", "pre " + b + " post", {});

  // Not closed before the end of the output, the end of the turn, or the next call.
  expect_output("x<|tool_call>call:f{a:1}", "", "x<|tool_call>call:f{a:1}", {});
  expect_output("x<|tool_call>call:f{a:1}<turn|>rest", "", "x<|tool_call>call:f{a:1}", {});
  expect_output("<|tool_call>call:f{a:<|tool_call>call:g{b:2}<tool_call|>", "",
                "<|tool_call>call:f{a:", {{"g", {{"b", 2}}}});
}

TEST(OutputParser, HostileInputDoesNotCrash) {
  std::string deep = "<|tool_call>call:f{a:";
  for (int i = 0; i < 5000; ++i) deep += "[";
  deep += "<tool_call|>";
  EXPECT_EQ(parse_output(deep).content, deep);
  // Bytes that are not UTF-8 inside a string: replaced in the JSON text, no exception.
  const OutputDelta d = parse_output("<|tool_call>call:f{s:<|\"|>\xff\xfe<|\"|>}<tool_call|>");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(json::parse(d.tool_calls[0]["function"]["arguments"].get<std::string>())["s"],
            "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(OutputParser, ArgumentsKeepTheModelsKeyOrderAndIdsUseThePrefix) {
  OutputParserOptions options;
  options.tool_call_id_prefix = "resp7_";
  const OutputDelta d = parse_output(
      "<|tool_call>call:f{zeta:1,alpha:<|\"|>x<|\"|>}<tool_call|>"
      "<|tool_call>call:g{}<tool_call|>",
      options);
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0]["id"], "resp7_0");
  EXPECT_EQ(d.tool_calls[1]["id"], "resp7_1");
  EXPECT_EQ(d.tool_calls[0]["function"]["arguments"], "{\"zeta\":1,\"alpha\":\"x\"}");
  EXPECT_EQ(d.tool_calls[1]["function"]["arguments"], "{}");
}

TEST(OutputParser, ParseToolCallDirectly) {
  auto call = parse_tool_call("call:search{query:<|\"|>a:b<|\"|>,limit:10,exact:false}");
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(call->name, "search");
  EXPECT_EQ(call->arguments.dump(), R"({"query":"a:b","limit":10,"exact":false})");
  EXPECT_FALSE(parse_tool_call("search{}").has_value());
  EXPECT_FALSE(parse_tool_call("call:search{").has_value());
}

// Deltas arrive as soon as they are certain: content before a marker is not held back.
TEST(OutputParser, DeltasAreTimely) {
  OutputParser p;
  EXPECT_EQ(p.push("<|channel>thought\nabc").reasoning, "abc");
  EXPECT_EQ(p.push("d<chan").reasoning, "d");
  OutputDelta d = p.push("nel|>Hi <");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Hi ");
  d = p.push("|tool_call>call:f{x:1}");
  EXPECT_TRUE(d.empty());
  d = p.push("<tool_call|>");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0]["function"]["name"], "f");
  d = p.finish();
  EXPECT_TRUE(d.empty());
}

// Random mixes of markers, marker fragments, argument syntax and text: every way of cutting the text
// gives the same result as feeding it whole (and nothing throws).
TEST(OutputParser, RandomOutputsAreCutIndependent) {
  const std::vector<std::string> atoms = {"<|channel>",
                                          "thought\n",
                                          "<channel|>",
                                          "<|tool_call>",
                                          "call:f",
                                          "{",
                                          "}",
                                          "[",
                                          "]",
                                          ",",
                                          ":",
                                          "<|\"|>",
                                          "<tool_call|>",
                                          "<turn|>",
                                          "<|tool_response>",
                                          "<eos>",
                                          "<",
                                          "|",
                                          ">",
                                          "a",
                                          "b c",
                                          "1",
                                          "-2.5",
                                          "true",
                                          "x:y",
                                          "\n",
                                          "<|chan",
                                          "<tool_",
                                          "é",
                                          "\"q\""};
  std::mt19937 rng(77);
  for (int trial = 0; trial < 400; ++trial) {
    std::string text;
    const int n = 1 + int(rng() % 24);
    for (int i = 0; i < n; ++i) text += atoms[rng() % atoms.size()];
    const Result whole = feed(text, {});
    for (const auto& cuts : cut_patterns(text.size())) {
      const Result r = feed(text, cuts);
      ASSERT_EQ(r.reasoning, whole.reasoning) << json(text).dump();
      ASSERT_EQ(r.content, whole.content) << json(text).dump();
      ASSERT_EQ(r.tool_calls, whole.tool_calls) << json(text).dump();
    }
  }
}

// What the chat template writes for an assistant tool call parses back to the same arguments: the
// renderer and the parser agree on the syntax (strings with commas, braces and quotes; nesting).
TEST(OutputParser, ParsesTheChatTemplatesOwnToolCalls) {
  const json args = json::parse(R"({"query": "a, {b} \"c\" [d]: e", "n": 12, "x": -0.25, "flag": true,
      "off": false, "none": null, "list": [1, "two", [3], {"k": "v"}], "obj": {"Inner": {"deep": []}},
      "empty": {}, "text": "line1\nline2"})");
  const json messages = {
      {{"role", "user"}, {"content", "go"}},
      {{"role", "assistant"},
       {"tool_calls",
        {{{"type", "function"}, {"function", {{"name", "search"}, {"arguments", args}}}},
         {{"type", "function"}, {"function", {{"name", "noop"}, {"arguments", json::object()}}}}}}}};
  const std::string prompt = render_chat(messages, nullptr, false, false);
  const std::string model_turn = "<|turn>model\n";
  const size_t start = prompt.find(model_turn);
  ASSERT_NE(start, std::string::npos);
  // The prompt ends with the <|tool_response> that hands over to the tool: an end marker.
  const OutputDelta d = parse_output(prompt.substr(start + model_turn.size()));
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0]["function"]["name"], "search");
  EXPECT_EQ(json::parse(d.tool_calls[0]["function"]["arguments"].get<std::string>()), args);
  EXPECT_EQ(d.tool_calls[1]["function"]["name"], "noop");
  EXPECT_EQ(d.tool_calls[1]["function"]["arguments"], "{}");
}

}  // namespace
}  // namespace gem4::text
