#include "text/output_parser.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

namespace gem4::text {
namespace {

using ordered_json = nlohmann::ordered_json;

constexpr std::string_view kChannelOpen = "<|channel>";
constexpr std::string_view kChannelClose = "<channel|>";
constexpr std::string_view kToolCallOpen = "<|tool_call>";
constexpr std::string_view kToolCallClose = "<tool_call|>";
constexpr std::string_view kTurnEnd = "<turn|>";
constexpr std::string_view kToolResponse = "<|tool_response>";  // the model hands over to the tool
constexpr std::string_view kEos = "<eos>";
constexpr std::string_view kChannelName = "thought\n";  // header after <|channel>; '\n' optional
constexpr std::string_view kQuote = "<|\"|>";
constexpr size_t kMaxMarkerLen = kToolResponse.size();  // the longest marker

struct Found {
  size_t pos = std::string_view::npos;
  std::string_view marker;
};

// The earliest complete marker in text[from:].
Found find_marker(std::string_view text, std::initializer_list<std::string_view> markers, size_t from = 0) {
  Found best;
  for (std::string_view m : markers) {
    const size_t p = text.find(m, from);
    if (p < best.pos) best = {p, m};
  }
  return best;
}

// Length of the longest suffix of `text` that is a proper prefix of one of `markers`: the part that
// must wait for the next piece.
size_t partial_marker_len(std::string_view text, std::initializer_list<std::string_view> markers) {
  size_t longest = 0;
  for (std::string_view m : markers) {
    for (size_t k = std::min(text.size(), m.size() - 1); k > longest; --k) {
      if (m.substr(0, k) == text.substr(text.size() - k)) {
        longest = k;
        break;
      }
    }
  }
  return longest;
}

// ---- the tool-call argument syntax --------------------------------------------------------------

constexpr int kMaxNesting = 64;  // deeper input is treated as malformed, not recursed into

class ArgumentReader {
 public:
  explicit ArgumentReader(std::string_view s) : s_(s) {}

