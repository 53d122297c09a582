// Validation of OpenAI request bodies into GenerationRequests (see openai_api.h).
#include "server/openai_api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <set>

#include "generate/grammar/gbnf.h"
#include "generate/grammar/json_schema.h"
#include "generate/grammar/tool_call_grammar.h"
#include "server/audio_parts.h"
#include "server/media_parts.h"
#include "text/chat_format.h"

namespace gem4::server {

using json = nlohmann::json;

ApiError::ApiError(int status_, std::string message, std::string param_, std::string code_, std::string type_)
    : std::runtime_error(std::move(message)),
      status(status_),
      type(type_.empty() ? (status_ >= 500 ? "server_error" : "invalid_request_error") : std::move(type_)),
      param(std::move(param_)),
      code(std::move(code_)) {}

json error_json(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? json() : json(e.param)},
            {"code", e.code.empty() ? json() : json(e.code)}}}};
}

namespace {

// ---- field access with errors that name the field ------------------------------------------------

[[noreturn]] void bad(const std::string& param, const std::string& message,
                      const std::string& code = "invalid_value") {
  throw ApiError(400, message, param, code);
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_float:
      return "a number";
    default:
      return "an integer";
  }
}

[[noreturn]] void wrong_type(const std::string& param, const json& v, const char* want) {
  bad(param, "'" + param + "' must be " + want + ", not " + type_name(v), "invalid_type");
}

// The field, or nullptr when absent or null (OpenAI treats null as "not given").
const json* opt(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::optional<bool> get_bool(const json& obj, const char* key, const std::string& prefix = "") {
  const json* v = opt(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(prefix + key, *v, "a boolean");
  return v->get<bool>();
}

std::optional<double> get_number(const json& obj, const char* key, double lo, double hi,
                                 const std::string& prefix = "") {
  const json* v = opt(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(prefix + key, *v, "a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    std::string range = "between " + json(lo).dump() + " and " + json(hi).dump();
    if (hi == std::numeric_limits<double>::max()) range = ">= " + json(lo).dump();
    if (lo == -std::numeric_limits<double>::max() && hi == std::numeric_limits<double>::max())
      range = "finite";
    bad(prefix + key, "'" + prefix + key + "' must be " + range + " (got " + v->dump() + ")");
  }
  return x;
}

std::optional<int64_t> get_int(const json& obj, const char* key, int64_t lo, int64_t hi,
                               const std::string& prefix = "") {
  const json* v = opt(obj, key);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      bad(prefix + key, "'" + prefix + key + "' is out of range (got " + v->dump() + ")");
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::nearbyint(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9e15) {
    x = int64_t(v->get<double>());
  } else {
    wrong_type(prefix + key, *v, "an integer");
  }
  if (x < lo || x > hi)
    bad(prefix + key, "'" + prefix + key + "' must be between " + std::to_string(lo) + " and " +
                          std::to_string(hi) + " (got " + std::to_string(x) + ")");
  return x;
}

const std::string* get_string(const json& obj, const char* key, const std::string& prefix = "") {
  const json* v = opt(obj, key);
  if (!v) return nullptr;
  if (!v->is_string()) wrong_type(prefix + key, *v, "a string");
  return &v->get_ref<const std::string&>();
}

constexpr double kMaxD = std::numeric_limits<double>::max();

// ---- sampling and limits shared by both endpoints -------------------------------------------------

void parse_sampling(const json& body, const ServedModel& model, generate::SamplingParams& p) {
  if (auto v = get_number(body, "temperature", 0, 1e6)) p.temperature = float(*v);
  if (auto v = get_number(body, "top_p", 0, 1)) p.top_p = float(*v);
  if (auto v = get_int(body, "top_k", 0, std::numeric_limits<int32_t>::max())) p.top_k = int32_t(*v);
  if (auto v = get_number(body, "min_p", 0, 1)) p.min_p = float(*v);
  if (auto v = get_number(body, "presence_penalty", -1e6, 1e6)) p.presence_penalty = float(*v);
  if (auto v = get_number(body, "frequency_penalty", -1e6, 1e6)) p.frequency_penalty = float(*v);
  if (auto v = get_number(body, "repeat_penalty", 1e-6, 1e6)) p.repeat_penalty = float(*v);
  if (auto v = get_int(body, "repeat_last_n", -1, std::numeric_limits<int32_t>::max()))
    p.repeat_last_n = int32_t(*v);
  // Penalties count the generated tokens (the sampler only sees those): all of them unless limited.
  else
    p.repeat_last_n = -1;
  if (auto v =
          get_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
    p.seed = uint64_t(*v);
  else
    p.seed = std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
  if (const json* lb = opt(body, "logit_bias")) {
    if (!lb->is_object()) wrong_type("logit_bias", *lb, "an object mapping token ids to biases");
    for (const auto& [key, value] : lb->items()) {
      const std::string param = "logit_bias." + key;
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != key.size() || key.empty())
        bad(param, "logit_bias keys must be token ids (got '" + key + "')");
      if (id < 0 || id >= model.n_vocab)
        bad(param, "logit_bias token id " + key + " is outside the vocabulary (0.." +
                       std::to_string(model.n_vocab - 1) + ")");
      if (!value.is_number()) wrong_type(param, value, "a number");
      const double b = value.get<double>();
      if (!std::isfinite(b) || std::fabs(b) > 1e6) bad(param, "logit_bias values must be finite numbers");
      p.logit_bias[int32_t(id)] = float(b);
    }
  }
}

std::vector<std::string> parse_stop(const json& body) {
  std::vector<std::string> stop;
  const json* v = opt(body, "stop");
  if (!v) return stop;
  if (v->is_string()) {
    stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > 16) bad("stop", "at most 16 stop strings are supported");
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) wrong_type("stop[" + std::to_string(i) + "]", (*v)[i], "a string");
      stop.push_back((*v)[i].get<std::string>());
    }
  } else {
    wrong_type("stop", *v, "a string or an array of strings");
  }
  return stop;
}

