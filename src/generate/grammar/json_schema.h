// JSON Schema -> GBNF (gbnf.h), for the subset OpenAI's strict structured outputs accept, and
// "any JSON object" for response_format json_object.
//
// Supported: type (a name or a list), object properties (in the order given; required ones always
// written, optional ones may be left out), additionalProperties (false, true or a schema; without
// properties a schema makes a map), array items with minItems/maxItems, enum, const, string
// minLength/maxLength/pattern (a simple regex: literals, ., classes, \d \w \s, groups, |, * + ?
// {m,n}, ^ $) and format (date, time, date-time, uuid, email), integer minimum/maximum/
// exclusiveMinimum/exclusiveMaximum (exact), number bounds (the integer part is bounded exactly,
// the fraction loosely: see the note in json_schema.cpp), anyOf/oneOf (oneOf is not checked to be
// exclusive), allOf of one schema, $ref to #, #/$defs/... and #/definitions/..., nullable.
// Annotations (title, description, default, examples, $schema, $id, $comment, strict) are ignored.
// Anything else throws SchemaError naming the schema path: "$.properties.age.minimum: ...".
//
// The output allows at most a little whitespace (one space, or a newline and up to 20 spaces) between
// tokens, and numbers of at most 16 digits, so a constrained model cannot run on forever in padding.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gem4::generate::grammar {

class SchemaError : public std::runtime_error {
 public:
  SchemaError(const std::string& path, const std::string& what)
      : std::runtime_error(path + ": " + what), path(path) {}
  std::string path;
};

// GBNF text whose root matches exactly the JSON documents the schema describes (within the subset).
// An ordered_json keeps the properties in the order written (nlohmann::json sorts them by name).
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);
std::string json_schema_to_gbnf(std::string_view schema_text);  // throws SchemaError("$", ...) on bad JSON
// GBNF for any JSON object ({"type":"json_object"}).
std::string json_object_gbnf();

// Several schemas in one grammar, in JSON or in Gemma 4's tool-call argument syntax
// (text/output_parser.h): strings between <|"|> tokens (GBNF token references, so the grammar must
// be parsed with the tokenizer's lookup) and without escapes, keys bare unless they hold structural
// characters, numbers/true/false/null bare, no whitespace. In that syntax a string never contains
// the text <|"|>, and a string with a `pattern` (or `format`) never contains '<' at all.
class SchemaGrammar {
 public:
  enum class Syntax { kJson, kGemmaToolCall };
  explicit SchemaGrammar(Syntax syntax);
  ~SchemaGrammar();
  // The name of the rule matching `schema`; SchemaError paths start with `path` (e.g. "$", or
  // "tools[0].function.parameters"), and its $refs resolve within `schema`. `hint` names the rules.
  std::string add(const nlohmann::ordered_json& schema, const std::string& path, const std::string& hint);
  // A rule of the caller's (e.g. root); `body` may use the names add() returned and the common rules
  // (string, number, integer, boolean, null, value, object, array; Gemma: key).
  void rule(const std::string& name, const std::string& body);
  // GBNF: every rule so far plus the common ones.
  std::string gbnf() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gem4::generate::grammar
