// OpenAI response objects and streaming chunks (see openai_api.h).
#include "server/openai_api.h"

namespace gem4::server {

using json = nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"completion_tokens_details",
           {{"accepted_prediction_tokens", u.accepted_prediction_tokens},
            {"rejected_prediction_tokens", u.rejected_prediction_tokens}}}};
}

json chat_completion(const std::string& id, int64_t created, const std::string& model,
                     const text::OutputDelta& all, FinishReason finish, const Usage& usage) {
  json message = {{"role", "assistant"}};
  message["content"] = all.content.empty() && !all.tool_calls.empty() ? json() : json(all.content);
  if (!all.reasoning.empty()) message["reasoning_content"] = all.reasoning;
  if (!all.tool_calls.empty()) message["tool_calls"] = all.tool_calls;
  return {{"id", id},
          {"object", "chat.completion"},
          {"created", created},
          {"model", model},
          {"system_fingerprint", "gem4"},
          {"choices", json::array({{{"index", 0},
                                    {"message", message},
                                    {"logprobs", nullptr},
                                    {"finish_reason", finish_reason_name(finish)}}})},
          {"usage", usage_json(usage)}};
}

json chat_chunk(const std::string& id, int64_t created, const std::string& model, json delta,
                const char* finish_reason) {
  return {{"id", id},
          {"object", "chat.completion.chunk"},
          {"created", created},
          {"model", model},
          {"system_fingerprint", "gem4"},
          {"choices", json::array({{{"index", 0},
                                    {"delta", std::move(delta)},
                                    {"logprobs", nullptr},
                                    {"finish_reason", finish_reason ? json(finish_reason) : json()}}})}};
}

std::vector<json> chat_deltas(const text::OutputDelta& d, int* next_tool_index) {
  std::vector<json> out;
  if (!d.reasoning.empty()) out.push_back({{"reasoning_content", d.reasoning}});
  if (!d.content.empty()) out.push_back({{"content", d.content}});
  if (!d.tool_calls.empty()) {
    json calls = json::array();
    for (const json& c : d.tool_calls) {
      json call = c;
      call["index"] = (*next_tool_index)++;
      calls.push_back(std::move(call));
    }
    out.push_back({{"tool_calls", std::move(calls)}});
  }
  return out;
}

json text_completion(const std::string& id, int64_t created, const std::string& model,
                     const std::string& text, FinishReason finish, const Usage& usage) {
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"system_fingerprint", "gem4"},
          {"choices", json::array({{{"index", 0},
                                    {"text", text},
                                    {"logprobs", nullptr},
                                    {"finish_reason", finish_reason_name(finish)}}})},
          {"usage", usage_json(usage)}};
}

json text_completion_chunk(const std::string& id, int64_t created, const std::string& model,
                           const std::string& text, const char* finish_reason) {
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"system_fingerprint", "gem4"},
          {"choices", json::array({{{"index", 0},
                                    {"text", text},
                                    {"logprobs", nullptr},
                                    {"finish_reason", finish_reason ? json(finish_reason) : json()}}})}};
}

json usage_chunk(const std::string& id, int64_t created, const std::string& model, const char* object,
                 const Usage& usage) {
  return {{"id", id},       {"object", object},         {"created", created},
          {"model", model}, {"choices", json::array()}, {"usage", usage_json(usage)}};
}

json progress_chunk(const std::string& id, int64_t created, const std::string& model, const char* object,
                    const GenerationEvent& p) {
  return {{"id", id},
          {"object", object},
          {"created", created},
          {"model", model},
          {"choices", json::array()},
          {"prompt_progress",
           {{"total", p.progress_total},
            {"cache", p.progress_cached},
            {"processed", p.progress_done},
            {"time_ms", p.progress_ms}}}};
}

}  // namespace gem4::server
