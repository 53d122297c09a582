// Turns a stream of token ids into text that is always well-formed UTF-8.
//
// A byte-fallback token (<0xE4>) carries one byte of a character, so the pieces of single tokens
// are often not whole characters. push() returns only complete characters and holds back a
// sequence that may still be completed by the next token; flush() ends the stream. A byte
// sequence that can never become a valid character becomes one U+FFFD per maximal invalid part
// (the Unicode recommendation), so for well-formed output the concatenation of push() and flush()
// results equals Tokenizer::decode of the same ids.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "text/tokenizer.h"

namespace gem4::text {

class StreamingDetokenizer {
 public:
  // `special` as in Tokenizer::token_piece: write CONTROL tokens out, or drop them.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool special = true)
      : tokenizer_(tokenizer), special_(special) {}

  std::string push(int32_t id);  // throws TokenizerError on an id out of range
  std::string flush();           // emits what was held back (an unfinished character as U+FFFD)
  void reset() { pending_.clear(); }
  size_t pending_bytes() const { return pending_.size(); }

 private:
  Tokenizer tokenizer_;  // a cheap shared handle
  bool special_;
  std::string pending_;
};

// Appends the well-formed UTF-8 prefix of `bytes` to `out`, with U+FFFD for invalid parts.
// Returns how many bytes were consumed: all of them when `final`, otherwise everything except an
// unfinished (so far valid) character at the end.
size_t append_valid_utf8(std::string& out, std::string_view bytes, bool final);

}  // namespace gem4::text
