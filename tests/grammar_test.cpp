// Grammar-constrained decoding: GBNF parsing and matching, the JSON Schema compiler, token masks
// against a brute-force reference, generation with the trained tiny model checked by an independent
// validator (python3-jsonschema), and speculation + constraint = plain constrained greedy.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "generate/constraint.h"
#include "generate/generate.h"
#include "generate/grammar/gbnf.h"
#include "generate/grammar/json_schema.h"
#include "generate/grammar/matcher.h"
#include "generate/grammar/token_trie.h"
#include "kernels/thread_pool.h"
#include "model/model.h"
#include "test_util.h"
#include "text/tokenizer.h"
#include "tiny_grammar_model.h"

namespace gem4 {
namespace {

using generate::GrammarConstraint;
using namespace generate::grammar;
using nlohmann::json;

std::shared_ptr<const Grammar> gbnf(const std::string& text) {
  return std::make_shared<Grammar>(parse_gbnf(text));
}

bool match(const std::string& grammar, const std::string& text) {
  Matcher m(gbnf(grammar));
  return m.matches(text);
}

const char* kArithmetic = R"g(
root  ::= expr
expr  ::= term (("+" | "-") term)*
term  ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")"
)g";

const char* kList = R"(
# a bulleted list of one to three items
root ::= item{1,3}
item ::= "- " [a-z ]+ "\n"
)";

TEST(GrammarGbnf, ArithmeticAndList) {
  EXPECT_TRUE(match(kArithmetic, "1+2*(3-4)/56"));
  EXPECT_TRUE(match(kArithmetic, "7"));
  EXPECT_FALSE(match(kArithmetic, "1+"));
  EXPECT_FALSE(match(kArithmetic, "(1"));
  EXPECT_FALSE(match(kArithmetic, "a"));
  EXPECT_TRUE(match(kList, "- milk\n"));
  EXPECT_TRUE(match(kList, "- milk\n- two eggs\n- tea\n"));
  EXPECT_FALSE(match(kList, "- a\n- b\n- c\n- d\n"));
  EXPECT_FALSE(match(kList, ""));
}

TEST(GrammarGbnf, LiteralsClassesAndRepetition) {
  EXPECT_TRUE(match(R"(root ::= "a\"b\\c\n\x41\u00e9")", "a\"b\\c\nAé"));
  EXPECT_TRUE(match(R"(root ::= [^a]+)", "é日本x"));
  EXPECT_FALSE(match(R"(root ::= [^a]+)", "bab"));
  EXPECT_TRUE(match(R"(root ::= [α-ω]{2})", "αω"));
  EXPECT_FALSE(match(R"(root ::= [α-ω]{2})", "αa"));
  EXPECT_TRUE(match(R"(root ::= . . .)", "a€😀"));
  EXPECT_FALSE(match(R"(root ::= "x"{2,3})", "x"));
  EXPECT_TRUE(match(R"(root ::= "x"{2,3})", "xxx"));
  EXPECT_FALSE(match(R"(root ::= "x"{2,3})", "xxxx"));
  EXPECT_TRUE(match(R"(root ::= "x"{2,})", "xxxxxx"));
  EXPECT_TRUE(match(R"(root ::= ("ab" | "c")? "d")", "d"));
  EXPECT_TRUE(match(R"(root ::= ("ab" | "c")? "d")", "abd"));
  EXPECT_TRUE(match("root ::= a |\n  b\na ::= \"A\"\nb ::= [\\-\\]]", "]"));
  // An invalid UTF-8 byte never matches a class of code points.
  EXPECT_FALSE(match(R"(root ::= [^a])", "\xff"));
}

TEST(GrammarGbnf, JsonGrammar) {
  const std::string g = json_object_gbnf();
  EXPECT_TRUE(match(g, R"({"a": [1, 2.5e3, {"b": null}], "c": "\u00e9\n"})"));
  EXPECT_TRUE(match(g, "{}"));
  EXPECT_FALSE(match(g, R"({"a": })"));
  EXPECT_FALSE(match(g, R"([1])"));
  EXPECT_FALSE(match(g, R"({"a": 01})"));
}

