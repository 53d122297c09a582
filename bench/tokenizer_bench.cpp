// Tokenizer benchmarks on the real 262,144-token Gemma 4 vocabulary.
//   BM_TokenizeEnglish1MB   valid.txt (KJV English) repeated to 1 MiB, one encode() call
//   BM_TokenizeMixed1MB     the public golden strings (code, CJK, emoji, whitespace runs...) to 1 MiB
//   BM_LoadVocab            open the vocab GGUF and build the tokenizer
//   BM_StreamDetokenize     the English token stream through StreamingDetokenizer
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>

#include "gguf/gguf.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace {

using gem4::text::Tokenizer;

// The test target defines GEM4_SOURCE_DIR; the benchmark target may not, and runs from the repo root.
std::string testdata(const std::string& rel) {
#ifdef GEM4_SOURCE_DIR
  std::string root = GEM4_SOURCE_DIR;
#else
  const char* env = std::getenv("GEM4_SOURCE_DIR");
  std::string root = env ? env : ".";
#endif
  return root + "/../shared/testdata/" + rel;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const Tokenizer& gemma4() {
  static const Tokenizer t = [] {
    auto file = gem4::gguf::GgufFile::open(testdata("tokenizer/gemma4-vocab.gguf"));
    return Tokenizer::from_gguf(*file);
  }();
  return t;
}

std::string repeat_to(const std::string& unit, size_t bytes) {
  std::string out;
  out.reserve(bytes + unit.size());
  while (out.size() < bytes) out += unit;
  out.resize(bytes);
  return out;
}

const std::string& english_1mb() {
  static const std::string text = repeat_to(read_file(testdata("tiny-gemma4/valid.txt")), 1 << 20);
  return text;
}

const std::string& mixed_1mb() {
  static const std::string text = [] {
    std::istringstream lines(read_file(testdata("tokenizer/tokenize-public.jsonl")));
    std::string unit;
    for (std::string line; std::getline(lines, line);)
      if (!line.empty()) unit += nlohmann::json::parse(line).at("text").get<std::string>() + "\n";
    return repeat_to(unit, 1 << 20);
  }();
  return text;
}

// Runs `body` unless the test data cannot be loaded, which skips the benchmark with the reason.
template <class Body>
void guarded(benchmark::State& state, Body body) {
  try {
    body();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void tokenize(benchmark::State& state, const Tokenizer& t, const std::string& text) {
  size_t n_tokens = 0;
  for (auto _ : state) {
    auto ids = t.encode(text, true, false);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(n_tokens), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_TokenizeEnglish1MB(benchmark::State& state) {
  guarded(state, [&] { tokenize(state, gemma4(), english_1mb()); });
}
BENCHMARK(BM_TokenizeEnglish1MB)->Unit(benchmark::kMillisecond);

void BM_TokenizeMixed1MB(benchmark::State& state) {
  guarded(state, [&] { tokenize(state, gemma4(), mixed_1mb()); });
}
BENCHMARK(BM_TokenizeMixed1MB)->Unit(benchmark::kMillisecond);

void BM_LoadVocab(benchmark::State& state) {
  guarded(state, [&] {
    const std::string path = testdata("tokenizer/gemma4-vocab.gguf");
    for (auto _ : state) {
      auto file = gem4::gguf::GgufFile::open(path);
      Tokenizer t = Tokenizer::from_gguf(*file);
      benchmark::DoNotOptimize(t.n_vocab());
    }
  });
}
BENCHMARK(BM_LoadVocab)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_StreamDetokenize(benchmark::State& state) {
  guarded(state, [&] {
    const Tokenizer& t = gemma4();
    const auto ids = t.encode(english_1mb(), false, false);
    for (auto _ : state) {
      gem4::text::StreamingDetokenizer stream(t);
      size_t bytes = 0;
      for (int32_t id : ids) bytes += stream.push(id).size();
      bytes += stream.flush().size();
      benchmark::DoNotOptimize(bytes);
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * ids.size()));
  });
}
BENCHMARK(BM_StreamDetokenize)->Unit(benchmark::kMillisecond);

}  // namespace

// The benchmark target links benchmark::benchmark without benchmark_main. This main is weak so that
// a main() defined by another file in bench/ (e.g. BENCHMARK_MAIN()) takes precedence at link time.
__attribute__((weak)) int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
