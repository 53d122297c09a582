// llama.cpp's GBNF grammar language, parsed into a byte-level Grammar (grammar.h).
//
// Accepted: rules `name ::= alternatives` (names of letters, digits, '-' and '_'), literals "..."
// and character classes [...] / [^...] with ranges, '.' (any character), rule references, groups
// ( ... ), alternation |, the quantifiers ? * + {m} {m,} {m,n}, and # comments. Escapes in literals
// and classes: \n \r \t \\ \" \[ \] \- \/ \xHH \uHHHH \UHHHHHHHH. As in llama.cpp, a newline ends a
// rule except inside a group or right after '|'. The start rule is `root`.
// Tokens, as in llama.cpp: `<[id]>` matches the token with that id, and `<text>` (from '<' to the
// first '>') the token whose text is exactly that, looked up with `tokens` (e.g. `<|"|>`, Gemma 4's
// string delimiter); either matches only that whole token, never its text written in other tokens.
// Token negation (`!<...>`) is not supported.
// Errors (GrammarError) give the line and column: "line 3, column 7: expected '::='".
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include "generate/grammar/grammar.h"

namespace gem4::generate::grammar {

// The id of the token whose text is exactly `text`, or nullopt.
using TokenLookup = std::function<std::optional<int32_t>(std::string_view text)>;

Grammar parse_gbnf(std::string_view text, std::string_view root = "root", const TokenLookup& tokens = {});

}  // namespace gem4::generate::grammar