TEST(GrammarGbnf, ErrorsNameTheProblem) {
  auto error = [](const std::string& g) {
    try {
      parse_gbnf(g);
    } catch (const GrammarError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("root ::= foo").find("'foo' is used but never defined"), std::string::npos);
  EXPECT_NE(error("root ::= root \"a\" | \"b\"").find("left recursive"), std::string::npos);
  EXPECT_NE(error("root ::= x\nx ::= \"\"? x \"a\"").find("left recursive"), std::string::npos);
  EXPECT_NE(error("root ::= \"a\"\nfoo ::= [a").find("line 2"), std::string::npos);
  EXPECT_NE(error("other ::= \"a\"").find("no 'root'"), std::string::npos);
  EXPECT_NE(error("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
}

TEST(GrammarSchema, ErrorsNameTheSchemaPath) {
  auto error = [](const char* schema) {
    try {
      json_schema_to_gbnf(nlohmann::ordered_json::parse(schema));
    } catch (const SchemaError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error(R"({"type":"object","properties":{"age":{"type":"integer","minimum":"x"}}})"),
            "$.properties.age.minimum: must be a number");
  EXPECT_EQ(error(R"({"type":"array","items":{"type":"strin"}})"), "$.items.type: unknown type \"strin\"");
  EXPECT_EQ(error(R"({"$ref":"#/$defs/missing"})"), "$.$ref: reference \"#/$defs/missing\" does not resolve");
  EXPECT_EQ(error(R"({"type":"object","properties":{"a":{"not":{}}}})"),
            "$.properties.a.not: unsupported keyword");
  EXPECT_EQ(error(R"j({"anyOf":[{"type":"string"},{"type":"string","pattern":"(?=x)"}]})j").substr(0, 22),
            "$.anyOf[1].pattern: pa");
  EXPECT_EQ(error(R"({"type":"object","required":["a"]})"),
            "$.required[0]: required property \"a\" is not in properties");
}

TEST(GrammarSchema, CompiledGrammarsAcceptAndReject) {
  auto m = [](const char* schema, const char* text) {
    Matcher mm(
        std::make_shared<Grammar>(parse_gbnf(json_schema_to_gbnf(nlohmann::ordered_json::parse(schema)))));
    return mm.matches(text);
  };
  const char* person = R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer",
    "minimum":0,"maximum":150},"nick":{"type":"string"}},"required":["name","age"],"additionalProperties":false})";
  EXPECT_TRUE(m(person, R"({"name": "Ann", "age": 150})"));
  EXPECT_TRUE(m(person, R"({"name":"Ann","age":7,"nick":"A"})"));
  EXPECT_FALSE(m(person, R"({"name":"Ann","age":151})"));
  EXPECT_FALSE(m(person, R"({"age":7})"));
  EXPECT_FALSE(m(person, R"({"name":"Ann","age":7,"x":1})"));
  EXPECT_FALSE(m(person, R"({"name":"Ann","age":07})"));
  const char* range = R"({"type":"integer","minimum":-40,"maximum":1234})";
  for (int v : {-40, -9, 0, 5, 99, 1000, 1234}) EXPECT_TRUE(m(range, std::to_string(v).c_str())) << v;
  for (int v : {-41, -100, 1235, 2000, 9999}) EXPECT_FALSE(m(range, std::to_string(v).c_str())) << v;
  const char* arr = R"({"type":"array","items":{"type":"boolean"},"minItems":2,"maxItems":3})";
  EXPECT_FALSE(m(arr, "[true]"));
  EXPECT_TRUE(m(arr, "[true, false]"));
  EXPECT_FALSE(m(arr, "[true,true,true,true]"));
  EXPECT_TRUE(m(R"({"type":"string","pattern":"^a(b|c)*$"})", R"("abcb")"));
  EXPECT_FALSE(m(R"({"type":"string","pattern":"^a(b|c)*$"})", R"("abd")"));
  EXPECT_TRUE(m(R"({"type":"string","pattern":"x\\d"})", R"("..x1..")"));
  EXPECT_TRUE(m(R"({"type":"string","minLength":2,"maxLength":3})", R"("\n\u0041")"));
  EXPECT_FALSE(m(R"({"type":"string","minLength":2,"maxLength":3})", R"("abcd")"));
}

// ---- with the tiny model's vocabulary and weights ----

class GrammarModel : public test::TinyGrammarModel {
 protected:
  static std::unique_ptr<Session> session() {
    SessionOptions o;
    o.n_ctx = 512;
    o.kv_type = KvType::F32;
    return std::make_unique<Session>(*model_, pool_, o);
  }
  static std::shared_ptr<GrammarConstraint> constraint(const std::string& gbnf_text) {
    return std::make_shared<GrammarConstraint>(gbnf(gbnf_text), *trie_);
  }
  static generate::GenerateRequest request(const std::string& prompt, float temperature, uint64_t seed) {
    generate::GenerateRequest r;
    r.prompt = tokenizer_->encode(prompt, true, true);
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.max_tokens = 800;
    return r;
  }
};

// The mask of every state along a document equals feeding each token's bytes one by one.
TEST_F(GrammarModel, MaskMatchesBruteForce) {
  const std::string g = json_schema_to_gbnf(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"n":{"type":"integer","minimum":-5,
          "maximum":300},"tags":{"type":"array","items":{"enum":["a","bc"]}}},"required":["name"]})"));
  auto grammar = gbnf(g);
  GrammarConstraint c(grammar, *trie_);
  Matcher ref(grammar);
  const std::string doc = R"({"name": "x\"é", "n": -3, "tags": ["bc", "a"]})";
  const auto ids = tokenizer_->encode(doc, false, false);
  const int V = tokenizer_->n_vocab();
  StackSet state = ref.initial();
  for (size_t step = 0; step <= ids.size(); ++step) {
    const auto& mask = c.mask();
    int allowed = 0;
    for (int32_t t = 0; t < V; ++t) {
      bool expect;
      if (tokenizer_->is_eog(t)) {
        expect = Matcher::can_end(state);
      } else if (!(tokenizer_->is_normal(t) || tokenizer_->is_byte(t))) {
        expect = false;
      } else {
        const std::string b = tokenizer_->token_piece(t, false);
        StackSet s = state;
        expect = !b.empty() && ref.feed(s, reinterpret_cast<const uint8_t*>(b.data()), b.size());
      }
      const bool got = (mask[t / 64] >> (t % 64)) & 1;
      ASSERT_EQ(got, expect) << "step " << step << " token " << t << " '" << tokenizer_->token_piece(t)
                             << "'";
      allowed += got;
    }
    EXPECT_GT(allowed, 0) << "step " << step;
    if (step == ids.size()) break;
    const std::string b = tokenizer_->token_piece(ids[step], false);
    ASSERT_TRUE(ref.feed(state, reinterpret_cast<const uint8_t*>(b.data()), b.size()));
    c.accept(ids[step]);
  }
  EXPECT_TRUE(c.can_end());
  // Rolling back returns to earlier masks.
  c.rollback(int(ids.size()));
  EXPECT_EQ(c.accepted(), 0);
  EXPECT_FALSE(c.allows(tokenizer_->eog_ids()[0]));
}