  bool at_end() {
    skip_space();
    return i_ == s_.size();
  }
  bool consume(std::string_view t) {
    if (s_.substr(i_, t.size()) != t) return false;
    i_ += t.size();
    return true;
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  // Everything up to (not including) the first '{'.
  std::optional<std::string_view> until_brace() {
    const size_t p = s_.find('{', i_);
    if (p == std::string_view::npos) return std::nullopt;
    std::string_view t = s_.substr(i_, p - i_);
    i_ = p;
    return t;
  }

  std::optional<ordered_json> object(int depth) {
    if (depth > kMaxNesting || !consume("{")) return std::nullopt;
    ordered_json obj = ordered_json::object();
    skip_space();
    if (consume("}")) return obj;
    while (true) {
      std::optional<std::string> key = this->key();
      if (!key) return std::nullopt;
      skip_space();
      if (!consume(":")) return std::nullopt;
      std::optional<ordered_json> v = value(depth + 1);
      if (!v) return std::nullopt;
      obj[*key] = std::move(*v);
      skip_space();
      if (consume("}")) return obj;
      if (!consume(",")) return std::nullopt;
      skip_space();
      if (consume("}")) return obj;  // trailing comma
    }
  }

 private:
  std::optional<ordered_json> array(int depth) {
    if (depth > kMaxNesting || !consume("[")) return std::nullopt;
    ordered_json arr = ordered_json::array();
    skip_space();
    if (consume("]")) return arr;
    while (true) {
      std::optional<ordered_json> v = value(depth + 1);
      if (!v) return std::nullopt;
      arr.push_back(std::move(*v));
      skip_space();
      if (consume("]")) return arr;
      if (!consume(",")) return std::nullopt;
      skip_space();
      if (consume("]")) return arr;
    }
  }

  // <|"|>text<|"|>: anything up to the next delimiter (the format has no escapes).
  std::optional<std::string> quoted() {
    if (!consume(kQuote)) return std::nullopt;
    const size_t end = s_.find(kQuote, i_);
    if (end == std::string_view::npos) return std::nullopt;
    std::string text(s_.substr(i_, end - i_));
    i_ = end + kQuote.size();
    return text;
  }

  // A JSON "string" (the model sometimes falls back to JSON quoting).
  std::optional<std::string> json_string() {
    size_t j = i_ + 1;
    while (j < s_.size() && s_[j] != '"') j += s_[j] == '\\' ? 2 : 1;
    if (j >= s_.size()) return std::nullopt;
    ordered_json v = ordered_json::parse(s_.substr(i_, j + 1 - i_), nullptr, false);
    if (!v.is_string()) return std::nullopt;
    i_ = j + 1;
    return v.get<std::string>();
  }

  // Bare text up to the next structural character at this level, trimmed.
  std::string_view bare(std::string_view stops) {
    const size_t start = i_;
    while (i_ < s_.size() && stops.find(s_[i_]) == std::string_view::npos &&
           s_.substr(i_, kQuote.size()) != kQuote)
      ++i_;
    std::string_view t = s_.substr(start, i_ - start);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t' || t.back() == '\n' || t.back() == '\r'))
      t.remove_suffix(1);
    return t;
  }

  std::optional<std::string> key() {
    skip_space();
    if (s_.substr(i_, kQuote.size()) == kQuote) return quoted();
    if (i_ < s_.size() && s_[i_] == '"') return json_string();
    std::string_view k = bare(":,{}[]");
    if (k.empty()) return std::nullopt;
    return std::string(k);
  }

  std::optional<ordered_json> value(int depth) {
    skip_space();
    if (i_ >= s_.size()) return std::nullopt;
    if (s_[i_] == '{') return object(depth);
    if (s_[i_] == '[') return array(depth);
    if (s_.substr(i_, kQuote.size()) == kQuote) {
      std::optional<std::string> text = quoted();
      if (!text) return std::nullopt;
      return ordered_json(std::move(*text));
    }
    if (s_[i_] == '"') {
      std::optional<std::string> text = json_string();
      if (!text) return std::nullopt;
      return ordered_json(std::move(*text));
    }
    std::string_view t = bare(",}]{[");
    if (t.empty() || (i_ < s_.size() && (s_[i_] == '{' || s_[i_] == '[' || s_[i_] == '<')))
      return std::nullopt;
    return scalar(t);
  }

  // true/false/null (also Python's spelling, which the template itself prints for None), a JSON
  // number, or otherwise the bare text as a string (models occasionally drop the quotes).
  static ordered_json scalar(std::string_view t) {
    if (t == "true" || t == "True") return true;
    if (t == "false" || t == "False") return false;
    if (t == "null" || t == "None") return nullptr;
    if (is_json_number(t)) {
      ordered_json n = ordered_json::parse(t, nullptr, false);
      if (n.is_number()) return n;
    }
    return std::string(t);
  }

  static bool is_json_number(std::string_view t) {
    size_t i = 0;
    auto digits = [&] {
      const size_t start = i;
      while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
      return i > start;
    };
    if (i < t.size() && t[i] == '-') ++i;
    if (i < t.size() && t[i] == '0')
      ++i;
    else if (!digits())
      return false;
    if (i < t.size() && t[i] == '.') {
      ++i;
      if (!digits()) return false;
    }
    if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
      ++i;
      if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
      if (!digits()) return false;
    }
    return i == t.size();
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

bool valid_function_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name)
    if (std::string_view(" \t\r\n{}[]<>,:\"'").find(c) != std::string_view::npos) return false;
  return true;
}

std::optional<ToolCall> parse_tool_call(std::string_view body) {
  ArgumentReader r(body);
  r.skip_space();
  if (!r.consume("call:")) return std::nullopt;
  std::optional<std::string_view> name = r.until_brace();
  if (!name) return std::nullopt;
  while (!name->empty() && (name->front() == ' ' || name->front() == '\t')) name->remove_prefix(1);
  while (!name->empty() && (name->back() == ' ' || name->back() == '\t')) name->remove_suffix(1);
  if (!valid_function_name(*name)) return std::nullopt;
  std::optional<ordered_json> args = r.object(0);
  if (!args || !r.at_end()) return std::nullopt;
  return ToolCall{std::string(*name), std::move(*args)};
}

OutputParser::OutputParser(OutputParserOptions options) : options_(std::move(options)) {}

void OutputParser::emit_content(OutputDelta& delta, std::string_view text) {
  delta.content += text;
  content_ += text;
}

void OutputParser::emit_reasoning(OutputDelta& delta, std::string_view text) {
  delta.reasoning += text;
  reasoning_ += text;
}

// A tool call's text ended (closed by <tool_call|> or cut off): a call if it parses, else content.
void OutputParser::close_tool_call(OutputDelta& delta, std::string_view body, bool closed) {
  std::optional<ToolCall> call = closed ? parse_tool_call(body) : std::nullopt;
  if (!call) {
    emit_content(delta, kToolCallOpen);
    emit_content(delta, body);
    if (closed) emit_content(delta, kToolCallClose);
    return;
  }
  nlohmann::json tc = {
      {"id", options_.tool_call_id_prefix + std::to_string(tool_calls_.size())},
      {"type", "function"},
      {"function",
       {{"name", call->name},
        // Replace, never throw, if the model wrote bytes that are not UTF-8.
        {"arguments", call->arguments.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)}}}};
  delta.tool_calls.push_back(tc);
  tool_calls_.push_back(std::move(tc));
}

void OutputParser::process(OutputDelta& delta, bool at_end) {
  while (true) {
    switch (state_) {
      case State::kDone:
        buf_.clear();
        return;

      case State::kContent: {
        const auto markers = {kChannelOpen, kToolCallOpen, kTurnEnd, kToolResponse, kEos};
        const Found f = find_marker(buf_, markers);
        if (f.pos == std::string_view::npos) {
          const size_t hold = at_end ? 0 : partial_marker_len(buf_, markers);
          emit_content(delta, std::string_view(buf_).substr(0, buf_.size() - hold));
          buf_.erase(0, buf_.size() - hold);
          return;
        }
        emit_content(delta, std::string_view(buf_).substr(0, f.pos));
        buf_.erase(0, f.pos + f.marker.size());
        state_ = f.marker == kChannelOpen    ? State::kChannelHeader
                 : f.marker == kToolCallOpen ? State::kToolCall
                                             : State::kDone;
        break;
      }

      case State::kChannelHeader: {
        // Drop "thought\n" (or "thought" right before another marker); wait while undecided.
        const std::string_view name = kChannelName.substr(0, kChannelName.size() - 1);
        if (buf_.compare(0, kChannelName.size(), kChannelName) == 0) {
          buf_.erase(0, kChannelName.size());
        } else if (buf_.size() > name.size() && buf_.compare(0, name.size(), name) == 0 &&
                   buf_[name.size()] == '<') {
          buf_.erase(0, name.size());
        } else if (kChannelName.substr(0, buf_.size()) == buf_) {
          if (!at_end) return;
          buf_.clear();  // a header cut off by the end of generation
        }
        state_ = State::kReasoning;
        break;
      }

      case State::kReasoning: {
        const auto markers = {kChannelClose, kTurnEnd, kToolResponse, kEos};
        const Found f = find_marker(buf_, markers);
        if (f.pos == std::string_view::npos) {
          const size_t hold = at_end ? 0 : partial_marker_len(buf_, markers);
          emit_reasoning(delta, std::string_view(buf_).substr(0, buf_.size() - hold));
          buf_.erase(0, buf_.size() - hold);
          return;
        }
        emit_reasoning(delta, std::string_view(buf_).substr(0, f.pos));
        buf_.erase(0, f.pos + f.marker.size());
        state_ = f.marker == kChannelClose ? State::kContent : State::kDone;
        break;
      }

      case State::kToolCall: {
        // Nothing is emitted while a call is open, so there is nothing to hold back: wait for the
        // closing marker. A new call or the end of the turn before it makes this one malformed.
        // Resume the search where the last one stopped (less a marker length), so a long call fed
        // in small pieces costs linear time.
        const size_t from = tool_scan_ > kMaxMarkerLen ? tool_scan_ - kMaxMarkerLen : 0;
        const Found f =
            find_marker(buf_, {kToolCallClose, kToolCallOpen, kTurnEnd, kToolResponse, kEos}, from);
        if (f.pos == std::string_view::npos) {
          tool_scan_ = buf_.size();
          if (!at_end) return;
          close_tool_call(delta, buf_, /*closed=*/false);
          buf_.clear();
          tool_scan_ = 0;
          state_ = State::kContent;
          return;
        }
        if (f.marker == kToolCallClose) {
          close_tool_call(delta, std::string_view(buf_).substr(0, f.pos), /*closed=*/true);
          buf_.erase(0, f.pos + f.marker.size());
        } else {
          close_tool_call(delta, std::string_view(buf_).substr(0, f.pos), /*closed=*/false);
          buf_.erase(0, f.pos);  // the marker itself is handled in the content state
        }
        tool_scan_ = 0;
        state_ = State::kContent;
        break;
      }
    }
  }
}

OutputDelta OutputParser::push(std::string_view piece) {
  OutputDelta delta;
  if (state_ == State::kDone) return delta;
  buf_.append(piece);
  process(delta, /*at_end=*/false);
  return delta;
}

OutputDelta OutputParser::finish() {
  OutputDelta delta;
  process(delta, /*at_end=*/true);
  state_ = State::kDone;
  buf_.clear();
  return delta;
}

OutputDelta parse_output(std::string_view text, OutputParserOptions options) {
  OutputParser parser(std::move(options));
  OutputDelta all = parser.push(text);
  OutputDelta tail = parser.finish();
  all.reasoning += tail.reasoning;
  all.content += tail.content;
  for (auto& tc : tail.tool_calls) all.tool_calls.push_back(std::move(tc));
  return all;
}

}  // namespace gem4::text