// Fields common to both endpoints that we accept only in their trivial form.
void check_common(const json& body) {
  if (const json* m = opt(body, "model"); m && !m->is_string()) wrong_type("model", *m, "a string");
  if (auto n = get_int(body, "n", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
      n && *n != 1)
    bad("n", "only n = 1 is supported (got " + std::to_string(*n) + ")", "unsupported_value");
  if (const json* so = opt(body, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", *so, "an object");
    get_bool(*so, "include_usage", "stream_options.");
  }
  get_bool(body, "stream");
  get_bool(body, "return_progress");
  get_string(body, "user");
}

void set_limits(ApiRequest& r, const json& body, const ServedModel& model, const char* prompt_param,
                int default_max) {
  const int n_prompt = int(r.gen.prompt.size());
  if (n_prompt >= model.n_ctx)
    throw ApiError(400,
                   "the prompt has " + std::to_string(n_prompt) + " tokens but the context holds " +
                       std::to_string(model.n_ctx) + " (and at least one token must be generated)",
                   prompt_param, "context_length_exceeded");
  std::optional<int64_t> max = get_int(body, "max_completion_tokens", 1, std::numeric_limits<int32_t>::max());
  const char* max_param = "max_completion_tokens";
  if (!max) {
    max = get_int(body, "max_tokens", 1, std::numeric_limits<int32_t>::max());
    max_param = "max_tokens";
  }
  const int room = model.n_ctx - n_prompt;
  if (max && *max > room)
    throw ApiError(400,
                   "this model's context holds " + std::to_string(model.n_ctx) + " tokens; you requested " +
                       std::to_string(n_prompt + *max) + " (" + std::to_string(n_prompt) +
                       " in the prompt, " + std::to_string(*max) + " for the completion)",
                   max_param, "context_length_exceeded");
  r.gen.max_tokens = max ? int(*max) : std::min(default_max, room);
  r.stream = get_bool(body, "stream").value_or(false);
  if (const json* so = opt(body, "stream_options"))
    r.include_usage = get_bool(*so, "include_usage").value_or(false);
  r.gen.report_progress = get_bool(body, "return_progress").value_or(false);
}

// ---- chat messages ---------------------------------------------------------------------------------

const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};

void check_content(const json& msg, const std::string& where, bool required) {
  const json* c = opt(msg, "content");
  if (!c) {
    if (required)
      bad(where + ".content", "'" + where + ".content' is required", "missing_required_parameter");
    return;
  }
  if (c->is_string()) return;
  if (!c->is_array()) wrong_type(where + ".content", *c, "a string or an array of content parts");
  for (size_t j = 0; j < c->size(); ++j) {
    const json& part = (*c)[j];
    const std::string pw = where + ".content[" + std::to_string(j) + "]";
    if (!part.is_object()) wrong_type(pw, part, "an object");
    const std::string* type = get_string(part, "type", pw + ".");
    if (!type) bad(pw + ".type", "'" + pw + ".type' is required", "missing_required_parameter");
    if (*type == "image_url") {
      image_url_of(part, pw);
      continue;
    }
    if (*type == "input_audio") {
      input_audio_bytes(part, pw);
      continue;
    }
    if (*type != "text")
      bad(pw + ".type",
          "content part type '" + *type + "' is not supported (text, image_url and input_audio are)",
          "unsupported_value");
    if (!get_string(part, "text", pw + "."))
      bad(pw + ".text", "'" + pw + ".text' is required", "missing_required_parameter");
  }
}

void check_tool_calls(const json& msg, const std::string& where) {
  const json* calls = opt(msg, "tool_calls");
  if (!calls) return;
  if (!calls->is_array()) wrong_type(where + ".tool_calls", *calls, "an array");
  for (size_t k = 0; k < calls->size(); ++k) {
    const json& call = (*calls)[k];
    const std::string cw = where + ".tool_calls[" + std::to_string(k) + "]";
    if (!call.is_object()) wrong_type(cw, call, "an object");
    get_string(call, "id", cw + ".");
    if (const std::string* t = get_string(call, "type", cw + "."); t && *t != "function")
      bad(cw + ".type", "tool call type must be 'function'", "unsupported_value");
    const json* fn = opt(call, "function");
    if (!fn) bad(cw + ".function", "'" + cw + ".function' is required", "missing_required_parameter");
    if (!fn->is_object()) wrong_type(cw + ".function", *fn, "an object");
    const std::string* name = get_string(*fn, "name", cw + ".function.");
    if (!name || name->empty())
      bad(cw + ".function.name", "'" + cw + ".function.name' is required", "missing_required_parameter");
    if (const json* args = opt(*fn, "arguments"); args && !args->is_string() && !args->is_object())
      wrong_type(cw + ".function.arguments", *args, "a string or an object");
  }
}

void check_messages(const json& body) {
  const json* msgs = opt(body, "messages");
  if (!msgs) bad("messages", "'messages' is required", "missing_required_parameter");
  if (!msgs->is_array()) wrong_type("messages", *msgs, "an array");
  if (msgs->empty()) bad("messages", "'messages' must not be empty");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) wrong_type(where, m, "an object");
    const std::string* role = get_string(m, "role", where + ".");
    if (!role) bad(where + ".role", "'" + where + ".role' is required", "missing_required_parameter");
    if (!kRoles.count(*role))
      bad(where + ".role",
          "unknown role '" + *role + "' (expected system, developer, user, assistant or tool)");
    const bool assistant = *role == "assistant";
    check_content(m, where, !assistant);
    if (assistant) {
      check_tool_calls(m, where);
      if (!opt(m, "content") && !opt(m, "tool_calls"))
        bad(where + ".content", "an assistant message needs 'content' or 'tool_calls'",
            "missing_required_parameter");
      get_string(m, "reasoning_content", where + ".");
    } else if (opt(m, "tool_calls")) {
      bad(where + ".tool_calls", "only assistant messages carry tool calls");
    }
    if (*role == "tool") get_string(m, "tool_call_id", where + ".");
    get_string(m, "name", where + ".");
  }
}