// 40 schemas, greedy and temperature 1 with two seeds: every output parses and validates with
// python3-jsonschema, and is in the grammar's language.
TEST_F(GrammarModel, FortySchemasGenerateValidJson) {
  std::ifstream f(std::string(GEM4_SOURCE_DIR) + "/tests/data/grammar_schemas.json");
  ASSERT_TRUE(f);
  const nlohmann::ordered_json schemas = nlohmann::ordered_json::parse(f);
  ASSERT_EQ(schemas.size(), 40u);
  const std::string cases = testing::TempDir() + "gem4_grammar_cases.jsonl";
  std::ofstream out(cases);
  auto s = session();
  int n = 0;
  for (size_t i = 0; i < schemas.size(); ++i) {
    auto grammar = gbnf(json_schema_to_gbnf(schemas[i]));
    auto c = std::make_shared<GrammarConstraint>(grammar, *trie_);
    const struct {
      float temp;
      uint64_t seed;
    } runs[] = {{0, 0}, {1, 1}, {1, 2}};
    for (const auto& run : runs) {
      auto req = request("Reply in JSON.", run.temp, run.seed);
      req.constraint = c;
      const auto res = generate::generate(*s, *tokenizer_, req);
      const std::string label = "schema " + std::to_string(i) + " temp " + std::to_string(int(run.temp)) +
                                " seed " + std::to_string(run.seed);
      EXPECT_EQ(res.stats.stop, generate::StopReason::Eog) << label << ": " << res.text;
      Matcher m(grammar);
      EXPECT_TRUE(m.matches(res.text)) << label << ": " << res.text;
      out << nlohmann::ordered_json{{"schema", schemas[i]}, {"output", res.text}, {"label", label}}.dump()
          << "\n";
      ++n;
    }
  }
  out.close();
  EXPECT_EQ(n, 120);
  const auto [rc, report] = test::validate_json_cases(cases);
  EXPECT_EQ(rc, 0) << report;
  EXPECT_NE(report.find("120/120 valid"), std::string::npos) << report;
}

