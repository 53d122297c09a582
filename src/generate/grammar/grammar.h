// A compiled grammar over UTF-8 bytes: what the GBNF parser (gbnf.h) and the JSON Schema compiler
// (json_schema.h) produce, and what the matcher (matcher.h) walks.
//
// Every rule is a list of alternatives; every alternative is a run of elements in one flat array,
// ended by an End element. An element matches one byte from a set of 256 (character classes were
// split into UTF-8 byte sequences when the grammar was built, so the matcher never decodes UTF-8),
// matches one whole token of the vocabulary by id (GBNF's `<[id]>` / `<|"|>`: how a grammar names a
// special token such as Gemma 4's string delimiter, which has no bytes of its own in the output), or
// refers to another rule. No rule may be left recursive (checked at build time), so expanding a
// rule always reaches a byte element or the end of the input in finitely many steps.
#pragma once
#include <bitset>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gem4::generate::grammar {

class GrammarError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Element {
  enum Kind : uint8_t { End, Bytes, Ref, Token };
  Kind kind = End;
  int32_t value = 0;  // Bytes: index into Grammar::byte_sets; Ref: rule id; Token: token id
};

using ByteSet = std::bitset<256>;

struct Grammar {
  std::vector<Element> elements;                // all alternatives, each ended by End
  std::vector<std::vector<int32_t>> rule_alts;  // per rule: the start index of each alternative
  std::vector<std::string> rule_names;          // per rule, for messages
  std::vector<ByteSet> byte_sets;
  int32_t root = 0;
};

// A code point range [lo, hi], both inclusive.
struct CodeRange {
  uint32_t lo, hi;
};

// The UTF-8 encodings of the code points in `ranges` (surrogates excluded), as sequences of byte
// ranges: each returned sequence of n pairs matches exactly the n-byte encodings of one block of
// code points. The blocks together cover the ranges once.
std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_byte_ranges(std::vector<CodeRange> ranges);

// Sorted, merged, and (with `negate`) complemented over [0, 0x10FFFF].
std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges, bool negate);

// Throws GrammarError naming the rule when a rule can derive itself at its leftmost position
// (directly, or through rules that can match the empty string).
void check_not_left_recursive(const Grammar& g);

}  // namespace gem4::generate::grammar