// Tool declarations; returns the function names.
std::vector<std::string> check_tools(const json& body) {
  std::vector<std::string> names;
  const json* tools = opt(body, "tools");
  if (!tools) return names;
  if (!tools->is_array()) wrong_type("tools", *tools, "an array");
  for (size_t t = 0; t < tools->size(); ++t) {
    const json& tool = (*tools)[t];
    const std::string where = "tools[" + std::to_string(t) + "]";
    if (!tool.is_object()) wrong_type(where, tool, "an object");
    const std::string* type = get_string(tool, "type", where + ".");
    if (type && *type != "function")
      bad(where + ".type", "tool type must be 'function'", "unsupported_value");
    const json* fn = opt(tool, "function");
    if (!fn) bad(where + ".function", "'" + where + ".function' is required", "missing_required_parameter");
    if (!fn->is_object()) wrong_type(where + ".function", *fn, "an object");
    const std::string* name = get_string(*fn, "name", where + ".function.");
    if (!name || name->empty())
      bad(where + ".function.name", "'" + where + ".function.name' is required",
          "missing_required_parameter");
    get_string(*fn, "description", where + ".function.");
    if (const json* p = opt(*fn, "parameters"); p && !p->is_object())
      wrong_type(where + ".function.parameters", *p, "an object (a JSON schema)");
    get_bool(*fn, "strict", where + ".function.");
    names.push_back(*name);
  }
  return names;
}