// Thinking on: the first token may open a thought block; inside it anything but end of generation
// goes; the grammar starts after the closing token, and rolling back crosses the phases.
TEST_F(GrammarModel, ThinkingStaysUnconstrained) {
  auto c = constraint(json_object_gbnf());
  const auto open = tokenizer_->find_token("<|channel>"), close = tokenizer_->find_token("<channel|>");
  ASSERT_TRUE(open && close) << "the tiny model's vocabulary has Gemma 4's thought-block tokens";
  const int32_t eog = tokenizer_->eog_ids()[0];
  const auto words = tokenizer_->encode("thought\nLet me think", false, false);
  const auto brace = tokenizer_->encode("{", false, false);
  ASSERT_EQ(brace.size(), 1u);
  EXPECT_FALSE(c->allows(*open)) << "thinking is off by default";
  generate::allow_gemma_thinking(*c, *tokenizer_);
  EXPECT_TRUE(c->allows(*open));
  EXPECT_TRUE(c->allows(brace[0]));  // the answer may start at once
  EXPECT_FALSE(c->allows(words.back()));
  c->accept(*open);
  for (int32_t t : words) {
    EXPECT_TRUE(c->allows(t)) << tokenizer_->token_piece(t);
    EXPECT_FALSE(c->allows(eog));
    EXPECT_FALSE(c->can_end());
    c->accept(t);
  }
  EXPECT_TRUE(c->allows(*close));
  c->accept(*close);
  EXPECT_FALSE(c->allows(words.back())) << "the answer follows the grammar";
  EXPECT_FALSE(c->allows(*open)) << "one thought block, before the answer";
  EXPECT_TRUE(c->allows(brace[0]));
  for (int32_t t : tokenizer_->encode("{\"a\": 1}", false, false)) c->accept(t);
  EXPECT_TRUE(c->can_end());
  c->rollback(c->accepted() - 1);  // back inside the thought block
  EXPECT_TRUE(c->allows(words.back()));
  EXPECT_FALSE(c->allows(eog));
  c->reset();  // a new reply may think again
  EXPECT_TRUE(c->allows(*open));
  // Without opening a thought block, the answer is constrained from the first token.
  c->accept(brace[0]);
  EXPECT_FALSE(c->allows(*open));
  EXPECT_FALSE(c->allows(words.back()));
}

TEST_F(GrammarModel, GbnfConstrainsGeneration) {
  auto s = session();
  for (const char* g : {kArithmetic, kList}) {
    auto req = request("Write:", 1.0f, 7);
    req.constraint = constraint(g);
    const auto res = generate::generate(*s, *tokenizer_, req);
    Matcher m(gbnf(g));
    EXPECT_TRUE(m.matches(res.text) || res.stats.stop == generate::StopReason::Length) << res.text;
    StackSet st = m.initial();
    EXPECT_TRUE(m.feed(st, reinterpret_cast<const uint8_t*>(res.text.data()), res.text.size())) << res.text;
  }
}

// A drafter that proposes the reference continuation with every other token replaced, at random,
// by a token the grammar may reject.
class NoisyDrafter : public generate::Drafter {
 public:
  NoisyDrafter(std::vector<int32_t> reference, int prompt_len, int n_vocab)
      : ref_(std::move(reference)), prompt_len_(prompt_len), n_vocab_(n_vocab) {}
  const char* name() const override { return "noisy"; }
  void draft(const generate::DraftRequest& req, generate::Draft& out) override {
    const int at = int(req.tokens->size()) - prompt_len_;  // reference index of the next token
    for (int i = 0; i < req.n_max && at + i < int(ref_.size()); ++i)
      out.tokens.push_back(rng_() % 3 == 0 ? int32_t(rng_() % n_vocab_) : ref_[at + i]);
  }

 private:
  std::vector<int32_t> ref_;
  int prompt_len_, n_vocab_;
  std::mt19937_64 rng_{5};
};

TEST_F(GrammarModel, SpeculationKeepsConstrainedGreedy) {
  const std::string g = json_schema_to_gbnf(
      nlohmann::ordered_json::parse(R"({"type":"object","properties":{"a":{"type":"string",
      "maxLength":12},"b":{"type":"array","items":{"type":"integer","minimum":0,"maximum":999},"maxItems":4}},
      "required":["a","b"],"additionalProperties":false})"));
  auto s = session();
  auto req = request("JSON please:", 0, 0);
  req.constraint = constraint(g);
  const auto plain = generate::generate(*s, *tokenizer_, req);
  ASSERT_GT(plain.tokens.size(), 3u);
  NoisyDrafter drafter(plain.tokens, int(req.prompt.size()), tokenizer_->n_vocab());
  for (bool with_sampler : {false, true}) {
    auto s2 = session();
    generate::SpecOptions opt;
    opt.draft_max = 4;
    s2->speculate(&drafter, opt);
    req.use_sampler = with_sampler;
    req.constraint = constraint(g);
    generate::SpecStats stats;
    const auto spec = generate::generate(*s2, *tokenizer_, req, nullptr, &stats);
    EXPECT_EQ(spec.tokens, plain.tokens) << spec.text << " vs " << plain.text;
    EXPECT_GT(stats.accepted, 0);
    EXPECT_LT(stats.accepted, stats.drafted);  // some drafts were rejected
  }
}

}  // namespace
}  // namespace gem4
