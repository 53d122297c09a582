#include "generate/grammar/gbnf.h"

#include <map>
#include <optional>
#include <string>
#include <unordered_map>

namespace gem4::generate::grammar {

namespace {

struct Item {
  Element::Kind kind;  // Bytes, Ref or Token
  int32_t value;       // as Element::value
};
using Alt = std::vector<Item>;

class Parser {
 public:
  Parser(std::string_view text, const TokenLookup* lookup) : s_(text), lookup_(lookup) {}

  Grammar run(std::string_view root_name) {
    skip_space(true);
    while (p_ < s_.size()) {
      parse_rule();
      skip_space(true);
    }
    for (const auto& [name, id] : ids_)
      if (!defined_[id]) throw GrammarError("rule '" + name + "' is used but never defined");
    const auto root = ids_.find(std::string(root_name));
    if (root == ids_.end()) throw GrammarError("the grammar has no '" + std::string(root_name) + "' rule");
    Grammar g;
    g.byte_sets = std::move(sets_);
    g.rule_names = names_;
    g.root = root->second;
    for (const auto& alts : rules_) {
      std::vector<int32_t> starts;
      for (const Alt& a : alts) {
        starts.push_back(int32_t(g.elements.size()));
        for (const Item& it : a) g.elements.push_back({it.kind, it.value});
        g.elements.push_back({Element::End, 0});
      }
      g.rule_alts.push_back(std::move(starts));
    }
    check_not_left_recursive(g);
    return g;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < p_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw GrammarError("line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what);
  }

  bool at_end() const { return p_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[p_]; }

  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = s_[p_];
      if (c == '#') {
        while (!at_end() && s_[p_] != '\n') ++p_;
      } else if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newlines)) {
        ++p_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  std::string parse_name() {
    const size_t b = p_;
    while (!at_end() && name_char(s_[p_])) ++p_;
    if (p_ == b) fail("expected a rule name");
    return std::string(s_.substr(b, p_ - b));
  }

  int32_t rule_id(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const int32_t id = new_rule(name);
    ids_[name] = id;
    return id;
  }

  int32_t new_rule(const std::string& name) {
    rules_.emplace_back();
    names_.push_back(name);
    defined_.push_back(false);
    return int32_t(rules_.size() - 1);
  }

  int32_t generated_rule(std::vector<Alt> alts) {
    const int32_t id = new_rule(current_ + "_" + std::to_string(++generated_));
    rules_[id] = std::move(alts);
    defined_[id] = true;
    return id;
  }

  int32_t byte_set(const ByteSet& b) {
    auto key = b.to_string();
    auto it = set_ids_.find(key);
    if (it != set_ids_.end()) return it->second;
    sets_.push_back(b);
    const int32_t id = int32_t(sets_.size() - 1);
    set_ids_.emplace(std::move(key), id);
    return id;
  }

  void parse_rule() {
    current_ = parse_name();
    const int32_t id = rule_id(current_);
    if (defined_[id]) fail("rule '" + current_ + "' is defined twice");
    skip_space(false);
    if (s_.substr(p_, 3) != "::=") fail("expected '::='");
    p_ += 3;
    skip_space(true);
    auto alts = parse_alternates(false);
    rules_[id] = std::move(alts);
    defined_[id] = true;
    skip_space(false);
    if (!at_end() && peek() != '\n' && peek() != '\r') fail("expected the end of the rule");
  }

  std::vector<Alt> parse_alternates(bool nested) {
    std::vector<Alt> alts;
    alts.push_back(parse_sequence(nested));
    while (peek() == '|') {
      ++p_;
      skip_space(true);
      alts.push_back(parse_sequence(nested));
    }
    return alts;
  }

  // One code point of a literal or class, escapes decoded.
  uint32_t parse_char() {
    if (at_end()) fail("unexpected end of input");
    const unsigned char c = s_[p_];
    if (c == '\\') {
      ++p_;
      if (at_end()) fail("unexpected end after '\\'");
      const char e = s_[p_++];
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '/':
          return uint32_t(e);
        case 'x':
          return parse_hex(2);
        case 'u':
          return parse_hex(4);
        case 'U':
          return parse_hex(8);
        default:
          --p_;
          fail(std::string("unknown escape '\\") + e + "'");
      }
    }
    // A UTF-8 sequence.
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || p_ + n > s_.size()) fail("invalid UTF-8");
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < n; ++i) {
      const unsigned char cc = s_[p_ + i];
      if ((cc & 0xC0) != 0x80) fail("invalid UTF-8");
      cp = (cp << 6) | (cc & 0x3F);
    }
    p_ += n;
    return cp;
  }

  uint32_t parse_hex(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      const char h = peek();
      int d;
      if (h >= '0' && h <= '9')
        d = h - '0';
      else if (h >= 'a' && h <= 'f')
        d = h - 'a' + 10;
      else if (h >= 'A' && h <= 'F')
        d = h - 'A' + 10;
      else
        fail("expected " + std::to_string(n) + " hex digits");
      v = v * 16 + d;
      ++p_;
    }
    if (v > 0x10FFFF) fail("code point above U+10FFFF");
    return v;
  }

  void push_code_point(uint32_t cp, Alt& out) {
    for (const auto& seq : utf8_byte_ranges({{cp, cp}}))
      for (auto [lo, hi] : seq) {
        ByteSet b;
        for (int x = lo; x <= hi; ++x) b.set(x);
        out.push_back({Element::Bytes, byte_set(b)});
      }
  }

  // A class of code points as items: one byte set when every member is one byte long, else a rule
  // whose alternatives are the UTF-8 byte-range sequences.
  void push_class(std::vector<CodeRange> ranges, bool negate, Alt& out) {
    const auto seqs = utf8_byte_ranges(normalize_ranges(std::move(ranges), negate));
    if (seqs.empty()) fail("the character class matches nothing");
    ByteSet single;
    std::vector<Alt> alts;
    for (const auto& seq : seqs) {
      if (seq.size() == 1) {
        for (int x = seq[0].first; x <= seq[0].second; ++x) single.set(x);
        continue;
      }
      Alt a;
      for (auto [lo, hi] : seq) {
        ByteSet b;
        for (int x = lo; x <= hi; ++x) b.set(x);
        a.push_back({Element::Bytes, byte_set(b)});
      }
      alts.push_back(std::move(a));
    }
    if (alts.empty()) {
      out.push_back({Element::Bytes, byte_set(single)});
      return;
    }
    if (single.any()) alts.insert(alts.begin(), Alt{{Element::Bytes, byte_set(single)}});
    out.push_back({Element::Ref, generated_rule(std::move(alts))});
  }

  Alt parse_sequence(bool nested) {
    Alt seq;
    size_t last_start = 0;
    bool have_last = false;
    while (!at_end()) {
      const char c = peek();
      if (c == '"') {
        ++p_;
        last_start = seq.size();
        have_last = true;
        while (peek() != '"') {
          if (at_end()) fail("unterminated literal");
          push_code_point(parse_char(), seq);
        }
        ++p_;
      } else if (c == '[') {
        ++p_;
        bool negate = false;
        if (peek() == '^') {
          negate = true;
          ++p_;
        }
        std::vector<CodeRange> ranges;
        while (peek() != ']') {
          if (at_end()) fail("unterminated character class");
          const uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (peek() == '-' && p_ + 1 < s_.size() && s_[p_ + 1] != ']') {
            ++p_;
            hi = parse_char();
            if (hi < lo) fail("character range out of order");
          }
          ranges.push_back({lo, hi});
        }
        ++p_;
        last_start = seq.size();
        have_last = true;
        push_class(std::move(ranges), negate, seq);
      } else if (c == '.') {
        ++p_;
        last_start = seq.size();
        have_last = true;
        push_class({}, true, seq);
      } else if (name_char(c)) {
        // A name followed by '::=' starts the next rule (possible only at the top level).
        const size_t save = p_;
        const std::string name = parse_name();
        size_t q = p_;
        while (q < s_.size() && (s_[q] == ' ' || s_[q] == '\t')) ++q;
        if (s_.substr(q, 3) == "::=") {
          p_ = save;
          break;
        }
        last_start = seq.size();
        have_last = true;
        seq.push_back({Element::Ref, rule_id(name)});
      } else if (c == '<') {
        last_start = seq.size();
        have_last = true;
        seq.push_back({Element::Token, parse_token()});
      } else if (c == '!' && p_ + 1 < s_.size() && s_[p_ + 1] == '<') {
        fail("token negation (!<...>) is not supported");
      } else if (c == '(') {
        ++p_;
        skip_space(true);
        auto alts = parse_alternates(true);
        if (peek() != ')') fail("expected ')'");
        ++p_;
        last_start = seq.size();
        have_last = true;
        seq.push_back({Element::Ref, generated_rule(std::move(alts))});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) fail(std::string("'") + c + "' has nothing to repeat");
        int min = 0, max = -1;  // max -1: unbounded
        ++p_;
        if (c == '+') {
          min = 1;
        } else if (c == '?') {
          max = 1;
        } else if (c == '{') {
          skip_space(false);
          min = parse_int();
          skip_space(false);
          if (peek() == ',') {
            ++p_;
            skip_space(false);
            max = peek() == '}' ? -1 : parse_int();
            skip_space(false);
          } else {
            max = min;
          }
          if (peek() != '}') fail("expected '}'");
          ++p_;
          if (max >= 0 && max < min) fail("repetition maximum below its minimum");
        }
        repeat(seq, last_start, min, max);
        have_last = false;
      } else {
        break;
      }
      skip_space(nested);
    }
    return seq;
  }

  // <[id]> (a token by id) or <text> (the token whose text is exactly `text`, up to the first '>',
  // as llama.cpp reads it); the id is checked against the vocabulary when the grammar is used.
  int32_t parse_token() {
    const size_t start = p_++;
    if (peek() == '[') {
      ++p_;
      const int id = parse_int(1 << 30, "token id too large");
      if (peek() != ']') fail("expected ']' in a token id");
      ++p_;
      if (peek() != '>') fail("expected '>' after a token id");
      ++p_;
      return int32_t(id);
    }
    const size_t close = s_.find('>', p_);
    if (close == std::string_view::npos) fail("unterminated token reference (expected '>')");
    const std::string_view text = s_.substr(start, close + 1 - start);
    if (!lookup_ || !*lookup_) {
      p_ = start;
      fail("token " + std::string(text) + " needs a vocabulary (use <[id]>, or parse with a tokenizer)");
    }
    const std::optional<int32_t> id = (*lookup_)(text);
    if (!id) {
      p_ = start;
      fail("token " + std::string(text) + " is not one token of the vocabulary");
    }
    p_ = close + 1;
    return *id;
  }

  int parse_int(long limit = 100000, const char* too_large = "repetition count too large") {
    const size_t b = p_;
    long v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > limit) fail(too_large);
      ++p_;
    }
    if (p_ == b) fail("expected a number");
    return int(v);
  }

  // Replaces seq[start..] (one symbol) with min copies and then (max - min) nested optionals, or a
  // starred rule when max is unbounded.
  void repeat(Alt& seq, size_t start, int min, int max) {
    Alt sym(seq.begin() + start, seq.end());
    seq.resize(start);
    if (sym.size() > 1) sym = {{Element::Ref, generated_rule({sym})}};
    for (int i = 0; i < min; ++i) seq.insert(seq.end(), sym.begin(), sym.end());
    if (max < 0) {
      // R ::= sym R | ε
      const int32_t r = new_rule(current_ + "_" + std::to_string(++generated_));
      Alt a = sym;
      a.push_back({Element::Ref, r});
      rules_[r] = {a, Alt{}};
      defined_[r] = true;
      seq.push_back({Element::Ref, r});
      return;
    }
    if (max == min) return;
    // opt_k ::= sym opt_{k-1} | ε, built from the innermost out.
    int32_t inner = -1;
    for (int k = 0; k < max - min; ++k) {
      Alt a = sym;
      if (inner >= 0) a.push_back({Element::Ref, inner});
      inner = generated_rule({a, Alt{}});
    }
    seq.push_back({Element::Ref, inner});
  }

  std::string_view s_;
  const TokenLookup* lookup_;  // null: only <[id]> token references
  size_t p_ = 0;
  std::string current_;
  int generated_ = 0;
  std::map<std::string, int32_t> ids_;
  std::vector<std::vector<Alt>> rules_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::vector<ByteSet> sets_;
  std::unordered_map<std::string, int32_t> set_ids_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text, std::string_view root, const TokenLookup& tokens) {
  return Parser(text, &tokens).run(root);
}

}  // namespace gem4::generate::grammar
