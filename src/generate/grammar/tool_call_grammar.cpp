#include "generate/grammar/tool_call_grammar.h"

#include "generate/grammar/gbnf.h"
#include "generate/grammar/json_schema.h"
#include "generate/grammar/matcher.h"
#include "text/output_parser.h"

namespace gem4::generate::grammar {

namespace {

// A GBNF literal of a tool name (valid_function_name has ruled out '"' but not '\').
std::string name_literal(const std::string& name) {
  std::string out = "\"call:";
  for (char c : name) {
    if (c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// The arguments must be an object: the parser reads `call:NAME{...}` only. Checked on the
// compiled rule rather than on the schema's keywords, so $ref, anyOf and allOf of objects pass: the
// rule's first byte must be '{' on every branch.
void check_object(const std::string& gbnf, const std::string& rule, const std::string& path) {
  // Any token id will do: only the first byte is looked at.
  const TokenLookup any_token = [](std::string_view) -> std::optional<int32_t> { return 0; };
  Matcher m(
      std::make_shared<Grammar>(parse_gbnf(gbnf + "check-root ::= " + rule + "\n", "check-root", any_token)));
  StackSet after;
  for (int32_t id : m.initial()) {
    bool only_brace = id != kEmptyStack;
    for (int b = 0; only_brace && b < 256; ++b) {
      m.advance(StackSet{id}, uint8_t(b), after);
      only_brace = after.empty() == (b != '{');
    }
    if (!only_brace) throw SchemaError(path, "a tool's parameters must describe an object (type object)");
  }
}

}  // namespace

std::string gemma_tool_call_gbnf(const std::vector<ToolGrammarSpec>& tools) {
  if (tools.empty()) throw SchemaError("$", "no tools");
  SchemaGrammar sg(SchemaGrammar::Syntax::kGemmaToolCall);
  std::string root;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ToolGrammarSpec& t = tools[i];
    if (!text::valid_function_name(t.name))
      throw SchemaError(t.name_path,
                        "a strict tool's name must not contain whitespace or any of {}[]<>,:\"'");
    std::string args = "object";  // any arguments
    if (t.parameters) {
      args = sg.add(*t.parameters, t.path, "tool" + std::to_string(i));
      check_object(sg.gbnf(), args, t.path);
    }
    const std::string call = "call-" + std::to_string(i);
    sg.rule(call, name_literal(t.name) + " " + args + " <tool_call|>");
    root += (i ? " | " : "") + call;
  }
  sg.rule("root", root);
  return sg.gbnf();
}

}  // namespace gem4::generate::grammar
