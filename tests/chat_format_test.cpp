// Chat format: the native renderer must reproduce the Jinja template byte for byte.
//  - PublicGoldens: testdata/tokenizer/chat-template-public.jsonl (rendered by @huggingface/jinja and
//    Python Jinja2), and its `ids` through our tokenizer (special tokens on, no extra BOS).
//  - BranchGoldens: conversations written to hit every branch of the template (media parts, thought
//    stripping, continuation turns, tool calls with object/string/null arguments, parallel calls
//    matched by id, legacy tool_responses, reasoning replay, tricky tool schemas, Unicode trim).
//    Their `rendered` strings were produced by Python Jinja2 3.1.6 from the .jinja file, set up as
//    transformers' apply_chat_template does (ImmutableSandboxedEnvironment, trim_blocks,
//    lstrip_blocks), not by this renderer.
#include "text/chat_format.h"

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace gem4::text {
namespace {

using json = nlohmann::json;

std::string render_case(const json& c) {
  return render_chat(c.at("messages"), c.at("tools"), c.at("add_generation_prompt").get<bool>(),
                     c.at("enable_thinking").get<bool>(), c.at("bos_token").get<std::string>());
}

// Prints where two renders first differ, which a plain string comparison buries in a long line.
std::string first_difference(const std::string& got, const std::string& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  auto window = [&](const std::string& s) { return json(s.substr(i, 60)).dump(); };
  return "first difference at byte " + std::to_string(i) + ": got " + window(got) + ", want " + window(want);
}

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> rows;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

TEST(ChatFormat, PublicGoldensRenderByteForByte) {
  const auto rows = read_jsonl(test::testdata("tokenizer/chat-template-public.jsonl"));
  ASSERT_EQ(rows.size(), 3u);
  for (const json& row : rows) {
    const std::string want = row.at("rendered").get<std::string>();
    const std::string got = render_case(row);
    EXPECT_EQ(got, want) << row.at("name") << ": " << first_difference(got, want);
  }
}

TEST(ChatFormat, PublicGoldensTokenizeToIds) {
  const auto rows = read_jsonl(test::testdata("tokenizer/chat-template-public.jsonl"));
  ASSERT_EQ(rows.size(), 3u);
  auto file = gguf::GgufFile::open(test::testdata("tokenizer/gemma4-vocab.gguf"));
  const Tokenizer tok = Tokenizer::from_gguf(*file);
  for (const json& row : rows) {
    const std::vector<int32_t> want = row.at("ids").get<std::vector<int32_t>>();
    // The rendered text already starts with <bos>: tokenize without adding another.
    EXPECT_EQ(tok.encode(render_case(row), /*add_bos=*/false, /*parse_special=*/true), want)
        << row.at("name");
  }
}

const char* const kBranchCases[] = {
    R"case({"name": "developer-structured-user-media",
      "messages": [
        {"role": "developer", "content": "  Be brief.\n"},
        {"role": "user", "content": [{"type": "text", "text": " Look: "}, {"type": "image"}, {"type": "text", "text": "and"}, {"type": "audio"}, {"type": "video"}, {"type": "image_url", "image_url": {"url": "x"}}]}],
      "tools": null,
      "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<bos>",
      "rendered": "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nLook:<|image|>and<|audio|><|video|><turn|>\n<|turn>model\n<|channel>thought\n<channel|>"})case",
    R"case({"name": "user-ends-with-image-no-system",
      "messages": [
        {"role": "user", "content": [{"type": "text", "text": "What is this?"}, {"type": "image"}]}],
      "tools": [],
      "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<bos>",
      "rendered": "<bos><|turn>user\nWhat is this?<|image|><turn|>\n<|turn>model\n<|channel>thought\n<channel|>"})case",
    R"case({"name": "strip-thinking-everywhere",
      "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<|channel>thought\nA<channel|>One <|channel>thought\nB<channel|>two\n"},
        {"role": "user", "content": "More"},
        {"role": "assistant", "content": [{"type": "text", "text": "<|channel>thought\nC<channel|> three"}, {"type": "text", "text": "four<|channel>unclosed"}]},
        {"role": "user", "content": "<|channel>kept in user<channel|> text"}],
      "tools": null,
      "add_generation_prompt": false, "enable_thinking": true, "bos_token": "<bos>",
      "rendered": "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\nOne two<turn|>\n<|turn>user\nMore<turn|>\n<|turn>model\nthreefour<turn|>\n<|turn>user\n<|channel>kept in user<channel|> text<turn|>\n"})case",
    R"case({"name": "thinking-on-system-and-tools",
      "messages": [
        {"role": "system", "content": "You help."},
        {"role": "user", "content": "Weather?"}],
      "tools": [
        {"type": "function", "function": {"name": "get_weather", "description": "Current weather.", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}],
      "add_generation_prompt": true, "enable_thinking": true, "bos_token": "<bos>",
      "rendered": "<bos><|turn>system\n<|think|>\nYou help.<|tool>declaration:get_weather{description:<|\"|>Current weather.<|\"|>,parameters:{properties:{city:{description:<|\"|>City name<|\"|>,type:<|\"|>STRING<|\"|>},unit:{enum:[<|\"|>c<|\"|>,<|\"|>f<|\"|>],type:<|\"|>STRING<|\"|>}},required:[<|\"|>city<|\"|>],type:<|\"|>OBJECT<|\"|>}}<tool|><turn|>\n<|turn>user\nWeather?<turn|>\n<|turn>model\n"})case",
    R"case({"name": "tool-call-string-arguments-open-turn",
      "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "city:<|\"|>Oslo<|\"|>"}}]}],
      "tools": [
        {"type": "function", "function": {"name": "get_weather", "description": "Current weather.", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}],
      "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<bos>",
      "rendered": "<bos><|turn>system\n<|tool>declaration:get_weather{description:<|\"|>Current weather.<|\"|>,parameters:{properties:{city:{description:<|\"|>City name<|\"|>,type:<|\"|>STRING<|\"|>},unit:{enum:[<|\"|>c<|\"|>,<|\"|>f<|\"|>],type:<|\"|>STRING<|\"|>}},required:[<|\"|>city<|\"|>],type:<|\"|>OBJECT<|\"|>}}<tool|><turn|>\n<|turn>user\nWeather in Oslo?<turn|>\n<|turn>model\n<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>}<tool_call|><|tool_response>"})case",
    R"case({"name": "parallel-calls-matched-by-id",
      "messages": [
        {"role": "user", "content": "Oslo and Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}, {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": {"zone": "CET", "exact": true}}}]},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "12:00"}, {"type": "text", "text": " CET"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "rain"},
        {"role": "assistant", "content": "Rain in Oslo; noon in Rome."},
        {"role": "user", "content": "Thanks"}],
      "tools": [
        {"type": "function", "function": {"name": "get_weather", "description": "Current weather.", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}],
      "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<bos>",
      "rendered": "<bos><|turn>system\n<|tool>declaration:get_weather{description:<|\"|>Current weather.<|\"|>,parameters:{properties:{city:{description:<|\"|>City name<|\"|>,type:<|\"|>STRING<|\"|>},unit:{enum:[<|\"|>c<|\"|>,<|\"|>f<|\"|>],type:<|\"|>STRING<|\"|>}},required:[<|\"|>city<|\"|>],type:<|\"|>OBJECT<|\"|>}}<tool|><turn|>\n<|turn>user\nOslo and Rome?<turn|>\n<|turn>model\n<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>}<tool_call|><|tool_call>call:get_time{exact:true,zone:<|\"|>CET<|\"|>}<tool_call|><|tool_response>response:get_time{value:<|\"|>12:00 CET<|\"|>}<tool_response|><|tool_response>response:get_weather{value:<|\"|>rain<|\"|>}<tool_response|>Rain in Oslo; noon in Rome.<turn|>\n<|turn>user\nThanks<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"})case",
    R"case({"name": "reasoning-replayed-after-last-user",
      "messages": [
        {"role": "user", "content": "Old question"},
        {"role": "assistant", "reasoning_content": "old thoughts", "content": "", "tool_calls": [{"id": "x", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "A"}}}]},
        {"role": "tool", "tool_call_id": "x", "content": "sun"},
        {"role": "assistant", "content": "Sunny."},
        {"role": "user", "content": "And B?"},
        {"role": "assistant", "reasoning": "need B weather", "content": "Checking.", "tool_calls": [{"id": "y", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "B"}}}]},
        {"role": "tool", "tool_call_id": "y", "content": "{\"temp\": 20.5}"}],
      "tools": [
        {"type": "function", "function": {"name": "get_weather", "description": "Current weather.", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}],
      "add_generation_prompt": true, "enable_thinking": true, "bos_token": "<bos>",
      "rendered": "<bos><|turn>system\n<|think|>\n<|tool>declaration:get_weather{description:<|\"|>Current weather.<|\"|>,parameters:{properties:{city:{description:<|\"|>City name<|\"|>,type:<|\"|>STRING<|\"|>},unit:{enum:[<|\"|>c<|\"|>,<|\"|>f<|\"|>],type:<|\"|>STRING<|\"|>}},required:[<|\"|>city<|\"|>],type:<|\"|>OBJECT<|\"|>}}<tool|><turn|>\n<|turn>user\nOld question<turn|>\n<|turn>model\n<|tool_call>call:get_weather{city:<|\"|>A<|\"|>}<tool_call|><|tool_response>response:get_weather{value:<|\"|>sun<|\"|>}<tool_response|>Sunny.<turn|>\n<|turn>user\nAnd B?<turn|>\n<|turn>model\n<|channel>thought\nneed B weather\n<channel|><|tool_call>call:get_weather{city:<|\"|>B<|\"|>}<tool_call|><|tool_response>response:get_weather{value:<|\"|>{\"temp\": 20.5}<|\"|>}<tool_response|>Checking.<turn|>\n"})case",
    R"case({"name": "legacy-tool-responses",
      "messages": [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "tool_calls": [{"function": {"name": "lookup", "arguments": {"q": "x"}}}], "tool_responses": [{"name": "lookup", "response": {"hits": [1, 2], "ok": true, "note": null}}, {"response": "plain"}]}],
      "tools": null,
      "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<bos>",
      "rendered": "<bos><|turn>user\nGo<turn|>\n<|turn>model\n<|tool_call>call:lookup{q:<|\"|>x<|\"|>}<tool_call|><|tool_response>response:lookup{hits:[1,2],note:None,ok:true}<tool_response|><|tool_response>response:unknown{value:<|\"|>plain<|\"|>}<tool_response|>"})case",
    R"case({"name": "tool-name-fallbacks",
      "messages": [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "tool_calls": [{"function": {"name": "first", "arguments": {}}}, {"function": {"name": "second", "arguments": null}}]},
        {"role": "tool", "content": "r1"},
        {"role": "tool", "tool_call_id": "nope", "name": "named", "content": 42},
        {"role": "user", "content": "ok"}],
      "tools": null,
      "add_generation_prompt": false, "enable_thinking": false, "bos_token": "<bos>",
      "rendered": "<bos><|turn>user\nGo<turn|>\n<|turn>model\n<|tool_call>call:first{}<tool_call|><|tool_call>call:second{}<tool_call|><|tool_response>response:second{value:<|\"|>r1<|\"|>}<tool_response|><|tool_response>response:named{value:42}<tool_response|><|turn>user\nok<turn|>\n"})case",
    R"case({"name": "nested-arguments",
      "messages": [
        {"role": "user", "content": "Plan"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "p", "type": "function", "function": {"name": "plan", "arguments": {"steps": [{"title": "a, b", "done": false}, {"title": "{c}", "n": 3}], "Meta": {"Z": 1.5, "a": null, "big": 1e+20, "tiny": 1e-05, "whole": 2.0}, "tags": []}}}]},
        {"role": "tool", "tool_call_id": "p", "content": "ok"}],
      "tools": null,
      "add_generation_prompt": false, "enable_thinking": false, "bos_token": "<bos>",
      "rendered": "<bos><|turn>user\nPlan<turn|>\n<|turn>model\n<|tool_call>call:plan{Meta:{a:None,big:1e+20,tiny:1e-05,whole:2.0,Z:1.5},steps:[{done:false,title:<|\"|>a, b<|\"|>},{n:3,title:<|\"|>{c}<|\"|>}],tags:[]}<tool_call|><|tool_response>response:plan{value:<|\"|>ok<|\"|>}<tool_response|>"})case",
    R"case({"name": "complex-tool-schemas",
      "messages": [
        {"role": "user", "content": "hi"}],
      "tools": [
        {"type": "function", "function": {"name": "create", "description": "Create items.", "parameters": {"type": "object", "properties": {"items": {"type": "array", "description": "Things", "items": {"type": "object", "properties": {"name": {"type": "string"}, "qty": {"type": "integer", "nullable": true}}, "required": ["name"]}}, "labels": {"type": "array", "items": {"type": ["string", "null"], "maxLength": 5}}, "options": {"type": "object", "description": "Free-form", "additionalProperties": {"type": "string"}}, "mode": {"type": "string", "enum": ["fast", "slow"], "description": "How"}, "type": {"type": "string"}, "Priority": {"type": "number", "nullable": true}, "config": {"type": "object", "properties": {"depth": {"type": "integer"}}, "required": ["depth"]}}, "required": ["items", "mode"]}, "response": {"type": "object", "description": "The new ids"}}},
        {"type": "function", "function": {"name": "ping", "description": "No args."}},
        {"type": "function", "function": {"name": "untyped", "description": "Params without type.", "parameters": {"properties": {"x": {"type": "boolean"}}, "required": ["x"]}}},
        {"type": "function", "function": {"name": "empty_params", "parameters": {}, "response": {"type": "string"}}}],
      "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<bos>",
      "rendered": "<bos><|turn>system\n<|tool>declaration:create{description:<|\"|>Create items.<|\"|>,parameters:{properties:{config:{properties:{depth:{type:<|\"|>INTEGER<|\"|>}},required:[<|\"|>depth<|\"|>],type:<|\"|>OBJECT<|\"|>},items:{description:<|\"|>Things<|\"|>,items:{properties:{name:{type:<|\"|>STRING<|\"|>},qty:{nullable:true,type:<|\"|>INTEGER<|\"|>}},required:[<|\"|>name<|\"|>],type:<|\"|>OBJECT<|\"|>},type:<|\"|>ARRAY<|\"|>},labels:{items:{maxLength:5,type:[<|\"|>STRING<|\"|>,<|\"|>NULL<|\"|>]},type:<|\"|>ARRAY<|\"|>},mode:{description:<|\"|>How<|\"|>,enum:[<|\"|>fast<|\"|>,<|\"|>slow<|\"|>],type:<|\"|>STRING<|\"|>},options:{description:<|\"|>Free-form<|\"|>,properties:{additionalProperties:{type:<|\"|>STRING<|\"|>}},type:<|\"|>OBJECT<|\"|>},Priority:{nullable:true,type:<|\"|>NUMBER<|\"|>}},required:[<|\"|>items<|\"|>,<|\"|>mode<|\"|>],type:<|\"|>OBJECT<|\"|>},response:{description:<|\"|>The new ids<|\"|>,type:<|\"|>OBJECT<|\"|>}}<tool|><|tool>declaration:ping{description:<|\"|>No args.<|\"|>}<tool|><|tool>declaration:untyped{description:<|\"|>Params without type.<|\"|>,parameters:{properties:{x:{type:<|\"|>BOOLEAN<|\"|>}},required:[<|\"|>x<|\"|>],}<tool|><|tool>declaration:empty_params{description:<|\"|><|\"|>,response:{}<tool|><turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"})case",
    R"case({"name": "assistant-continuation-and-model-role",
      "messages": [
        {"role": "assistant", "content": "Hello!"},
        {"role": "assistant", "content": "Still me."},
        {"role": "model", "content": "Model role <|channel>x<channel|>stripped"},
        {"role": "user", "content": "  "},
        {"role": "system", "content": " mid system "}],
      "tools": null,
      "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<bos>",
      "rendered": "<bos><|turn>model\nHello!<turn|>\nStill me.<turn|>\nModel role stripped<turn|>\n<|turn>user\n<turn|>\n<|turn>system\nmid system<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"})case",
    R"case({"name": "only-system",
      "messages": [
        {"role": "system", "content": "Sys only"}],
      "tools": null,
      "add_generation_prompt": true, "enable_thinking": true, "bos_token": "<bos>",
      "rendered": "<bos><|turn>system\n<|think|>\nSys only<turn|>\n<|turn>model\n"})case",
    R"case({"name": "custom-bos-unicode-trim",
      "messages": [
        {"role": "user", "content": "\u3000\u00a0 wide spaces \u2028"}],
      "tools": null,
      "add_generation_prompt": false, "enable_thinking": false, "bos_token": "",
      "rendered": "<|turn>user\nwide spaces<turn|>\n"})case",
};

