// Native rendering of the Gemma 4 chat template. Read this file beside the .jinja: the functions below
// are its macros (format_parameters, format_function_declaration, format_argument, strip_thinking,
// format_tool_response_block) and render_chat is its main body, branch for branch.
#include "text/chat_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

namespace gem4::text {
namespace {

using json = nlohmann::json;

constexpr std::string_view kQuote = "<|\"|>";  // the template's string delimiter token

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw std::invalid_argument("render_chat: " + where + ": " + what);
}

// ---- Jinja (Python) value semantics -------------------------------------------------------------
// A missing key is Jinja's Undefined; we represent it as nullptr. Looking a key up in something that
// is not a mapping also gives Undefined (Jinja2 swallows the TypeError).

const json* field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}
const json* field(const json* obj, const char* key) { return obj ? field(*obj, key) : nullptr; }

// Python truthiness: Undefined, None, false, 0, "", [] and {} are false.
bool truthy(const json* v) {
  if (!v) return false;
  switch (v->type()) {
    case json::value_t::null:
      return false;
    case json::value_t::boolean:
      return v->get<bool>();
    case json::value_t::number_integer:
      return v->get<int64_t>() != 0;
    case json::value_t::number_unsigned:
      return v->get<uint64_t>() != 0;
    case json::value_t::number_float:
      return v->get<double>() != 0.0;
    case json::value_t::string:
      return !v->get_ref<const std::string&>().empty();
    case json::value_t::array:
    case json::value_t::object:
      return !v->empty();
    default:
      return true;
  }
}

// Python repr(float): the shortest digits that round-trip, in fixed notation when the decimal
// exponent is in [-4, 16) (always with a fractional part), otherwise d.ddde+XX.
std::string python_float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const size_t e = s.find('e');
  std::string digits = s.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp10 = std::stoi(s.substr(e + 1));
  std::string out;
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 >= 0) {
      std::string int_part = digits.substr(0, std::min<size_t>(digits.size(), exp10 + 1));
      int_part.append(exp10 + 1 - int_part.size(), '0');
      std::string frac = digits.size() > size_t(exp10 + 1) ? digits.substr(exp10 + 1) : "0";
      out = int_part + "." + frac;
    } else {
      out = "0." + std::string(-exp10 - 1, '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += ebuf;
  }
  return sign + out;
}

std::string python_repr(const json& v);

// Python str(): what {{ value }} prints. Undefined prints as "".
std::string python_str(const json* v) {
  if (!v) return "";
  switch (v->type()) {
    case json::value_t::string:
      return v->get<std::string>();
    case json::value_t::null:
      return "None";
    case json::value_t::boolean:
      return v->get<bool>() ? "True" : "False";
    case json::value_t::number_integer:
      return std::to_string(v->get<int64_t>());
    case json::value_t::number_unsigned:
      return std::to_string(v->get<uint64_t>());
    case json::value_t::number_float:
      return python_float_repr(v->get<double>());
    default:
      return python_repr(*v);
  }
}

// Python repr() of a string: single quotes unless the text has a ' and no ".
std::string python_string_repr(const std::string& s) {
  const bool use_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = use_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == q) {
      out += '\\';
      out += char(c);
    } else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + q;
}

std::string python_repr(const json& v) {
  if (v.is_string()) return python_string_repr(v.get<std::string>());
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + python_repr(v[i]);
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      out += (first ? "" : ", ") + python_string_repr(it.key()) + ": " + python_repr(it.value());
      first = false;
    }
    return out + "}";
  }
  return python_str(&v);
}

// The |upper filter. ASCII only: JSON-schema type names are ASCII.
std::string upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = char(c - 'a' + 'A');
  return s;
}
std::string upper(const json* v) { return upper(python_str(v)); }

// Decodes the code point that starts at s[i] (or ends at s[end-1] when backward) for whitespace checks.
bool python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
         cp == 0x205f || cp == 0x3000;
}