bool thinking_requested(const json& body) {
  bool on = false;
  if (const json* kw = opt(body, "chat_template_kwargs")) {
    if (!kw->is_object()) wrong_type("chat_template_kwargs", *kw, "an object");
    if (auto v = get_bool(*kw, "enable_thinking", "chat_template_kwargs.")) on = *v;
  }
  if (const std::string* effort = get_string(body, "reasoning_effort")) {
    if (*effort == "none" || *effort == "minimal")
      on = false;
    else if (*effort == "low" || *effort == "medium" || *effort == "high")
      on = true;
    else
      bad("reasoning_effort", "'reasoning_effort' must be one of none, minimal, low, medium, high");
  }
  if (auto v = get_bool(body, "think")) on = *v;
  return on;
}

std::string random_hex(int n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < n; ++i) s += digits[rng() & 15];
  return s;
}

}  // namespace

constexpr int kMaxJsonDepth = 64;

size_t invalid_utf8_offset(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = uint8_t(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0, min = 0;
    if ((b & 0xE0) == 0xC0)
      len = 2, cp = b & 0x1F, min = 0x80;
    else if ((b & 0xF0) == 0xE0)
      len = 3, cp = b & 0x0F, min = 0x800;
    else if ((b & 0xF8) == 0xF0)
      len = 4, cp = b & 0x07, min = 0x10000;
    else
      return i;
    if (i + len > s.size()) return i;
    for (int k = 1; k < len; ++k) {
      const auto c = uint8_t(s[i + k]);
      if ((c & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string::npos;
}

json parse_body(std::string_view body) {
  if (const size_t bad_at = invalid_utf8_offset(body); bad_at != std::string::npos)
    throw ApiError(400, "the request body is not valid UTF-8 (byte " + std::to_string(bad_at) + ")", "",
                   "invalid_utf8");
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    throw ApiError(400, "the request body is empty; expected a JSON object", "", "invalid_json");
  // The chat renderer recurses into tool schemas and arguments: bound the nesting up front.
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw ApiError(400, "the request body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels",
                       "", "invalid_json");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  try {
    return json::parse(body);
  } catch (const json::parse_error& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what(), "", "invalid_json");
  }
}

std::string new_response_id(const std::string& prefix) { return prefix + random_hex(24); }

ChatPrompt render_chat_prompt(const json& body) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object", "", "invalid_type");
  check_messages(body);
  const std::vector<std::string> tool_names = check_tools(body);
  ChatPrompt out;
  out.thinking = thinking_requested(body);

  // tool_choice: "none" hides the tools; a named function (or "required" with one tool) is forced
  // by opening its call in the prompt; "auto" and "required" with several tools leave it to the model.
  std::string forced;
  bool hide_tools = false;
  if (const json* tc = opt(body, "tool_choice")) {
    if (tc->is_string()) {
      const std::string& s = tc->get_ref<const std::string&>();
      out.tool_choice = s;
      if (s == "none")
        hide_tools = true;
      else if (s == "required" && tool_names.size() == 1)
        forced = tool_names[0];
      else if (s != "auto" && s != "required")
        bad("tool_choice", "'tool_choice' must be none, auto, required or {\"type\":\"function\",...}");
      if (s == "required" && tool_names.empty()) bad("tool_choice", "tool_choice 'required' needs 'tools'");
    } else if (tc->is_object()) {
      const json* fn = opt(*tc, "function");
      const std::string* name =
          fn && fn->is_object() ? get_string(*fn, "name", "tool_choice.function.") : nullptr;
      if (!name)
        bad("tool_choice.function.name", "'tool_choice.function.name' is required",
            "missing_required_parameter");
      if (std::find(tool_names.begin(), tool_names.end(), *name) == tool_names.end())
        bad("tool_choice.function.name", "tool_choice names '" + *name + "', which is not in 'tools'");
      forced = *name;
      out.tool_choice = "function";
    } else {
      wrong_type("tool_choice", *tc, "a string or an object");
    }
  }
  get_bool(body, "parallel_tool_calls");
  if (const json* rf = opt(body, "response_format")) {
    if (!rf->is_object()) wrong_type("response_format", *rf, "an object");
    const std::string* type = get_string(*rf, "type", "response_format.");
    if (type && *type != "text" && *type != "json_object" && *type != "json_schema")
      bad("response_format.type",
          "response_format '" + *type + "' is not supported (text, json_object or json_schema)",
          "unsupported_value");
  }
  if (auto lp = get_bool(body, "logprobs"); lp && *lp)
    bad("logprobs", "logprobs are not supported", "unsupported_value");
  if (opt(body, "top_logprobs")) bad("top_logprobs", "logprobs are not supported", "unsupported_value");

  json messages = text::normalize_tool_call_arguments(body["messages"]);
  // image_url parts: the template's image placeholder, the bytes kept in order for the projector.
  for (size_t i = 0; i < messages.size(); ++i) {
    json* content =
        messages[i].is_object() && messages[i].contains("content") ? &messages[i]["content"] : nullptr;
    if (!content || !content->is_array()) continue;
    for (size_t j = 0; j < content->size(); ++j) {
      json& part = (*content)[j];
      if (!part.is_object()) continue;
      const std::string pw = "messages[" + std::to_string(i) + "].content[" + std::to_string(j) + "]";
      if (part.value("type", "") == "input_audio") {
        // The template's audio placeholder; the WAV bytes kept in order for the audio tower.
        out.audio.push_back(input_audio_bytes(part, pw));
        out.audio_params.push_back(pw);
        part = json{{"type", "audio"}};
        continue;
      }
      if (part.value("type", "") != "image_url") continue;
      out.images.push_back(data_uri_bytes(image_url_of(part, pw), pw + ".image_url.url"));
      out.image_params.push_back(pw);
      part = json{{"type", "image"}};
    }
  }
  const json tools = hide_tools || !opt(body, "tools") ? json() : body["tools"];
  try {
    out.text = text::render_chat(messages, tools, /*add_generation_prompt=*/true, out.thinking);
  } catch (const std::invalid_argument& e) {
    throw ApiError(400, e.what(), "messages");
  }
  if (!forced.empty()) {
    out.forced_tool = forced;
    out.assistant_prefix = "<|tool_call>call:" + forced + "{";
    out.text += out.assistant_prefix;
  }
  return out;
}

nlohmann::ordered_json parse_body_ordered(std::string_view body) {
  try {
    return nlohmann::ordered_json::parse(body);
  } catch (const nlohmann::ordered_json::parse_error& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what(), "", "invalid_json");
  }
}

namespace {
// response_format json_object / json_schema: the grammar the completion must follow (null for text).
// A schema that cannot be compiled is a 400 naming the schema path. The schema is read from the
// body parsed in order, so properties are written in the request's order (nlohmann::json would
// sort them by name).
std::shared_ptr<generate::GrammarConstraint> response_format_constraint(const json& body,
                                                                        const nlohmann::ordered_json& ordered,
                                                                        const text::Tokenizer& tok) {
  namespace gr = generate::grammar;
  const json* rf = opt(body, "response_format");
  if (!rf) return nullptr;
  if (!rf->is_object()) wrong_type("response_format", *rf, "an object");
  const std::string* type = get_string(*rf, "type", "response_format.");
  if (!type || *type == "text") return nullptr;
  std::string gbnf;
  if (*type == "json_object") {
    gbnf = gr::json_object_gbnf();
  } else if (*type == "json_schema") {
    const json* js = opt(*rf, "json_schema");
    if (!js || !js->is_object())
      bad("response_format.json_schema", "'response_format.json_schema' must be an object",
          "missing_required_parameter");
    const json* schema = opt(*js, "schema");
    if (!schema)
      bad("response_format.json_schema.schema", "'response_format.json_schema.schema' is required",
          "missing_required_parameter");
    try {
      gbnf = gr::json_schema_to_gbnf(ordered.at("response_format").at("json_schema").at("schema"));
    } catch (const gr::SchemaError& e) {
      throw ApiError(400, std::string("response_format.json_schema.schema: ") + e.what(),
                     "response_format.json_schema.schema");
    }
  } else {
    bad("response_format.type", "response_format '" + *type + "' is not supported", "unsupported_value");
  }
  try {
    auto grammar = std::make_shared<gr::Grammar>(gr::parse_gbnf(gbnf));
    return std::make_shared<generate::GrammarConstraint>(grammar, gr::TokenTrie::shared_for(tok));
  } catch (const gr::GrammarError& e) {
    throw ApiError(400, std::string("response_format: ") + e.what(), "response_format");
  }
}

// Tools with strict: true: the grammar of their calls (generate/grammar/tool_call_grammar.h),
// applied lazily from each <|tool_call> token with tool_choice auto, from the first answer token
// with required (several tools: the answer must open a call), or inside the call the prompt opened
// (a named function, or required with one tool; the grammar starts after "call:NAME{"). Every
// callable tool is in the grammar, the non-strict ones with free arguments, so that calling them
// stays possible. Null when no strict tool can be called.
std::shared_ptr<generate::GrammarConstraint> tool_call_constraint(const json& body,
                                                                  const nlohmann::ordered_json& ordered,
                                                                  const ChatPrompt& prompt,
                                                                  const text::Tokenizer& tok) {
  namespace gr = generate::grammar;
  const json* tools = opt(body, "tools");
  if (!tools || prompt.tool_choice == "none") return nullptr;
  static const nlohmann::ordered_json kNoArguments = {
      {"type", "object"}, {"properties", nlohmann::ordered_json::object()}, {"additionalProperties", false}};
  std::vector<gr::ToolGrammarSpec> specs;
  bool any_strict = false;
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& fn = (*tools)[i]["function"];
    const std::string where = "tools[" + std::to_string(i) + "].function";
    gr::ToolGrammarSpec spec;
    spec.name = fn["name"].get<std::string>();
    if (!prompt.forced_tool.empty() && spec.name != prompt.forced_tool) continue;
    spec.name_path = where + ".name";
    const json* strict = opt(fn, "strict");
    if (strict && strict->get<bool>()) {
      any_strict = true;
      const nlohmann::ordered_json& ofn = ordered.at("tools").at(i).at("function");
      const auto p = ofn.find("parameters");
      spec.parameters = p == ofn.end() || p->is_null() ? &kNoArguments : &*p;
      spec.path = where + ".parameters";
    }
    specs.push_back(std::move(spec));
  }
  if (!any_strict) return nullptr;
  const auto trigger = tok.find_token("<|tool_call>");
  if (!trigger)
    bad("tools", "strict tools need the <|tool_call> token, which this model's vocabulary lacks",
        "unsupported_value");
  std::string gbnf;
  try {
    gbnf = gr::gemma_tool_call_gbnf(specs);
  } catch (const gr::SchemaError& e) {
    throw ApiError(400, e.what(), e.path);
  }
  try {
    const gr::TokenLookup lookup = [&tok](std::string_view text) { return tok.find_token(text); };
    auto grammar = std::make_shared<gr::Grammar>(gr::parse_gbnf(gbnf, "root", lookup));
    auto c = std::make_shared<generate::GrammarConstraint>(grammar, gr::TokenTrie::shared_for(tok));
    generate::GrammarConstraint::Trigger t;
    t.token = *trigger;
    t.required = prompt.tool_choice != "auto";
    if (!prompt.forced_tool.empty()) t.opened = "call:" + prompt.forced_tool + "{";
    c->set_trigger(std::move(t));
    return c;
  } catch (const gr::GrammarError& e) {
    throw ApiError(400, std::string("tools: ") + e.what(), "tools");
  }
}
}  // namespace

