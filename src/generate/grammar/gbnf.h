// llama.cpp's GBNF grammar language, parsed into a byte-level Grammar (grammar.h).
//
// Accepted: rules `name ::= alternatives` (names of letters, digits, '-' and '_'), literals "..."
// and character classes [...] / [^...] with ranges, '.' (any character), rule references, groups
// ( ... ), alternation |, the quantifiers ? * + {m} {m,} {m,n}, and # comments. Escapes in literals
// and classes: \n \r \t \\ \" \[ \] \- \/ \xHH \uHHHH \UHHHHHHHH. As in llama.cpp, a newline ends a
// rule except inside a group or right after '|'. The start rule is `root`.
// Errors (GrammarError) give the line and column: "line 3, column 7: expected '::='".
#pragma once
#include <string_view>

#include "generate/grammar/grammar.h"

namespace gem4::generate::grammar {

Grammar parse_gbnf(std::string_view text, std::string_view root = "root");

}  // namespace gem4::generate::grammar