// Length of the whitespace code point at the front of s (0 if none).
size_t leading_space_len(std::string_view s) {
  if (s.empty()) return 0;
  const auto b0 = static_cast<unsigned char>(s[0]);
  if (b0 < 0x80) return python_space(b0) ? 1 : 0;
  size_t n = b0 >= 0xf0 ? 4 : b0 >= 0xe0 ? 3 : b0 >= 0xc0 ? 2 : 0;
  if (n == 0 || n > s.size()) return 0;
  uint32_t cp = b0 & (0x7f >> n);
  for (size_t i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3f);
  }
  return python_space(cp) ? n : 0;
}

// Length of the whitespace code point at the back of s (0 if none).
size_t trailing_space_len(std::string_view s) {
  size_t start = s.size();
  while (start > 0 && s.size() - start < 4 && (static_cast<unsigned char>(s[start - 1]) & 0xc0) == 0x80)
    --start;
  if (start == 0) return 0;
  --start;
  const size_t n = leading_space_len(s.substr(start));
  return n == s.size() - start ? n : 0;
}

// The |trim filter: Python str.strip() (Unicode whitespace).
std::string trim(std::string_view s) {
  while (size_t n = leading_space_len(s)) s.remove_prefix(n);
  while (size_t n = trailing_space_len(s)) s.remove_suffix(n);
  return std::string(s);
}

// The |dictsort filter: items by key, case-insensitively (Jinja2's default).
std::vector<std::pair<std::string, const json*>> dictsort(const json& obj) {
  std::vector<std::pair<std::string, const json*>> items;
  for (auto it = obj.begin(); it != obj.end(); ++it) items.emplace_back(it.key(), &it.value());
  auto lower = [](std::string s) {
    for (char& c : s)
      if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    return s;
  };
  // nlohmann::json keeps keys byte-sorted, so a stable sort breaks case-only ties by byte order.
  std::stable_sort(items.begin(), items.end(),
                   [&](const auto& a, const auto& b) { return lower(a.first) < lower(b.first); });
  return items;
}

// What a Jinja for-loop iterates: list elements, or a string's characters.
std::vector<json> iterate(const json& v, const std::string& where) {
  if (v.is_array()) return std::vector<json>(v.begin(), v.end());
  if (v.is_string()) {
    std::vector<json> chars;
    const std::string& s = v.get_ref<const std::string&>();
    for (size_t i = 0; i < s.size();) {
      size_t n = 1;
      while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xc0) == 0x80) ++n;
      chars.emplace_back(s.substr(i, n));
      i += n;
    }
    return chars;
  }
  fail(where, "expected an array");
}

// ---- the template's macros ----------------------------------------------------------------------

void quoted(std::string& out, std::string_view s) {
  out += kQuote;
  out += s;
  out += kQuote;
}

// format_argument(argument, escape_keys): strings in <|"|>, mappings with sorted keys, lists, and
// anything else printed as Python would (numbers; None for null). nullptr = Undefined prints "".
void format_argument(std::string& out, const json* v, bool escape_keys) {
  if (!v) return;
  if (v->is_string()) {
    quoted(out, v->get_ref<const std::string&>());
  } else if (v->is_boolean()) {
    out += v->get<bool>() ? "true" : "false";
  } else if (v->is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, value] : dictsort(*v)) {
      if (!first) out += ',';
      first = false;
      if (escape_keys)
        quoted(out, key);
      else
        out += key;
      out += ':';
      format_argument(out, value, escape_keys);
    }
    out += '}';
  } else if (v->is_array()) {
    out += '[';
    for (size_t i = 0; i < v->size(); ++i) {
      if (i) out += ',';
      format_argument(out, &(*v)[i], escape_keys);
    }
    out += ']';
  } else {
    out += python_str(v);
  }
}

void format_required_list(std::string& out, const json& list, const std::string& where) {
  out += "required:[";
  const std::vector<json> items = iterate(list, where);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ',';
    quoted(out, python_str(&items[i]));
  }
  out += ']';
}

