// The grammar of a Gemma 4 tool call, for tools declared with `strict: true`.
//
// The model writes a call as <|tool_call>call:NAME{key:value,...}<tool_call|> (text/output_parser.h
// reads it back). The grammar describes what follows the opening token, which is where
// GrammarConstraint::set_trigger starts it:
//   root   ::= call-0 | call-1 | ...            one of the declared tools
//   call-i ::= "call:NAME" ARGS <tool_call|>
// ARGS is the tool's `parameters` schema in Gemma's argument syntax (SchemaGrammar::kGemmaToolCall)
// for a strict tool, and any arguments object for the others: their arguments stay free, but the
// call still parses. The grammar uses token references (<|"|>, <tool_call|>), so parse it with the
// tokenizer's lookup.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gem4::generate::grammar {

struct ToolGrammarSpec {
  std::string name;
  // The parameters schema of a strict tool; null: any arguments. A missing schema of a strict
  // tool means no arguments: pass {"type":"object","properties":{},"additionalProperties":false}.
  const nlohmann::ordered_json* parameters = nullptr;
  std::string path = "$";          // where the schema sits, for SchemaError paths
  std::string name_path = "name";  // where the name sits
};

// GBNF for one call of one of `tools`. Throws SchemaError naming the schema path for a schema that
// cannot be compiled or does not describe an object (at `path`), or for a name the output parser
// could not read back (at `name_path`).
std::string gemma_tool_call_gbnf(const std::vector<ToolGrammarSpec>& tools);

}  // namespace gem4::generate::grammar
