// Gemma 4 chat format: a native renderer of the instruction-tuned chat template
// (../shared/testdata/tokenizer/google-gemma-4-31B-it.jinja, spec section 4.5). No Jinja engine:
// every branch of the template is written out in chat_format.cpp, in the template's order, and the
// output is byte-identical to what Python Jinja2 (transformers' apply_chat_template) renders.
//
// Where the template's behaviour depends on the Jinja engine (how None, floats or a list print) we
// follow Python Jinja2. Where the template would fail or print a Python repr for input that is
// plausible but malformed, we say so in the comments at that branch.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace gem4::text {

// Renders `messages` (OpenAI-style array of {"role", "content", "tool_calls", "tool_call_id", ...};
// roles system, developer, user, assistant, model, tool) and `tools` (null or an array of
// {"type":"function","function":{"name","description","parameters"}}) into the prompt text, which
// starts with `bos_token` (tokenize it with special tokens on and without adding another BOS).
//
// add_generation_prompt appends "<|turn>model\n" (plus the empty thought channel
// "<|channel>thought\n<channel|>" when thinking is off) unless the last message left the model turn
// open (a tool call or tool response). enable_thinking puts "<|think|>" at the top of the system turn.
//
// Content may be a string or an array of parts {"type":"text","text"}, {"type":"image"},
// {"type":"audio"}, {"type":"video"} (media become <|image|> <|audio|> <|video|>; other part types
// are ignored, as the template does). Tool-call arguments may be a JSON object (rendered in the
// template's key:value syntax) or a string (copied verbatim, as the template does; see
// normalize_tool_call_arguments).
//
// Throws std::invalid_argument naming the message index (or tool index) and field for an empty
// message list, an unknown role, or a field of the wrong type.
std::string render_chat(const nlohmann::json& messages, const nlohmann::json& tools,
                        bool add_generation_prompt, bool enable_thinking,
                        const std::string& bos_token = "<bos>");

// OpenAI clients send tool-call arguments as a JSON string; the template copies a string verbatim
// into call:NAME{...}, which is not the syntax the model was trained on. This returns a copy of
// `messages` where every string `arguments` that parses as a JSON object is replaced by that object
// (anything else is left as it is). Callers that serve the OpenAI API should run it before
// render_chat.
nlohmann::json normalize_tool_call_arguments(const nlohmann::json& messages);

}  // namespace gem4::text