// format_parameters(properties): one entry per property, sorted, skipping the JSON-schema keywords
// (the macro is also applied to a schema itself, where those keys are not properties).
void format_parameters(std::string& out, const json& properties, const std::string& where) {
  static const char* const kStandardKeys[] = {"description", "type", "properties", "required", "nullable"};
  bool found_first = false;
  for (const auto& [key, value_ptr] : dictsort(properties)) {
    if (std::find(std::begin(kStandardKeys), std::end(kStandardKeys), key) != std::end(kStandardKeys))
      continue;
    const json& value = *value_ptr;
    const std::string at = where + "." + key;
    if (found_first) out += ',';
    found_first = true;
    out += key + ":{";
    bool add_comma = false;
    auto comma = [&] {
      if (add_comma) out += ',';
      add_comma = true;
    };
    if (const json* desc = field(value, "description"); truthy(desc)) {
      out += "description:";
      quoted(out, python_str(desc));
      add_comma = true;
    }
    const std::string type = upper(field(value, "type"));
    if (type == "STRING") {
      if (const json* e = field(value, "enum"); truthy(e)) {
        comma();
        out += "enum:";
        format_argument(out, e, true);
      }
    } else if (type == "ARRAY") {
      const json* items = field(value, "items");
      if (items && items->is_object() && !items->empty()) {
        comma();
        out += "items:{";
        bool items_first = false;
        for (const auto& [item_key, item_value] : dictsort(*items)) {
          if (item_value->is_null()) continue;
          if (items_first) out += ',';
          items_first = true;
          if (item_key == "properties") {
            out += "properties:{";
            if (item_value->is_object()) format_parameters(out, *item_value, at + ".items.properties");
            out += '}';
          } else if (item_key == "required") {
            format_required_list(out, *item_value, at + ".items.required");
          } else if (item_key == "type") {
            out += "type:";
            if (item_value->is_string()) {
              const json t = upper(item_value->get<std::string>());
              format_argument(out, &t, true);
            } else {
              json list = json::array();
              for (const json& t : iterate(*item_value, at + ".items.type")) list.push_back(upper(&t));
              format_argument(out, &list, true);
            }
          } else {
            out += item_key + ":";
            format_argument(out, item_value, true);
          }
        }
        out += '}';
      }
    }
    if (truthy(field(value, "nullable"))) {
      comma();
      out += "nullable:true";
    }
    if (type == "OBJECT") {
      const json* props = field(value, "properties");
      if (props && props->is_object()) {
        comma();
        out += "properties:{";
        format_parameters(out, *props, at + ".properties");
        out += '}';
      } else if (value.is_object()) {
        comma();
        out += "properties:{";
        format_parameters(out, value, at);
        out += '}';
      }
      if (const json* req = field(value, "required"); truthy(req)) {
        comma();
        format_required_list(out, *req, at + ".required");
      }
    }
    comma();
    out += "type:";
    quoted(out, type);
    out += '}';
  }
}

// format_function_declaration(tool). Note the template's own quirks, kept on purpose: the
// parameters block is only closed by its `type`, and leaves a trailing comma before it.
std::string format_function_declaration(const json& tool, size_t index) {
  const std::string where = "tools[" + std::to_string(index) + "]";
  const json* fn = field(tool, "function");
  if (!fn || !fn->is_object()) fail(where + ".function", "expected an object");
  const json* name = field(fn, "name");
  if (!name || !name->is_string()) fail(where + ".function.name", "expected a string");

  std::string out = "declaration:" + name->get<std::string>() + "{description:";
  quoted(out, python_str(field(fn, "description")));
  const json* params = field(fn, "parameters");
  if (truthy(params)) {
    if (!params->is_object()) fail(where + ".function.parameters", "expected an object");
    out += ",parameters:{";
    if (const json* props = field(params, "properties"); truthy(props)) {
      if (!props->is_object()) fail(where + ".function.parameters.properties", "expected an object");
      out += "properties:{";
      format_parameters(out, *props, where + ".function.parameters.properties");
      out += "},";
    }
    if (const json* req = field(params, "required"); truthy(req)) {
      format_required_list(out, *req, where + ".function.parameters.required");
      out += ',';
    }
    if (const json* type = field(params, "type"); truthy(type)) {
      out += "type:";
      quoted(out, upper(type));
      out += '}';
    }
  }
  if (fn->contains("response")) {
    const json& response = (*fn)["response"];
    out += ",response:{";
    if (const json* desc = field(response, "description"); truthy(desc)) {
      out += "description:";
      quoted(out, python_str(desc));
      out += ',';
    }
    if (upper(field(response, "type")) == "OBJECT") {
      out += "type:";
      quoted(out, "OBJECT");
      out += '}';
    }
  }
  out += '}';
  return out;
}