ApiRequest parse_chat_request(const json& body, const nlohmann::ordered_json& ordered,
                              const text::Tokenizer& tok, const ServedModel& model) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object", "", "invalid_type");
  check_common(body);
  ChatPrompt prompt = render_chat_prompt(body);
  ApiRequest r;
  r.prompt_text = prompt.text;
  r.gen.prompt = tok.encode(prompt.text, /*add_bos=*/false, /*parse_special=*/true);
  if (!prompt.images.empty() || !prompt.audio.empty()) {
    if (!prompt.images.empty() && !model.encode_image)
      throw ApiError(400, "this server has no projector for images (start it with gem4 serve --mmproj FILE)",
                     prompt.image_params[0], "unsupported_value");
    if (!prompt.audio.empty() && !model.encode_audio)
      throw ApiError(400,
                     "this server has no audio tower (start it with gem4 serve --mmproj FILE holding one)",
                     prompt.audio_params[0], "unsupported_value");
    // Images and clips each in prompt order: expand_media matches each kind's placeholders in order.
    std::vector<generate::MediaInput> media;
    const auto encode = [&](const auto& fn, const std::string& bytes, const std::string& where) {
      try {
        media.push_back(fn(bytes, where));
      } catch (const ApiError&) {
        throw;
      } catch (const std::exception& e) {
        throw ApiError(400, e.what(), where);
      }
    };
    for (size_t k = 0; k < prompt.images.size(); ++k)
      encode(model.encode_image, prompt.images[k], prompt.image_params[k]);
    for (size_t k = 0; k < prompt.audio.size(); ++k)
      encode(model.encode_audio, prompt.audio[k], prompt.audio_params[k]);
    try {
      r.gen.media = generate::expand_media(r.gen.prompt, tok, media);
    } catch (const std::invalid_argument& e) {
      throw ApiError(400, e.what(), "messages");
    }
  }
  r.gen.parse_output = true;
  r.gen.assistant_prefix = prompt.assistant_prefix;
  r.gen.tool_call_id_prefix = "call_" + random_hex(8) + "_";
  r.gen.stop = parse_stop(body);
  parse_sampling(body, model, r.gen.sampling);
  set_limits(r, body, model, "messages", model.n_ctx);
  r.gen.constraint = response_format_constraint(body, ordered, tok);
  if (auto calls = tool_call_constraint(body, ordered, prompt, tok)) {
    if (r.gen.constraint)
      bad("response_format", "response_format together with strict tools is not supported",
          "unsupported_value");
    r.gen.constraint = std::move(calls);
  }
  // The reasoning stays free; the schema applies to the answer after it.
  if (r.gen.constraint && prompt.thinking) generate::allow_gemma_thinking(*r.gen.constraint, tok);
  return r;
}

