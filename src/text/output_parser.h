// Splits what a Gemma 4 model writes into reasoning, answer text and tool calls, incrementally.
//
// The model's markup (spec section 4.5):
//   <|channel>thought\n ... <channel|>        reasoning (the "thought\n" header is dropped; the
//                                             channel may be empty, or never closed)
//   <|tool_call>call:NAME{key:value,...}<tool_call|>
//                                             a tool call; values are <|"|>strings<|"|>, numbers,
//                                             true/false, null, {nested}, [lists]; keys bare or quoted
//   <turn|>  <|tool_response>  <eos>          end of the model's output: the rest is ignored
// Everything else is content. A tool call that does not parse (or never closes) is kept verbatim
// as content, markers included; the parser never throws on model output.
//
// Text arrives as pieces that may split a marker anywhere. Text that could be the start of a marker
// is held back until the next piece decides it, so the deltas never contain half a marker, and the
// concatenated deltas are the same however the text was cut into pieces.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gem4::text {

// What one push()/finish() produced. Within one delta, reasoning, content and tool calls are each
// in order, but their relative order is not kept (the model writes reasoning first in practice).
struct OutputDelta {
  std::string reasoning;
  std::string content;
  // Completed calls, OpenAI style:
  // {"id":"call_0","type":"function","function":{"name":"NAME","arguments":"<JSON object text>"}}
  std::vector<nlohmann::json> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

struct OutputParserOptions {
  // Tool-call ids are this prefix followed by the call's index in this output (0, 1, ...). A server
  // that needs ids unique across responses passes a unique prefix per response.
  std::string tool_call_id_prefix = "call_";
};

class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions options = {});

  // Feeds the next piece of generated text; returns what became certain.
  OutputDelta push(std::string_view piece);
  // End of generation: releases held-back text (an unclosed thought channel stays reasoning, an
  // unclosed tool call becomes content). Later push() calls are ignored.
  OutputDelta finish();

  // Everything produced so far (the concatenation of all deltas).
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<nlohmann::json>& tool_calls() const { return tool_calls_; }
  // True once an end marker was seen or finish() was called.
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kContent, kChannelHeader, kReasoning, kToolCall, kDone };
  void process(OutputDelta& delta, bool at_end);
  void emit_content(OutputDelta& delta, std::string_view text);
  void emit_reasoning(OutputDelta& delta, std::string_view text);
  void close_tool_call(OutputDelta& delta, std::string_view body, bool closed);

  OutputParserOptions options_;
  State state_ = State::kContent;
  std::string buf_;       // text not yet assigned to an output
  size_t tool_scan_ = 0;  // in kToolCall: buf_ has no closing marker before this offset
  std::string reasoning_, content_;
  std::vector<nlohmann::json> tool_calls_;
};

// A parsed tool call: the name and the arguments as a JSON object (keys in the model's order).
struct ToolCall {
  std::string name;
  nlohmann::ordered_json arguments;
};

// Whether parse_tool_call reads `name` back as a function name (no whitespace or {}[]<>,:"').
bool valid_function_name(std::string_view name);

// Parses the text between <|tool_call> and <tool_call|>, e.g. `call:get_weather{city:<|"|>Paris<|"|>}`.
// Returns nullopt when it is not a well-formed call.
std::optional<ToolCall> parse_tool_call(std::string_view body);

// Parses a whole output at once (the same as one push() and finish()).
OutputDelta parse_output(std::string_view text, OutputParserOptions options = {});

}  // namespace gem4::text