// strip_thinking(text): drops every <|channel>...<channel|> block, then trims.
std::string strip_thinking(std::string_view text) {
  constexpr std::string_view kOpen = "<|channel>", kClose = "<channel|>";
  std::string result;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(kClose, start);
    std::string_view part = text.substr(start, end == std::string_view::npos ? end : end - start);
    const size_t open = part.find(kOpen);
    result += part.substr(0, open);
    if (end == std::string_view::npos) break;
    start = end + kClose.size();
  }
  return trim(result);
}

// format_tool_response_block(name, response). nullptr = Undefined response.
void format_tool_response_block(std::string& out, const std::string& name, const json* response) {
  out += "<|tool_response>response:" + name + "{";
  if (response && response->is_object()) {
    bool first = true;
    for (const auto& [key, value] : dictsort(*response)) {
      if (!first) out += ',';
      first = false;
      out += key + ":";
      format_argument(out, value, false);
    }
  } else {
    out += "value:";
    format_argument(out, response, false);
  }
  out += "}<tool_response|>";
}

// ---- message checks -----------------------------------------------------------------------------

bool known_role(const std::string& role) {
  return role == "system" || role == "developer" || role == "user" || role == "assistant" ||
         role == "model" || role == "tool";
}

void check_optional_string(const json& msg, const char* key, const std::string& where) {
  const json* v = field(msg, key);
  if (v && !v->is_null() && !v->is_string()) fail(where + "." + key, "expected a string or null");
}

void check_message(const json& msg, size_t i) {
  const std::string where = "messages[" + std::to_string(i) + "]";
  if (!msg.is_object()) fail(where, "expected an object");
  const json* role = field(msg, "role");
  if (!role) fail(where + ".role", "missing");
  if (!role->is_string()) fail(where + ".role", "expected a string");
  if (!known_role(role->get<std::string>()))
    fail(where + ".role", "unknown role \"" + role->get<std::string>() +
                              "\" (expected system, developer, user, assistant, model or tool)");
  const bool is_tool = *role == "tool";

  const json* content = field(msg, "content");
  if (content && content->is_array()) {
    for (size_t p = 0; p < content->size(); ++p) {
      const std::string part_where = where + ".content[" + std::to_string(p) + "]";
      const json& part = (*content)[p];
      if (!part.is_object()) fail(part_where, "expected an object");
      const json* type = field(part, "type");
      if (!is_tool && (!type || !type->is_string())) fail(part_where + ".type", "expected a string");
      const json* text = field(part, "text");
      if (type && *type == "text" && text && !text->is_string() && !(is_tool && text->is_null()))
        fail(part_where + ".text", "expected a string");
      if (!is_tool && type && *type == "text" && !text) fail(part_where + ".text", "missing");
    }
  } else if (content && !is_tool && !content->is_string() && !content->is_null()) {
    fail(where + ".content", "expected a string, an array of parts or null");
  }

  check_optional_string(msg, "reasoning", where);
  check_optional_string(msg, "reasoning_content", where);
  check_optional_string(msg, "name", where);

  if (const json* calls = field(msg, "tool_calls"); calls && !calls->is_null()) {
    if (!calls->is_array()) fail(where + ".tool_calls", "expected an array");
    for (size_t c = 0; c < calls->size(); ++c) {
      const std::string call_where = where + ".tool_calls[" + std::to_string(c) + "]";
      const json* fn = field((*calls)[c], "function");
      if (!fn || !fn->is_object()) fail(call_where + ".function", "expected an object");
      const json* name = field(fn, "name");
      if (!name || !name->is_string()) fail(call_where + ".function.name", "expected a string");
      const json* args = field(fn, "arguments");
      if (args && !args->is_null() && !args->is_object() && !args->is_string())
        fail(call_where + ".function.arguments", "expected an object, a JSON string or null");
    }
  }
  if (const json* responses = field(msg, "tool_responses"); responses && !responses->is_null()) {
    if (!responses->is_array()) fail(where + ".tool_responses", "expected an array");
    for (size_t r = 0; r < responses->size(); ++r) {
      const std::string resp_where = where + ".tool_responses[" + std::to_string(r) + "]";
      if (!(*responses)[r].is_object()) fail(resp_where, "expected an object");
      check_optional_string((*responses)[r], "name", resp_where);
    }
  }
}

