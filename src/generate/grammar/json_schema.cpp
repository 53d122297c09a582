#include "generate/grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

namespace gem4::generate::grammar {

namespace {

using json = nlohmann::ordered_json;

// Numbers have at most 16 integer digits, so unbounded sides are clamped here.
constexpr long long kMaxMagnitude = 9999999999999999LL;

// A GBNF literal for raw bytes.
std::string lit(const std::string& bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      static const char* hex = "0123456789ABCDEF";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

std::string repeat_digits(int n) {
  if (n <= 0) return "";
  return n == 1 ? "[0-9]" : "[0-9]{" + std::to_string(n) + "}";
}

// Canonical decimals (no leading zeros) of equal length between x and y.
std::string same_length_range(const std::string& x, const std::string& y) {
  const size_t n = x.size();
  if (n == 0) return "\"\"";
  if (x == y) return lit(x);
  if (x[0] == y[0]) return lit(x.substr(0, 1)) + " " + same_length_range(x.substr(1), y.substr(1));
  const bool rest_zero = x.find_first_not_of('0', 1) == std::string::npos;
  const bool rest_nine = y.find_first_not_of('9', 1) == std::string::npos;
  std::vector<std::string> parts;
  char lo = x[0], hi = y[0];
  if (!rest_zero) {
    parts.push_back(lit(x.substr(0, 1)) + " " + same_length_range(x.substr(1), std::string(n - 1, '9')));
    ++lo;
  }
  if (!rest_nine) --hi;
  if (lo <= hi) {
    std::string cls = lo == hi ? lit(std::string(1, lo)) : std::string("[") + lo + "-" + hi + "]";
    if (n > 1) cls += " " + repeat_digits(int(n - 1));
    parts.push_back(cls);
  }
  if (!rest_nine)
    parts.push_back(lit(y.substr(0, 1)) + " " + same_length_range(std::string(n - 1, '0'), y.substr(1)));
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
  return out + ")";
}

// Decimals in [a, b], 0 <= a <= b.
std::string nonneg_range(long long a, long long b) {
  std::vector<std::string> parts;
  const std::string sa = std::to_string(a), sb = std::to_string(b);
  long long p = 1;
  for (size_t len = 1; len <= sb.size(); ++len, p *= 10) {
    if (len < sa.size()) continue;
    const long long lo = std::max(a, len == 1 ? 0LL : p);
    const long long hi = std::min(b, p * 10 - 1);
    if (lo <= hi) parts.push_back(same_length_range(std::to_string(lo), std::to_string(hi)));
  }
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
  return out + ")";
}

// Integers in [lo, hi].
std::string integer_range(long long lo, long long hi) {
  std::vector<std::string> parts;
  if (hi >= 0) parts.push_back(nonneg_range(std::max(lo, 0LL), hi));
  if (lo < 0) parts.push_back("\"-\" " + nonneg_range(hi < 0 ? -hi : 1, -lo));
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
  return out + ")";
}

const char* kCommonRules =
    "ws ::= (\" \" | \"\\n\" [ ]{0,20})?\n"
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "integer ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15})\n"
    "number ::= integer (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws (string ws \":\" ws value ws (\",\" ws string ws \":\" ws value ws)*)? \"}\"\n"
    "array ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n";

// Gemma 4's tool-call argument syntax (text/output_parser.h reads it): strings between <|"|> tokens
// with no escapes, keys bare, no whitespace. A string's text must not contain the five characters
// <|"|> either (the parser reads text, where the token and those characters look the same): gs0..gs4
// are the states of a matcher for that text (gsK: the last K characters are its first K; the rules
// are written from kGemmaStringMoves), so the forbidden text can never complete. `key` (a key of a
// free object) is a bare name of at most 64 identifier characters (the parser reads back more, but a
// model that never ends a key must not run on) or a string; `pchar` (any character but '<') is what
// patterns use, for which the exclusion is simpler to keep (see RegexCompiler).
const char* kGemmaRules =
    "ws ::= \"\"\n"
    "pchar ::= [^<]\n"
    "string ::= <|\"|> gs0 <|\"|>\n"
    "key ::= [a-zA-Z0-9_$.\\-]{1,64} | string\n"
    "integer ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15})\n"
    "number ::= integer (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" (key \":\" value (\",\" key \":\" value)*)? \"}\"\n"
    "array ::= \"[\" (value (\",\" value)*)? \"]\"\n";

// The transitions of gs0..gs4 (kGemmaRules) as (character class, next state), for strings of
// bounded length, which count characters along the same states.
const std::vector<std::pair<const char*, int>> kGemmaStringMoves[5] = {
    {{"[^<]", 0}, {"\"<\"", 1}},
    {{"[^<|]", 0}, {"\"<\"", 1}, {"\"|\"", 2}},
    {{"[^<\"]", 0}, {"\"<\"", 1}, {"\"\\\"\"", 3}},
    {{"[^<|]", 0}, {"\"<\"", 1}, {"\"|\"", 4}},
    {{"[^<>]", 0}, {"\"<\"", 1}},
};

constexpr std::string_view kGemmaQuote = "<|\"|>";

std::string gemma_common_rules() {
  std::string out = kGemmaRules;
  for (int k = 0; k < 5; ++k) {
    out += "gs" + std::to_string(k) + " ::= \"\"";
    for (const auto& [cls, next] : kGemmaStringMoves[k])
      out += std::string(" | ") + cls + " gs" + std::to_string(next);
    out += "\n";
  }
  return out;
}

// A simple regex (JavaScript syntax, the subset of the header) -> a GBNF expression over the
// JSON-encoded characters of a string's content.
class RegexCompiler {
 public:
  // gemma: the pattern describes the raw text of a Gemma 4 tool-call string, which may not contain
  // '<' here: its classes and '.' leave it out, a literal '<' is an error (a sound and simple way to
  // keep the text <|"|> out of strings with a pattern).
  RegexCompiler(const std::string& re, const std::string& path, bool gemma)
      : s_(re), path_(path), gemma_(gemma), any_(gemma ? "pchar" : "char") {}

  std::string run() {
    bool start = false, end = false;
    if (!s_.empty() && s_[0] == '^') start = true, p_ = 1;
    std::string body = alternatives();
    if (p_ < s_.size() && s_[p_] == '$' && p_ + 1 == s_.size()) end = true, ++p_;
    if (p_ != s_.size()) fail("unexpected '" + std::string(1, s_[p_]) + "'");
    return std::string(start ? "" : any_ + "* ") + "(" + body + ")" + (end ? "" : " " + any_ + "*");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw SchemaError(path_, "pattern " + json(s_).dump() + " at offset " + std::to_string(p_) + ": " + what);
  }

  std::string alternatives() {
    std::string out = sequence();
    while (p_ < s_.size() && s_[p_] == '|') {
      ++p_;
      out += " | " + sequence();
    }
    return out;
  }

  std::string sequence() {
    std::vector<std::string> items;
    while (p_ < s_.size() && s_[p_] != '|' && s_[p_] != ')') {
      if (s_[p_] == '$' && p_ + 1 == s_.size()) break;
      std::string atom = this->atom();
      // Quantifier.
      if (p_ < s_.size() && (s_[p_] == '*' || s_[p_] == '+' || s_[p_] == '?')) {
        atom = "(" + atom + ")" + s_[p_++];
      } else if (p_ < s_.size() && s_[p_] == '{') {
        const size_t close = s_.find('}', p_);
        if (close == std::string::npos) fail("unterminated '{'");
        atom = "(" + atom + ")" + s_.substr(p_, close - p_ + 1);
        p_ = close + 1;
      }
      if (p_ < s_.size() && s_[p_] == '?') ++p_;  // lazy: the same language
      items.push_back(atom);
    }
    if (items.empty()) return "\"\"";
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) out += (i ? " " : "") + items[i];
    return out;
  }

  // One code point of the pattern as its JSON-encoded text (Gemma: as it is).
  std::string json_char(uint32_t c) const {
    if (gemma_) {
      if (c == '<') fail("a literal '<' is not supported in a tool-call argument's pattern");
      return lit(utf8(c));
    }
    if (c == '"') return lit("\\\"");
    if (c == '\\') return lit("\\\\");
    if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04X", c);
      return lit(c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : buf);
    }
    return lit(utf8(c));
  }

  static std::string utf8(uint32_t c) {
    std::string u;
    if (c < 0x80) {
      u += char(c);
    } else if (c < 0x800) {
      u += char(0xC0 | (c >> 6));
      u += char(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      u += char(0xE0 | (c >> 12));
      u += char(0x80 | ((c >> 6) & 0x3F));
      u += char(0x80 | (c & 0x3F));
    } else {
      u += char(0xF0 | (c >> 18));
      u += char(0x80 | ((c >> 12) & 0x3F));
      u += char(0x80 | ((c >> 6) & 0x3F));
      u += char(0x80 | (c & 0x3F));
    }
    return u;
  }

  uint32_t next_code_point() {
    const unsigned char c = s_[p_];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < n && p_ + i < s_.size(); ++i) cp = (cp << 6) | (s_[p_ + i] & 0x3F);
    p_ += n;
    return cp;
  }

  // A class as code point ranges -> GBNF: the plain characters in one class, '"', '\' and control
  // characters as their JSON escapes.
  std::string class_expr(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negate) const {
    std::vector<std::pair<uint32_t, uint32_t>> r;
    std::sort(ranges.begin(), ranges.end());
    for (auto x : ranges) {
      if (!r.empty() && x.first <= r.back().second + 1)
        r.back().second = std::max(r.back().second, x.second);
      else
        r.push_back(x);
    }
    if (negate) {
      std::vector<std::pair<uint32_t, uint32_t>> c;
      uint32_t next = 0;
      for (auto x : r) {
        if (x.first > next) c.push_back({next, x.first - 1});
        next = x.second + 1;
      }
      if (next <= 0x10FFFF) c.push_back({next, 0x10FFFF});
      r = c;
    }
    if (gemma_) return gemma_class(r);
    auto has = [&](uint32_t cp) {
      for (auto x : r)
        if (cp >= x.first && cp <= x.second) return true;
      return false;
    };
    std::vector<std::string> alts;
    std::string cls;
    for (auto x : r) {
      // Plain characters: [0x20, 0x10FFFF] minus '"' and '\'.
      const uint32_t segs[][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
      for (auto& s : segs) {
        const uint32_t lo = std::max(x.first, s[0]), hi = std::min(x.second, s[1]);
        if (lo > hi) continue;
        cls += hexcp(lo);
        if (hi > lo) cls += "-" + hexcp(hi);
      }
    }
    if (!cls.empty()) alts.push_back("[" + cls + "]");
    if (has('"')) alts.push_back(json_char('"'));
    if (has('\\')) alts.push_back(json_char('\\'));
    for (uint32_t c : {uint32_t('\n'), uint32_t('\t'), uint32_t('\r')})
      if (has(c)) alts.push_back(json_char(c));
    if (alts.empty()) return "";
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }

  // Gemma: the raw characters of `r` but '<', as one class ("" when none is left).
  static std::string gemma_class(const std::vector<std::pair<uint32_t, uint32_t>>& r) {
    std::string cls;
    for (auto x : r) {
      const uint32_t segs[][2] = {{0, '<' - 1}, {'<' + 1, 0x10FFFF}};
      for (auto& sg : segs) {
        const uint32_t lo = std::max(x.first, sg[0]), hi = std::min(x.second, sg[1]);
        if (lo > hi) continue;
        cls += hexcp(lo);
        if (hi > lo) cls += "-" + hexcp(hi);
      }
    }
    return cls.empty() ? "" : "[" + cls + "]";
  }

  static std::string hexcp(uint32_t cp) {
    char buf[16];
    std::snprintf(buf, sizeof buf, cp <= 0xFFFF ? "\\u%04X" : "\\U%08X", cp);
    return std::string(buf);
  }

  // \d \w \s and their negations as ranges; false for any other escape.
  static bool class_escape(char e, std::vector<std::pair<uint32_t, uint32_t>>& r, bool& neg) {
    neg = e == 'D' || e == 'W' || e == 'S';
    switch (e) {
      case 'd':
      case 'D':
        r.push_back({'0', '9'});
        return true;
      case 'w':
      case 'W':
        r.insert(r.end(), {{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'_', '_'}});
        return true;
      case 's':
      case 'S':
        r.insert(r.end(), {{' ', ' '}, {'\t', '\t'}, {'\n', '\n'}, {'\r', '\r'}});
        return true;
      default:
        return false;
    }
  }

  uint32_t escaped_char(char e) {
    switch (e) {
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'r':
        return '\r';
      default:
        if (std::isalnum(static_cast<unsigned char>(e))) fail(std::string("unsupported escape \\") + e);
        return uint32_t(e);
    }
  }

  std::string atom() {
    const char c = s_[p_];
    if (c == '(') {
      ++p_;
      if (s_.compare(p_, 2, "?:") == 0) {
        p_ += 2;
      } else if (p_ < s_.size() && s_[p_] == '?') {
        fail("lookaround and named groups are not supported");
      }
      std::string inner = alternatives();
      if (p_ >= s_.size() || s_[p_] != ')') fail("expected ')'");
      ++p_;
      return "(" + inner + ")";
    }
    if (c == '[') {
      ++p_;
      bool neg = false;
      if (p_ < s_.size() && s_[p_] == '^') neg = true, ++p_;
      std::vector<std::pair<uint32_t, uint32_t>> ranges;
      bool first = true;
      while (p_ < s_.size() && (s_[p_] != ']' || first)) {
        first = false;
        uint32_t lo;
        if (s_[p_] == '\\') {
          if (++p_ >= s_.size()) fail("unterminated class");
          std::vector<std::pair<uint32_t, uint32_t>> sub;
          bool sub_neg;
          if (class_escape(s_[p_], sub, sub_neg)) {
            if (sub_neg) fail("negated escapes inside a class are not supported");
            ranges.insert(ranges.end(), sub.begin(), sub.end());
            ++p_;
            continue;
          }
          lo = escaped_char(s_[p_++]);
        } else {
          lo = next_code_point();
        }
        uint32_t hi = lo;
        if (p_ + 1 < s_.size() && s_[p_] == '-' && s_[p_ + 1] != ']') {
          ++p_;
          if (s_[p_] == '\\') {
            ++p_;
            hi = escaped_char(s_[p_++]);
          } else {
            hi = next_code_point();
          }
          if (hi < lo) fail("class range out of order");
        }
        ranges.push_back({lo, hi});
      }
      if (p_ >= s_.size()) fail("unterminated class");
      ++p_;
      std::string e = class_expr(ranges, neg);
      if (e.empty()) fail("the class matches no character");
      return e;
    }
    if (c == '.') {
      ++p_;
      return any_;
    }
    if (c == '\\') {
      if (++p_ >= s_.size()) fail("trailing '\\'");
      std::vector<std::pair<uint32_t, uint32_t>> r;
      bool neg;
      if (class_escape(s_[p_], r, neg)) {
        ++p_;
        return class_expr(r, neg);
      }
      return json_char(escaped_char(s_[p_++]));
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("nothing to repeat");
    if (c == '^' || c == '$') fail("anchors are supported only at the start and end");
    return json_char(next_code_point());
  }

  const std::string& s_;
  std::string path_;
  bool gemma_;
  std::string any_;  // the rule for any character of a string
  size_t p_ = 0;
};

class Compiler {
 public:
  explicit Compiler(bool gemma) : gemma_(gemma) {}

  // The expression (a rule name) for `schema`; error paths start at `path`, $refs resolve in it.
  std::string add(const json& schema, const std::string& path, const std::string& hint) {
    root_ = &schema;
    root_path_ = path;
    refs_.clear();
    return visit(schema, path, hint);
  }
  void add_rule_named(const std::string& name, const std::string& body) {
    used_.insert(name);
    rules_.push_back({name, body});
  }
  // Every rule: those added, then the syntax's common ones.
  std::string rules() const {
    std::string out;
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out + (gemma_ ? gemma_common_rules() : std::string(kCommonRules));
  }

 private:
  std::string add_rule(const std::string& hint, const std::string& body) {
    const std::string name = unique_name(hint);
    rules_.push_back({name, body});
    return name;
  }

  std::string unique_name(const std::string& hint) {
    std::string base;
    for (char c : hint) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    if (base.empty() || !std::isalpha(static_cast<unsigned char>(base[0]))) base = "r-" + base;
    base = "s-" + base;
    std::string name = base;
    for (int i = 2; used_.count(name); ++i) name = base + "-" + std::to_string(i);
    used_.insert(name);
    return name;
  }

  const json& resolve(const std::string& ref, const std::string& path) {
    if (ref.empty() || ref[0] != '#') throw SchemaError(path, "only local references (#...) are supported");
    if (ref == "#") return *root_;
    if (ref.size() < 2 || ref[1] != '/') throw SchemaError(path, "unsupported reference " + json(ref).dump());
    try {
      const json& target = root_->at(json::json_pointer(ref.substr(1)));
      return target;
    } catch (const std::exception&) {
      throw SchemaError(path, "reference " + json(ref).dump() + " does not resolve");
    }
  }

  static std::string child(const std::string& path, const std::string& key) {
    bool plain = !key.empty();
    for (char c : key) plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$');
    return plain ? path + "." + key : path + "[" + json(key).dump() + "]";
  }
  static std::string index(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

  static long long integer_bound(const json& v, const std::string& path) {
    if (!v.is_number()) throw SchemaError(path, "must be a number");
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::fabs(d) > double(kMaxMagnitude))
      throw SchemaError(path, "bounds beyond 16 digits are not supported");
    return 0;
  }

  // Integer-valued bounds [lo, hi] from minimum/maximum/exclusive*; `integer` rounds inward.
  static std::pair<long long, long long> bounds(const json& s, const std::string& path) {
    double lo = -double(kMaxMagnitude), hi = double(kMaxMagnitude);
    bool lo_x = false, hi_x = false;
    auto take = [&](const char* key, double& target, bool& excl, bool is_excl, bool is_lo) {
      if (!s.contains(key)) return;
      const json& v = s[key];
      if (v.is_boolean())
        throw SchemaError(child(path, key), "boolean exclusive bounds (draft 4) are not supported");
      integer_bound(v, child(path, key));
      const double d = v.get<double>();
      if (is_lo ? d > target || (d == target && is_excl) : d < target || (d == target && is_excl)) {
        target = d;
        excl = is_excl;
      }
    };
    take("minimum", lo, lo_x, false, true);
    take("exclusiveMinimum", lo, lo_x, true, true);
    take("maximum", hi, hi_x, false, false);
    take("exclusiveMaximum", hi, hi_x, true, false);
    long long l = (long long)std::ceil(lo), h = (long long)std::floor(hi);
    if (lo_x && double(l) == lo) ++l;
    if (hi_x && double(h) == hi) --h;
    if (l > h) throw SchemaError(path, "the bounds leave no integer");
    return {l, h};
  }

  // ---- where the syntaxes differ --------------------------------------------------------------

  // The opening and closing of a string.
  std::string quote() const { return gemma_ ? "<|\"|>" : "\"\\\"\""; }

  // A string with exactly this text.
  std::string str_lit(const std::string& v, const std::string& path) const {
    if (!gemma_) return lit(json(v).dump());
    if (v.find(kGemmaQuote) != std::string::npos)
      throw SchemaError(path, "a string containing <|\"|> cannot be written in a tool call");
    return quote() + " " + lit(v) + " " + quote();
  }

  // An object key: Gemma writes it bare when the parser reads it back as the same key.
  std::string key_lit(const std::string& name, const std::string& path) const {
    if (!gemma_) return lit(json(name).dump());
    bool bare = !name.empty();
    for (unsigned char c : name)
      bare = bare && c > 0x20 && std::string_view(":,{}[]\"<").find(char(c)) == std::string_view::npos;
    return bare ? lit(name) : str_lit(name, path);
  }

  // Exactly the value `v` (const, enum).
  std::string value_lit(const json& v, const std::string& path) const {
    if (!gemma_) return lit(v.dump());
    if (v.is_string()) return str_lit(v.get<std::string>(), path);
    if (v.is_object()) {
      std::string out = "\"{\"";
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        out += std::string(first ? " " : " \",\" ") + key_lit(k, child(path, k)) + " \":\" " +
               value_lit(x, child(path, k));
        first = false;
      }
      return out + " \"}\"";
    }
    if (v.is_array()) {
      std::string out = "\"[\"";
      for (size_t i = 0; i < v.size(); ++i)
        out += std::string(i ? " \",\" " : " ") + value_lit(v[i], index(path, i));
      return out + " \"]\"";
    }
    return lit(v.dump());
  }

  // The characters of a string of min..max characters (max -1: unbounded), between its quotes.
  std::string string_body(int min, int max, const std::string& hint) {
    if (!gemma_) {
      if (min == 0 && max < 0) return "char*";
      return "char" + (max < 0 ? "{" + std::to_string(min) + ",}"
                               : "{" + std::to_string(min) + "," + std::to_string(max) + "}");
    }
    if (min == 0 && max < 0) return "gs0";
    // Gemma: count characters along the states of gs0..gs4; rule (k, q): k characters written, in
    // state q. From k == min on, an unbounded string continues in gsq.
    const std::string base = unique_name(hint + "-chars");
    std::map<std::pair<int, int>, std::string> names;
    std::vector<std::pair<int, int>> todo;  // rules named, bodies not yet written
    auto name_of = [&](int k, int q) -> std::string {
      if (max < 0 && k >= min) return "gs" + std::to_string(q);
      auto [it, fresh] = names.try_emplace({k, q}, base + "-" + std::to_string(k) + "-" + std::to_string(q));
      if (fresh) todo.push_back({k, q});
      return it->second;
    };
    const std::string start = name_of(0, 0);
    for (size_t i = 0; i < todo.size(); ++i) {
      const auto [k, q] = todo[i];
      std::string body;
      if (k >= min) body = "\"\"";
      if (k < max || max < 0)
        for (const auto& [cls, next] : kGemmaStringMoves[q])
          body += std::string(body.empty() ? "" : " | ") + cls + " " + name_of(k + 1, next);
      add_rule_named(names.at({k, q}), body);
    }
    return start;
  }

  std::string visit(const json& s, const std::string& path, const std::string& hint) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) throw SchemaError(path, "the schema false matches nothing");
      return "value";
    }
    if (!s.is_object()) throw SchemaError(path, "a schema must be an object or a boolean");
    static const std::set<std::string> kIgnored = {
        "title",  "description", "default",     "examples", "$schema",   "$id",       "$comment",
        "strict", "$defs",       "definitions", "readOnly", "writeOnly", "deprecated"};
    static const std::set<std::string> kKnown = {"type",
                                                 "properties",
                                                 "required",
                                                 "additionalProperties",
                                                 "items",
                                                 "minItems",
                                                 "maxItems",
                                                 "enum",
                                                 "const",
                                                 "minLength",
                                                 "maxLength",
                                                 "pattern",
                                                 "format",
                                                 "minimum",
                                                 "maximum",
                                                 "exclusiveMinimum",
                                                 "exclusiveMaximum",
                                                 "anyOf",
                                                 "oneOf",
                                                 "allOf",
                                                 "$ref",
                                                 "nullable"};
    for (const auto& [k, v] : s.items())
      if (!kIgnored.count(k) && !kKnown.count(k)) throw SchemaError(child(path, k), "unsupported keyword");