ApiRequest parse_completion_request(const json& body, const nlohmann::ordered_json& ordered,
                                    const text::Tokenizer& tok, const ServedModel& model) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object", "", "invalid_type");
  check_common(body);
  if (auto echo = get_bool(body, "echo"); echo && *echo)
    bad("echo", "echo is not supported", "unsupported_value");
  if (opt(body, "suffix")) bad("suffix", "suffix is not supported", "unsupported_value");
  if (opt(body, "logprobs")) bad("logprobs", "logprobs are not supported", "unsupported_value");
  if (auto b = get_int(body, "best_of", 1, 1 << 20); b && *b != 1)
    bad("best_of", "only best_of = 1 is supported", "unsupported_value");
  const json* p = opt(body, "prompt");
  if (!p) bad("prompt", "'prompt' is required", "missing_required_parameter");
  ApiRequest r;
  auto encode_text = [&](const std::string& text) {
    std::vector<int32_t> ids =
        tok.encode(text, tok.add_bos_default() && tok.bos() >= 0, /*parse_special=*/true);
    if (ids.size() >= 2 && ids[0] == tok.bos() && ids[1] == tok.bos())
      ids.erase(ids.begin());  // "<bos>" typed in
    return ids;
  };
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    r.gen.prompt = encode_text(r.prompt_text);
  } else if (p->is_array()) {
    if (p->empty()) bad("prompt", "'prompt' must not be empty");
    if ((*p)[0].is_string()) {
      if (p->size() != 1) bad("prompt", "only one prompt per request is supported", "unsupported_value");
      r.prompt_text = (*p)[0].get<std::string>();
      r.gen.prompt = encode_text(r.prompt_text);
    } else {
      for (size_t i = 0; i < p->size(); ++i) {
        const json& t = (*p)[i];
        const std::string param = "prompt[" + std::to_string(i) + "]";
        if (!t.is_number_integer()) wrong_type(param, t, "a token id (integer)");
        const int64_t id =
            t.is_number_unsigned() && t.get<uint64_t>() > uint64_t(INT32_MAX) ? -1 : t.get<int64_t>();
        if (id < 0 || id >= model.n_vocab)
          bad(param, "token id " + t.dump() + " is outside the vocabulary (0.." +
                         std::to_string(model.n_vocab - 1) + ")");
        r.gen.prompt.push_back(int32_t(id));
      }
    }
  } else {
    wrong_type("prompt", *p, "a string, an array of token ids or an array with one string");
  }
  if (r.gen.prompt.empty()) bad("prompt", "the prompt gives no tokens");
  r.gen.stop = parse_stop(body);
  parse_sampling(body, model, r.gen.sampling);
  set_limits(r, body, model, "prompt", 16);  // OpenAI's default max_tokens for completions
  r.gen.constraint = response_format_constraint(body, ordered, tok);
  return r;
}

}  // namespace gem4::server