std::string role_of(const json& msg) { return msg["role"].get<std::string>(); }

// The text of a system/developer message. The template pipes the content straight into |trim, which
// for a list of parts would print the list's Python repr; we take the text parts instead.
std::string system_text(const json& msg) {
  const json* content = field(msg, "content");
  if (!content || content->is_null()) return "";
  if (content->is_string()) return content->get<std::string>();
  std::string text;
  for (const json& part : *content)
    if (part["type"] == "text") text += part["text"].get<std::string>();
  return text;
}

// What the last rendered piece was; decides how a turn ends and whether a generation prompt follows.
enum class Last { kNone, kThink, kToolDecl, kToolCall, kToolResponse, kImage, kAudio, kVideo };

// The name a tool message answers to: its tool_call_id matched against the calling message's ids
// (the last match wins, as in the template; a missing id on both sides counts as a match).
std::string tool_response_name(const json& tool_msg, const json& tool_calls) {
  const json* name = field(tool_msg, "name");
  // The template has name = None here when the message has no "name"; Python would then fail on
  // 'response:' + None. We print 'unknown', the default the template clearly intends.
  std::string result = name && name->is_string() ? name->get<std::string>() : "unknown";
  const json* id = field(tool_msg, "tool_call_id");
  const json want = id ? *id : json();
  for (const json& tc : tool_calls) {
    const json* tc_id = field(tc, "id");
    if ((tc_id ? *tc_id : json()) == want) result = tc["function"]["name"].get<std::string>();
  }
  return result;
}

void render_tool_message_body(std::string& out, const std::string& name, const json& tool_msg) {
  const json* body = field(tool_msg, "content");
  if (!body) {
    const json null_body;  // .get('content') on a message without content is None
    format_tool_response_block(out, name, &null_body);
  } else if (body->is_array()) {
    std::string text;
    for (const json& part : *body)
      if (const json* type = field(part, "type"); type && *type == "text")
        if (const json* t = field(part, "text"); t && t->is_string()) text += t->get<std::string>();
    const json joined = text;
    format_tool_response_block(out, name, &joined);
  } else {
    // A string, number, null, or a mapping (rendered key:value; in Python Jinja2 a dict here would
    // be iterated like a list and fail, so we use the mapping form the macro provides).
    format_tool_response_block(out, name, body);
  }
}

}  // namespace

