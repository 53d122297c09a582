// The OpenAI-compatible request and response formats: request bodies are validated and turned into a
// GenerationRequest; generated text becomes chat.completion / text_completion objects and their
// streaming chunks. Nothing here knows about HTTP or threads.
//
// Extensions beyond OpenAI's fields (llama.cpp-style, all optional):
//   top_k, min_p, repeat_penalty, repeat_last_n      sampling (see generate/sampler.h)
//   chat_template_kwargs.enable_thinking (bool)     thinking on/off; also `think` (bool) or
//   reasoning_effort ("none"|"minimal" off, "low"|"medium"|"high" on). Default: off.
//   return_progress (bool)                          streaming: prompt-progress chunks while the
//                                                   prompt is processed
// Reasoning comes back as `reasoning_content` (message or delta). Penalties and logit_bias values
// are not limited to OpenAI's ranges, only to finite numbers.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

#include "generate/media_prompt.h"
#include "server/job.h"
#include "text/tokenizer.h"

namespace gem4::server {

// A request the server refuses, with the HTTP status and OpenAI's error fields.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "", std::string code = "",
           std::string type = "");
  int status;
  std::string type;   // invalid_request_error, authentication_error, not_found_error, server_error, ...
  std::string param;  // the offending field ("messages[2].role"), empty when none
  std::string code;   // e.g. context_length_exceeded, invalid_api_key; empty when none
};

// {"error": {"message", "type", "param", "code"}} (param and code null when empty).
nlohmann::json error_json(const ApiError& e);

// Serialises JSON for the wire; invalid UTF-8 (which the engine never produces) becomes U+FFFD.
std::string dump(const nlohmann::json& j);

// Offset of the first byte that is not part of well-formed UTF-8 (no overlong forms, surrogates or
// code points above U+10FFFF), or std::string::npos when all of `s` is well-formed.
size_t invalid_utf8_offset(std::string_view s);

// Parses a request body: UTF-8, then JSON. Throws ApiError 400 (code invalid_utf8 / invalid_json).
nlohmann::json parse_body(std::string_view body);
// The same body with its object keys in the client's order (nlohmann::json sorts them), for the
// JSON schemas in it, whose property order is the order generated objects follow. Call it after
// parse_body accepted the body.
nlohmann::ordered_json parse_body_ordered(std::string_view body);

// A fresh response id: prefix + 24 random hex digits ("chatcmpl-3f2a...").
std::string new_response_id(const std::string& prefix);

struct ServedModel {
  std::string name;  // the id clients see
  int n_ctx = 0;     // context per request (per slot)
  int n_vocab = 0;
  // Encodes an image's file bytes to soft tokens (gem4 serve --mmproj); null: no projector, image parts
  // are refused. Throws (media::MediaError, ...) for a bad image; `where` names it in the message.
  std::function<generate::MediaInput(const std::string& bytes, const std::string& where)> encode_image;
  // The same for the WAV bytes of an input_audio part; null: no audio tower, audio parts are refused.
  std::function<generate::MediaInput(const std::string& bytes, const std::string& where)> encode_audio;
};

struct ApiRequest {
  GenerationRequest gen;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string prompt_text;     // chat: the rendered prompt
};

// Rendered chat prompt of a /v1/chat/completions body (also what /apply-template returns).
struct ChatPrompt {
  std::string text;                       // the template's output, plus the forced tool-call opening if any
  std::vector<std::string> images;        // bytes of the image_url parts (data: URIs), in prompt order
  std::vector<std::string> image_params;  // where each came from ("messages[1].content[0]")
  std::vector<std::string> audio;         // WAV bytes of the input_audio parts, in prompt order
  std::vector<std::string> audio_params;
  std::string assistant_prefix;      // that forced opening ("<|tool_call>call:NAME{"), or empty
  std::string forced_tool;           // the function of that opening, or empty
  std::string tool_choice = "auto";  // none, auto, required, or function (a named one)
  bool thinking = false;
};
ChatPrompt render_chat_prompt(const nlohmann::json& body);

// Validate a body and build the engine request. Throw ApiError (status 400) naming the field.
// `ordered` is the same body from parse_body_ordered (its schemas keep their property order).
ApiRequest parse_chat_request(const nlohmann::json& body, const nlohmann::ordered_json& ordered,
                              const text::Tokenizer& tok, const ServedModel& model);
ApiRequest parse_completion_request(const nlohmann::json& body, const nlohmann::ordered_json& ordered,
                                    const text::Tokenizer& tok, const ServedModel& model);

// Responses. `id` is the response id, `created` unix seconds.
nlohmann::json usage_json(const Usage& u);
nlohmann::json chat_completion(const std::string& id, int64_t created, const std::string& model,
                               const text::OutputDelta& all, FinishReason finish, const Usage& usage);
// delta: {"role"}, {"content"}, {"reasoning_content"} or {"tool_calls"}; finish null until the end.
nlohmann::json chat_chunk(const std::string& id, int64_t created, const std::string& model,
                          nlohmann::json delta, const char* finish_reason);
// The deltas of one engine event, as chat chunk deltas (tool calls numbered from *next_tool_index).
std::vector<nlohmann::json> chat_deltas(const text::OutputDelta& d, int* next_tool_index);
nlohmann::json text_completion(const std::string& id, int64_t created, const std::string& model,
                               const std::string& text, FinishReason finish, const Usage& usage);
nlohmann::json text_completion_chunk(const std::string& id, int64_t created, const std::string& model,
                                     const std::string& text, const char* finish_reason);
// A chunk with no choices: the usage chunk (stream_options.include_usage) or prompt progress.
nlohmann::json usage_chunk(const std::string& id, int64_t created, const std::string& model,
                           const char* object, const Usage& usage);
nlohmann::json progress_chunk(const std::string& id, int64_t created, const std::string& model,
                              const char* object, const GenerationEvent& progress);

}  // namespace gem4::server
