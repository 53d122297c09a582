// Grammar-constraint cost on the real Gemma 4 vocabulary (262,144 tokens), against the sampling step
// it is added to.
//   gem4_kernel_bench --benchmark_filter='Grammar'
// Sample/plain:       the sampler chain (temperature 1, top-k 64, top-p 0.95) on one logits row.
// Sample/constrained: the same after GrammarConstraint::apply, walking the tokens of a document of a
//                     nested-object schema (masks cached per state after the first pass).
// Mask/cold:          a mask computed from scratch (one scan of the vocabulary trie), per state.
// The counter trie_ms is the time to build the vocabulary trie (once per tokenizer).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "generate/constraint.h"
#include "generate/grammar/gbnf.h"
#include "generate/grammar/json_schema.h"
#include "generate/sampler.h"
#include "gguf/gguf.h"
#include "text/tokenizer.h"

namespace gem4 {
namespace {

std::string vocab_path() {
#ifdef GEM4_SOURCE_DIR
  std::string root = GEM4_SOURCE_DIR;
#else
  const char* env = std::getenv("GEM4_SOURCE_DIR");
  std::string root = env ? env : ".";
#endif
  return root + "/../shared/testdata/tokenizer/gemma4-vocab.gguf";
}

const char* kSchema = R"({"type":"object","properties":{
  "id":{"type":"integer","minimum":1,"maximum":99999},
  "customer":{"type":"object","properties":{"name":{"type":"string","maxLength":40},
     "email":{"type":"string","format":"email"},
     "address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},
        "zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["street","city","zip"],"additionalProperties":false}},
     "required":["name","email","address"],"additionalProperties":false},
  "items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"},
     "qty":{"type":"integer","minimum":1,"maximum":100},"price":{"type":"number","minimum":0,"maximum":10000}},
     "required":["sku","qty","price"],"additionalProperties":false},"minItems":1,"maxItems":10},
  "paid":{"type":"boolean"},"note":{"type":["string","null"]}},
  "required":["id","customer","items","paid","note"],"additionalProperties":false})";

const char* kDocument =
    R"({"id": 4711, "customer": {"name": "Ada Lovelace", "email": "ada@example.org", "address": {"street": )"
    R"("12 Analytical Engine Road", "city": "London", "zip": "01234"}}, "items": [{"sku": "BAB-001", "qty": 2, )"
    R"("price": 19.99}, {"sku": "NOTE-17", "qty": 1, "price": 250}], "paid": true, "note": null})";

struct Setup {
  text::Tokenizer tok;
  std::shared_ptr<const generate::grammar::TokenTrie> trie;
  std::shared_ptr<const generate::grammar::Grammar> grammar;
  std::vector<int32_t> doc;
  std::vector<float> logits;
  double trie_ms = 0;
  static Setup& get() {
    static Setup s = make();
    return s;
  }
  static Setup make() {
    auto file = gguf::GgufFile::open(vocab_path());
    Setup s{text::Tokenizer::from_gguf(*file), nullptr, nullptr, {}, {}, 0};
    const auto t0 = std::chrono::steady_clock::now();
    s.trie = generate::grammar::TokenTrie::from_tokenizer(s.tok);
    s.trie_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    s.grammar = std::make_shared<generate::grammar::Grammar>(
        generate::grammar::parse_gbnf(generate::grammar::json_schema_to_gbnf(std::string_view(kSchema))));
    s.doc = s.tok.encode(kDocument, false, false);
    s.doc.push_back(s.tok.eog_ids().front());
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0, 3);
    s.logits.resize(s.tok.n_vocab());
    for (float& x : s.logits) x = nd(rng);
    return s;
  }
};

generate::SamplingParams params() {
  generate::SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 64;
  p.top_p = 0.95f;
  return p;
}

void BM_GrammarSamplePlain(benchmark::State& state) {
  Setup& s = Setup::get();
  generate::Sampler sampler(params());
  for (auto _ : state) benchmark::DoNotOptimize(sampler.sample(s.logits.data(), s.tok.n_vocab()));
  state.counters["trie_ms"] = s.trie_ms;
}
BENCHMARK(BM_GrammarSamplePlain)->Unit(benchmark::kMicrosecond);

void BM_GrammarSampleConstrained(benchmark::State& state) {
  Setup& s = Setup::get();
  generate::Sampler sampler(params());
  generate::GrammarConstraint c(s.grammar, s.trie);
  // One pass fills the mask cache (the cold cost is Mask/cold below).
  for (int32_t t : s.doc) {
    c.mask();
    c.accept(t);
  }
  c.reset();
  size_t i = 0;
  for (auto _ : state) {
    const float* row = c.apply(s.logits.data(), s.tok.n_vocab());
    benchmark::DoNotOptimize(sampler.sample(row, s.tok.n_vocab()));
    c.accept(s.doc[i]);
    if (++i == s.doc.size()) {
      c.reset();
      i = 0;
    }
  }
  state.counters["states"] = double(c.stats().masks_computed);
}
BENCHMARK(BM_GrammarSampleConstrained)->Unit(benchmark::kMicrosecond);

void BM_GrammarMaskCold(benchmark::State& state) {
  Setup& s = Setup::get();
  double total_ms = 0;
  int64_t masks = 0;
  for (auto _ : state) {
    generate::GrammarConstraint c(s.grammar, s.trie);
    const auto t0 = std::chrono::steady_clock::now();
    for (int32_t t : s.doc) {
      c.mask();
      c.accept(t);
    }
    total_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    masks += c.stats().masks_computed;
  }
  state.counters["doc_tokens"] = double(s.doc.size());
  state.counters["masks"] = double(masks) / double(state.iterations());
  state.counters["ms_per_mask"] = total_ms / double(masks);
}
BENCHMARK(BM_GrammarMaskCold)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace gem4