    if (s.contains("$ref")) {
      const json& r = s["$ref"];
      if (!r.is_string()) throw SchemaError(child(path, "$ref"), "must be a string");
      const std::string ref = r.get<std::string>();
      auto it = refs_.find(ref);
      if (it != refs_.end()) return it->second;
      const json& target = resolve(ref, child(path, "$ref"));
      // The rule is named before its body is built, so recursive references work.
      const std::string name = unique_name("ref-" + ref.substr(ref.rfind('/') + 1));
      refs_[ref] = name;
      std::string ref_path = root_path_;
      for (size_t b = 2; b < ref.size() + 1 && ref.size() > 1;) {
        size_t e = ref.find('/', b);
        if (e == std::string::npos) e = ref.size();
        ref_path = child(ref_path, ref.substr(b, e - b));
        b = e + 1;
      }
      const std::string body = visit(target, ref_path, hint);
      rules_.push_back({name, body});
      return name;
    }
    std::string expr = visit_inner(s, path, hint);
    if (s.contains("nullable")) {
      if (!s["nullable"].is_boolean()) throw SchemaError(child(path, "nullable"), "must be a boolean");
      if (s["nullable"].get<bool>()) expr = add_rule(hint, expr + " | null");
    }
    return expr;
  }

  std::string visit_inner(const json& s, const std::string& path, const std::string& hint) {
    if (s.contains("const")) return add_rule(hint + "-const", value_lit(s["const"], child(path, "const")));
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) throw SchemaError(child(path, "enum"), "must be a non-empty array");
      std::string body;
      for (size_t i = 0; i < e.size(); ++i)
        body += (i ? " | " : "") + value_lit(e[i], index(child(path, "enum"), i));
      return add_rule(hint + "-enum", body);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& alts = s[key];
      const std::string p = child(path, key);
      if (!alts.is_array() || alts.empty()) throw SchemaError(p, "must be a non-empty array");
      std::string body;
      for (size_t i = 0; i < alts.size(); ++i)
        body += (i ? " | " : "") + visit(alts[i], index(p, i), hint + "-" + std::to_string(i));
      return add_rule(hint, body);
    }
    if (s.contains("allOf")) {
      const json& all = s["allOf"];
      const std::string p = child(path, "allOf");
      if (!all.is_array() || all.size() != 1)
        throw SchemaError(p, "only allOf with a single schema is supported");
      return visit(all[0], index(p, 0), hint);
    }
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_array()) {
        if (t.empty()) throw SchemaError(child(path, "type"), "must not be empty");
        std::string body;
        for (size_t i = 0; i < t.size(); ++i) {
          if (!t[i].is_string()) throw SchemaError(index(child(path, "type"), i), "must be a type name");
          body += (i ? " | " : "") + typed(s, t[i].get<std::string>(), path, hint);
        }
        return add_rule(hint, body);
      }
      if (!t.is_string()) throw SchemaError(child(path, "type"), "must be a type name or a list of them");
      return typed(s, t.get<std::string>(), path, hint);
    }
    if (s.contains("properties") || s.contains("additionalProperties")) return typed(s, "object", path, hint);
    if (s.contains("items") || s.contains("minItems") || s.contains("maxItems"))
      return typed(s, "array", path, hint);
    if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength"))
      return typed(s, "string", path, hint);
    return "value";
  }

  static int count(const json& s, const char* key, const std::string& path, int dflt) {
    if (!s.contains(key)) return dflt;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > 100000)
      throw SchemaError(child(path, key), "must be a non-negative integer (at most 100000)");
    return int(v.get<long long>());
  }

  std::string typed(const json& s, const std::string& type, const std::string& path,
                    const std::string& hint) {
    if (type == "object") return object(s, path, hint);
    if (type == "array") return array(s, path, hint);
    if (type == "string") return string(s, path, hint);
    if (type == "integer") {
      if (!s.contains("minimum") && !s.contains("maximum") && !s.contains("exclusiveMinimum") &&
          !s.contains("exclusiveMaximum"))
        return "integer";
      const auto [lo, hi] = bounds(s, path);
      return add_rule(hint + "-int", integer_range(lo, hi));
    }
    if (type == "number") return number(s, path, hint);
    if (type == "boolean") return "boolean";
    if (type == "null") return "null";
    throw SchemaError(child(path, "type"), "unknown type " + json(type).dump());
  }

  // Bounded numbers: the integers of [lo, hi] exactly, and decimals whose integer part keeps the
  // value inside (bounds that are not integers are rounded inward: loose, never outside).
  std::string number(const json& s, const std::string& path, const std::string& hint) {
    if (!s.contains("minimum") && !s.contains("maximum") && !s.contains("exclusiveMinimum") &&
        !s.contains("exclusiveMaximum"))
      return "number";
    const auto [lo, hi] = bounds(s, path);
    std::string body = integer_range(lo, hi);
    const std::string frac = " \".\" [0-9]{1,16}";
    if (hi - 1 >= std::max(lo, 0LL)) body += " | " + nonneg_range(std::max(lo, 0LL), hi - 1) + frac;
    if (-lo - 1 >= std::max(-hi, 0LL)) body += " | \"-\" " + nonneg_range(std::max(-hi, 0LL), -lo - 1) + frac;
    return add_rule(hint + "-num", body);
  }

  std::string string(const json& s, const std::string& path, const std::string& hint) {
    if (s.contains("format")) {
      const json& f = s["format"];
      if (!f.is_string()) throw SchemaError(child(path, "format"), "must be a string");
      const std::string fmt = f.get<std::string>();
      const std::string date =
          "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8])";
      const std::string time =
          "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
          "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";
      std::string body;
      if (fmt == "date") {
        body = date;
      } else if (fmt == "time") {
        body = time;
      } else if (fmt == "date-time") {
        body = date + " \"T\" " + time;
      } else if (fmt == "uuid") {
        body = "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}";
      } else if (fmt == "email") {
        body =
            "[a-zA-Z0-9_+-]{1,32} \"@\" [a-zA-Z0-9-]{1,32} (\".\" [a-zA-Z0-9-]{1,32}){0,2} \".\" "
            "[a-zA-Z]{2,8}";
      } else {
        throw SchemaError(child(path, "format"), "unsupported format " + json(fmt).dump());
      }
      return add_rule(hint + "-" + fmt, quote() + " " + body + " " + quote());
    }
    if (s.contains("pattern")) {
      const json& p = s["pattern"];
      if (!p.is_string()) throw SchemaError(child(path, "pattern"), "must be a string");
      if (s.contains("minLength") || s.contains("maxLength"))
        throw SchemaError(path, "pattern together with minLength/maxLength is not supported");
      const std::string re = p.get<std::string>();
      return add_rule(
          hint + "-pattern",
          quote() + " " + RegexCompiler(re, child(path, "pattern"), gemma_).run() + " " + quote());
    }
    const int min = count(s, "minLength", path, 0);
    const int max = count(s, "maxLength", path, -1);
    if (max >= 0 && max < min) throw SchemaError(child(path, "maxLength"), "is below minLength");
    if (min == 0 && max < 0) return "string";
    return add_rule(hint + "-str", quote() + " " + string_body(min, max, hint) + " " + quote());
  }

  std::string array(const json& s, const std::string& path, const std::string& hint) {
    if (s.contains("prefixItems")) throw SchemaError(child(path, "prefixItems"), "unsupported keyword");
    std::string item = "value";
    if (s.contains("items")) {
      if (s["items"].is_array()) throw SchemaError(child(path, "items"), "tuple items are not supported");
      item = visit(s["items"], child(path, "items"), hint + "-item");
    }
    const int min = count(s, "minItems", path, 0);
    const int max = count(s, "maxItems", path, -1);
    if (max >= 0 && max < min) throw SchemaError(child(path, "maxItems"), "is below minItems");
    if (max == 0) return add_rule(hint, "\"[\" ws \"]\"");
    const std::string more = "(\",\" ws " + item + " ws)";
    std::string rep;
    const int lo = std::max(min - 1, 0);
    if (max < 0)
      rep = lo == 0 ? "*" : "{" + std::to_string(lo) + ",}";
    else
      rep = "{" + std::to_string(lo) + "," + std::to_string(max - 1) + "}";
    std::string list = item + " ws " + more + rep;
    return add_rule(hint, "\"[\" ws " + (min == 0 ? "(" + list + ")?" : list) + " \"]\"");
  }

  std::string object(const json& s, const std::string& path, const std::string& hint) {
    const json* props = nullptr;
    if (s.contains("properties")) {
      props = &s["properties"];
      if (!props->is_object()) throw SchemaError(child(path, "properties"), "must be an object");
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      const json& r = s["required"];
      if (!r.is_array()) throw SchemaError(child(path, "required"), "must be an array of names");
      for (size_t i = 0; i < r.size(); ++i) {
        if (!r[i].is_string()) throw SchemaError(index(child(path, "required"), i), "must be a string");
        if (!props || !props->contains(r[i].get<std::string>()))
          throw SchemaError(index(child(path, "required"), i),
                            "required property " + r[i].dump() + " is not in properties");
        required.insert(r[i].get<std::string>());
      }
    }
    const json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    if (extra && !extra->is_boolean() && !extra->is_object())
      throw SchemaError(child(path, "additionalProperties"), "must be a boolean or a schema");
    if (!props || props->empty()) {
      if (extra && extra->is_object()) {
        // A map: any keys, values of one schema.
        const std::string v = visit(*extra, child(path, "additionalProperties"), hint + "-value");
        const std::string kv = std::string(gemma_ ? "key" : "string") + " ws \":\" ws " + v + " ws";
        return add_rule(hint, "\"{\" ws (" + kv + " (\",\" ws " + kv + ")*)? \"}\"");
      }
      if (extra && extra->is_boolean() && !extra->get<bool>()) return add_rule(hint, "\"{\" ws \"}\"");
      return "object";
    }
    // Properties in order. first_i: nothing written yet, choose from property i on; rest_i: some
    // property written, choose from i on (each written one after a comma). Required ones cannot be
    // skipped. Extra properties are never written (a subset of what additionalProperties allows).
    std::vector<std::string> kvs;
    std::vector<bool> req;
    for (const auto& [name, sub] : props->items()) {
      const std::string v = visit(sub, child(child(path, "properties"), name), hint + "-" + name);
      kvs.push_back(key_lit(name, child(child(path, "properties"), name)) + " ws \":\" ws " + v + " ws");
      req.push_back(required.count(name) > 0);
    }
    const size_t n = kvs.size();
    if (std::all_of(req.begin(), req.end(), [](bool b) { return b; })) {
      std::string body = "\"{\" ws";
      for (size_t i = 0; i < n; ++i) body += (i ? " \",\" ws " : " ") + kvs[i];
      return add_rule(hint, body + " \"}\"");
    }
    std::vector<std::string> first(n + 1), rest(n + 1);
    first[n] = rest[n] = "\"\"";
    const std::string base = unique_name(hint + "-props");
    for (size_t i = n; i-- > 0;) {
      const std::string r_body =
          "\",\" ws " + kvs[i] + " " + rest[i + 1] + (req[i] ? "" : " | " + rest[i + 1]);
      rest[i] = add_rule(base + "-rest" + std::to_string(i), r_body);
      const std::string f_body = kvs[i] + " " + rest[i + 1] + (req[i] ? "" : " | " + first[i + 1]);
      first[i] = add_rule(base + "-first" + std::to_string(i), f_body);
    }
    return add_rule(hint, "\"{\" ws " + first[0] + " \"}\"");
  }

  bool gemma_;  // Gemma 4's tool-call syntax instead of JSON (kGemmaRules)
  const json* root_ = nullptr;
  std::string root_path_ = "$";
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> used_ = {"root",  "ws",      "char", "string", "integer", "number", "key",
                                 "pchar", "boolean", "null", "value",  "object",  "array"};
  std::map<std::string, std::string> refs_;
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  Compiler c(false);
  const std::string r = c.add(schema, "$", "root-value");
  return "root ::= " + r + "\n" + c.rules();
}

struct SchemaGrammar::Impl {
  explicit Impl(bool gemma) : c(gemma) {}
  Compiler c;
};

SchemaGrammar::SchemaGrammar(Syntax syntax)
    : impl_(std::make_unique<Impl>(syntax == Syntax::kGemmaToolCall)) {}
SchemaGrammar::~SchemaGrammar() = default;
std::string SchemaGrammar::add(const nlohmann::ordered_json& schema, const std::string& path,
                               const std::string& hint) {
  return impl_->c.add(schema, path, hint);
}
void SchemaGrammar::rule(const std::string& name, const std::string& body) {
  impl_->c.add_rule_named(name, body);
}
std::string SchemaGrammar::gbnf() const { return impl_->c.rules(); }

std::string json_schema_to_gbnf(std::string_view schema_text) {
  json schema;
  try {
    schema = json::parse(schema_text);
  } catch (const json::parse_error& e) {
    throw SchemaError("$", std::string("the schema is not valid JSON: ") + e.what());
  }
  return json_schema_to_gbnf(schema);
}

std::string json_object_gbnf() { return std::string("root ::= object\n") + kCommonRules; }

}  // namespace gem4::generate::grammar