std::string render_chat(const json& messages, const json& tools, bool add_generation_prompt,
                        bool enable_thinking, const std::string& bos_token) {
  if (!messages.is_array()) fail("messages", "expected an array");
  if (messages.empty()) fail("messages", "empty (the template reads messages[0])");
  if (!tools.is_null() && !tools.is_array()) fail("tools", "expected an array or null");
  for (size_t i = 0; i < messages.size(); ++i) check_message(messages[i], i);

  std::string out = bos_token;
  Last last = Last::kNone;
  size_t first = 0;  // loop_messages = messages[first:]

  // System turn: thinking flag, the system/developer message, tool declarations.
  const std::string role0 = role_of(messages[0]);
  const bool leading_system = role0 == "system" || role0 == "developer";
  const bool has_tools = truthy(&tools);
  if (enable_thinking || has_tools || leading_system) {
    out += "<|turn>system\n";
    if (enable_thinking) {
      out += "<|think|>\n";
      last = Last::kThink;
    }
    if (leading_system) {
      out += trim(system_text(messages[0]));
      first = 1;
    }
    if (has_tools) {
      for (size_t t = 0; t < tools.size(); ++t) {
        out += "<|tool>";
        out += trim(format_function_declaration(tools[t], t));
        out += "<tool|>";
      }
      last = Last::kToolDecl;
    }
    out += "<turn|>\n";
  }

  // Reasoning of a message is only replayed after the last user message.
  long last_user = -1;
  for (size_t i = first; i < messages.size(); ++i)
    if (role_of(messages[i]) == "user") last_user = long(i);

  for (size_t i = first; i < messages.size(); ++i) {
    const json& msg = messages[i];
    const std::string raw_role = role_of(msg);
    if (raw_role == "tool") continue;  // rendered by the assistant message that called it
    last = Last::kNone;
    const std::string role = raw_role == "assistant" ? "model" : raw_role;

    // An assistant message right after an assistant message (tool messages in between do not
    // count) continues the same model turn: no new turn header.
    std::string prev_role;
    for (size_t j = i; j-- > first;) {
      if (role_of(messages[j]) != "tool") {
        prev_role = role_of(messages[j]);
        break;
      }
    }
    if (!(role == "model" && prev_role == "assistant")) out += "<|turn>" + role + "\n";

    const json* tool_calls = field(msg, "tool_calls");
    const json* reasoning = field(msg, "reasoning");
    if (!truthy(reasoning)) reasoning = field(msg, "reasoning_content");
    if (truthy(reasoning) && long(i) > last_user && truthy(tool_calls))
      out += "<|channel>thought\n" + reasoning->get<std::string>() + "\n<channel|>";

    if (truthy(tool_calls)) {
      for (const json& call : *tool_calls) {
        const json& fn = call["function"];
        out += "<|tool_call>call:" + fn["name"].get<std::string>() + "{";
        if (const json* args = field(fn, "arguments"); args && args->is_object()) {
          bool first_arg = true;
          for (const auto& [key, value] : dictsort(*args)) {
            if (!first_arg) out += ',';
            first_arg = false;
            out += key + ":";
            format_argument(out, value, false);
          }
        } else if (args && args->is_string()) {
          out += args->get<std::string>();
        }
        out += "}<tool_call|>";
      }
      last = Last::kToolCall;
    }

    bool responded = false;  // tool responses were written into this turn
    if (const json* responses = field(msg, "tool_responses"); truthy(responses)) {
      // Gemma-native form: responses embedded in the assistant message.
      for (const json& response : *responses) {
        const json* name = field(response, "name");
        format_tool_response_block(out, name && name->is_string() ? name->get<std::string>() : "unknown",
                                   field(response, "response"));
        responded = true;
        last = Last::kToolResponse;
      }
    } else if (truthy(tool_calls)) {
      // OpenAI form: the role:tool messages that directly follow.
      for (size_t k = i + 1; k < messages.size() && role_of(messages[k]) == "tool"; ++k) {
        render_tool_message_body(out, tool_response_name(messages[k], *tool_calls), messages[k]);
        responded = true;
        last = Last::kToolResponse;
      }
    }

    const json* content = field(msg, "content");
    if (content && content->is_string()) {
      out +=
          role == "model" ? strip_thinking(content->get<std::string>()) : trim(content->get<std::string>());
    } else if (content && content->is_array()) {
      for (const json& part : *content) {
        const std::string type = part["type"].get<std::string>();
        if (type == "text") {
          const std::string& text = part["text"].get_ref<const std::string&>();
          out += role == "model" ? strip_thinking(text) : trim(text);
        } else if (type == "image") {
          out += "<|image|>";
          last = Last::kImage;
        } else if (type == "audio") {
          out += "<|audio|>";
          last = Last::kAudio;
        } else if (type == "video") {
          out += "<|video|>";
          last = Last::kVideo;
        }
      }
    }

    // A tool call without its responses leaves the turn open for them; a turn that only carried
    // tool responses stays open for the model's answer.
    if (last == Last::kToolCall && !responded)
      out += "<|tool_response>";
    else if (!(responded && !truthy(content)))
      out += "<turn|>\n";
  }

  if (add_generation_prompt && last != Last::kToolResponse && last != Last::kToolCall) {
    out += "<|turn>model\n";
    if (!enable_thinking) out += "<|channel>thought\n<channel|>";
  }
  return out;
}

json normalize_tool_call_arguments(const json& messages) {
  json result = messages;
  if (!result.is_array()) return result;
  for (json& msg : result) {
    json* calls = msg.is_object() && msg.contains("tool_calls") ? &msg["tool_calls"] : nullptr;
    if (!calls || !calls->is_array()) continue;
    for (json& call : *calls) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
      json& fn = call["function"];
      if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
      json parsed = json::parse(fn["arguments"].get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object()) fn["arguments"] = std::move(parsed);
    }
  }
  return result;
}

}  // namespace gem4::text