TEST(ChatFormat, BranchGoldensMatchJinja2) {
  for (const char* text : kBranchCases) {
    const json c = json::parse(text);
    const std::string want = c.at("rendered").get<std::string>();
    std::string got;
    ASSERT_NO_THROW(got = render_case(c)) << c.at("name");
    EXPECT_EQ(got, want) << c.at("name") << ": " << first_difference(got, want);
  }
}

// The generation prompt: open model turn, plus the empty thought channel only with thinking off,
// and none at all while the model turn is still open for tool responses.
TEST(ChatFormat, GenerationPromptBranches) {
  const json user = json::parse(R"([{"role":"user","content":"Hi"}])");
  EXPECT_EQ(render_chat(user, nullptr, true, false),
            "<bos><|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
  EXPECT_EQ(render_chat(user, nullptr, true, true),
            "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n");
  EXPECT_EQ(render_chat(user, nullptr, false, false), "<bos><|turn>user\nHi<turn|>\n");
  EXPECT_EQ(render_chat(user, nullptr, false, false, ""), "<|turn>user\nHi<turn|>\n");

  const json open_call = json::parse(R"([{"role":"user","content":"Hi"},
      {"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]}])");
  EXPECT_EQ(render_chat(open_call, nullptr, true, false),
            "<bos><|turn>user\nHi<turn|>\n<|turn>model\n<|tool_call>call:f{a:1}<tool_call|><|tool_response>");
}

TEST(ChatFormat, StringArgumentsAreCopiedAndCanBeNormalized) {
  const json msgs = json::parse(R"([{"role":"user","content":"x"},
      {"role":"assistant","content":"","tool_calls":[{"id":"1","type":"function",
       "function":{"name":"f","arguments":"{\"b\": [1, \"two\"], \"a\": {\"c\": true}}"}}]}])");
  // The template copies a string verbatim between the braces.
  EXPECT_NE(render_chat(msgs, nullptr, false, false)
                .find("call:f{{\"b\": [1, \"two\"], \"a\": {\"c\": true}}}<tool_call|>"),
            std::string::npos);
  const json normalized = normalize_tool_call_arguments(msgs);
  EXPECT_TRUE(normalized[1]["tool_calls"][0]["function"]["arguments"].is_object());
  EXPECT_NE(render_chat(normalized, nullptr, false, false)
                .find("call:f{a:{c:true},b:[1,<|\"|>two<|\"|>]}<tool_call|>"),
            std::string::npos);
  // Not JSON, or JSON that is not an object: left alone.
  json odd = msgs;
  odd[1]["tool_calls"][0]["function"]["arguments"] = "not json";
  EXPECT_EQ(normalize_tool_call_arguments(odd), odd);
  odd[1]["tool_calls"][0]["function"]["arguments"] = "[1,2]";
  EXPECT_EQ(normalize_tool_call_arguments(odd), odd);
}

// Malformed input throws std::invalid_argument whose message names the message index and field.
TEST(ChatFormat, MalformedMessagesNameIndexAndField) {
  struct Bad {
    const char* messages;
    const char* tools;
    const char* expect;  // substring of the error message
  };
  const Bad cases[] = {
      {R"([])", "null", "messages: empty"},
      {R"({"role":"user"})", "null", "messages: expected an array"},
      {R"([{"role":"user","content":"a"}, {"role":"robot","content":"b"}])", "null",
       "messages[1].role: unknown role \"robot\""},
      {R"([{"content":"a"}])", "null", "messages[0].role: missing"},
      {R"([{"role":7}])", "null", "messages[0].role: expected a string"},
      {R"([{"role":"user","content":"a"}, "hello"])", "null", "messages[1]: expected an object"},
      {R"([{"role":"user","content":{"text":"a"}}])", "null", "messages[0].content"},
      {R"([{"role":"user","content":42}])", "null", "messages[0].content"},
      {R"([{"role":"user","content":["a"]}])", "null", "messages[0].content[0]: expected an object"},
      {R"([{"role":"user","content":[{"text":"a"}]}])", "null", "messages[0].content[0].type"},
      {R"([{"role":"user","content":[{"type":"text"}]}])", "null", "messages[0].content[0].text: missing"},
      {R"([{"role":"user","content":[{"type":"text","text":5}]}])", "null", "messages[0].content[0].text"},
      {R"([{"role":"user","content":"a"},{"role":"assistant","tool_calls":{"function":{}}}])", "null",
       "messages[1].tool_calls: expected an array"},
      {R"([{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"id":"1"}]}])", "null",
       "messages[1].tool_calls[0].function"},
      {R"([{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"function":{"arguments":{}}}]}])",
       "null", "messages[1].tool_calls[0].function.name"},
      {R"([{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":3}}]}])",
       "null", "messages[1].tool_calls[0].function.arguments"},
      {R"([{"role":"assistant","content":"a","reasoning_content":["x"]}])", "null",
       "messages[0].reasoning_content"},
      {R"([{"role":"assistant","content":"a","tool_responses":"x"}])", "null", "messages[0].tool_responses"},
      {R"([{"role":"user","content":"a"}])", R"({"type":"function"})", "tools: expected an array"},
      {R"([{"role":"user","content":"a"}])", R"([{"type":"function","function":{"description":"d"}}])",
       "tools[0].function.name"},
      {R"([{"role":"user","content":"a"}])", R"([{"type":"function","name":"f"}])", "tools[0].function"},
      {R"([{"role":"user","content":"a"}])",
       R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":[1]}}}])",
       "tools[0].function.parameters.properties"},
      {R"([{"role":"user","content":"a"}])",
       R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","required":5}}}])",
       "tools[0].function.parameters.required"},
  };
  for (const Bad& bad : cases) {
    const json messages = json::parse(bad.messages);
    const json tools = json::parse(bad.tools);
    try {
      render_chat(messages, tools, true, false);
      ADD_FAILURE() << "no exception for " << bad.messages << " / " << bad.tools;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(bad.expect), std::string::npos)
          << "message \"" << e.what() << "\" lacks \"" << bad.expect << "\"";
    }
  }
}

// Unknown content part types are dropped (as the template does), and null content renders nothing.
TEST(ChatFormat, TolerantWhereTheTemplateIs) {
  const json msgs =
      json::parse(R"([{"role":"user","content":[{"type":"input_audio"},{"type":"text","text":"hi"}]},
      {"role":"assistant","content":null,"tool_calls":[]},{"role":"tool","content":{"x":1}}])");
  EXPECT_EQ(render_chat(msgs, json::array(), false, false),
            "<bos><|turn>user\nhi<turn|>\n<|turn>model\n<turn|>\n");
}

}  // namespace
}  // namespace gem4::text
