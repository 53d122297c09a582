// The text front ends through the real `gem4` binary: `gem4 run` (greedy goldens of
// tiny-gemma4/README.md), `gem4 perplexity` (llama.cpp's figure), and the JSON Lines filters
// `gem4 tokenize` / `gem4 template` on the public tokenizer goldens (vocab-only GGUF).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "gguf/huge_pages.h"
#include "test_util.h"

namespace {

using nlohmann::json;

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Runs `gem4 ARGS` with `input` on stdin; returns the exit code, stdout and stderr.
struct CommandResult {
  int rc = -1;
  std::string out, err;
};
CommandResult gem4(const std::string& args, const std::string& input = "") {
  const std::string base = "/tmp/gem4_cli_text_" + std::to_string(getpid());
  {
    std::ofstream f(base + ".in", std::ios::binary);
    f << input;
  }
  const std::string cmd = std::string("'") + GEM4_BINARY + "' " + args + " < '" + base + ".in' > '" + base +
                          ".out' 2> '" + base + ".err'";
  CommandResult r;
  const int status = std::system(cmd.c_str());
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_all(base + ".out");
  r.err = read_all(base + ".err");
  for (const char* ext : {".in", ".out", ".err"}) std::remove((base + ext).c_str());
  return r;
}

std::string quoted(const std::string& s) {  // for the shell, inside single quotes
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

TEST(CliText, RunGreedyMatchesLlamaCpp) {
  const std::string model = gem4::test::testdata("tiny-gemma4/tiny-gemma4-f32.gguf");
  // tiny-gemma4/README.md, greedy continuation of the first prompt (its line breaks are newlines).
  const std::string want =
      " his word; and in the earthquake his words;\n"
      "And said, I will not let the earth be glad, nor be in the earth beneath, and let the earth be moved.\n"
      "For the earth is full of the heaven";
  const CommandResult r = gem4("run -m " + quoted(model) + " -p 'In the beginning God created' -n 48 --temp 0 -t 2 -c 512");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, want.size()), want);
  // Timings on stderr.
  EXPECT_NE(r.err.find("prompt:     7 tokens (7 processed, 0 reused)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("generation: 48 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(stop: length)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("time to first token:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("peak RSS:"), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(KV cache: [0-9.]+ KiB \(f16, 512 tokens\))"))) << r.err;

  // A stop string ends the output before it; --chat wraps the prompt (a longer prompt, no second BOS).
  const CommandResult stop = gem4("run -m " + quoted(model) + " -p 'In the beginning God created' -n 48 --temp 0 -t 2 --stop earthquake");
  ASSERT_EQ(stop.rc, 0) << stop.err;
  EXPECT_EQ(stop.out, " his word; and in the ");
  EXPECT_NE(stop.err.find("(stop: stop)"), std::string::npos) << stop.err;
  const CommandResult chat = gem4("run -m " + quoted(model) + " -p 'Hello' -n 4 --temp 0 -t 2 --chat --system 'Be brief.'");
  ASSERT_EQ(chat.rc, 0) << chat.err;
  // <bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHello<turn|>\n<|turn>model\n<|channel>thought\n<channel|>
  EXPECT_NE(chat.err.find("generation: 4 tokens"), std::string::npos) << chat.err;
  // Errors are reported, not crashes.
  const CommandResult bad = gem4("run -m " + quoted(model) + " -n 4");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("-p TEXT"), std::string::npos) << bad.err;
  std::string long_prompt;
  for (int i = 0; i < 600; ++i) long_prompt += " the";
  const CommandResult too_long = gem4("run -m " + quoted(model) + " -c 512 -p '" + long_prompt + "'");
  EXPECT_EQ(too_long.rc, 1);
  EXPECT_NE(too_long.err.find("prompt of 601 tokens does not fit the context of 512"), std::string::npos) << too_long.err;
}

// Sampling values that are not finite as floats (NaN, inf, 1e39) or a repetition penalty of 0 or less
// are refused with the flag or the file's general.sampling.* key named (the sampler itself would name
// only its own field), and a huge -n is not wrapped around into 0 tokens.
TEST(CliText, SamplingValuesAreCheckedWithTheirFlagOrKeyNamed) {
  const std::string model = gem4::test::testdata("tiny-gemma4/tiny-gemma4-f32.gguf");
  const std::string run = "run -m " + quoted(model) + " -p 'In the beginning' -t 2 -c 512 ";
  const struct {
    const char* flags;
    const char* want;
  } bad[] = {
      {"--temp nan", "flag '--temp' must be a finite number (as a float), got nan"},
      {"--temp 1e39", "flag '--temp' must be a finite number (as a float), got 1e39"},
      {"--top-p inf", "flag '--top-p' must be a finite number"},
      {"--min-p -inf", "flag '--min-p' must be a finite number"},
      {"--presence-penalty 1e40", "flag '--presence-penalty' must be a finite number"},
      {"--frequency-penalty nan", "flag '--frequency-penalty' must be a finite number"},
      {"--repeat-penalty 0", "flag '--repeat-penalty' must be a finite number above 0"},
      {"--repeat-penalty -1", "flag '--repeat-penalty' must be a finite number above 0"},
  };
  for (const auto& b : bad) {
    const CommandResult r = gem4(run + b.flags + " -n 2");
    EXPECT_EQ(r.rc, 2) << b.flags << ": " << r.err;
    EXPECT_NE(r.err.find(b.want), std::string::npos) << b.flags << ": " << r.err;
    EXPECT_EQ(r.err.find("SamplingParams"), std::string::npos) << b.flags << ": " << r.err;
  }
  // 2^32 tokens at most: as an int that would be 0. Greedy from here ends at the context (512).
  const CommandResult huge = gem4(run + "--temp 0 -n 4294967296");
  ASSERT_EQ(huge.rc, 0) << huge.err;
  EXPECT_EQ(huge.err.find("generation: 0 tokens"), std::string::npos) << huge.err;

  // The same check on the file's key: the tiny model with general.sampling.temp = NaN.
  const auto src = gem4::gguf::GgufFile::open(model);
  gem4::gguf::GgufWriter w;
  for (const auto& [key, value] : src->metadata()) w.set_value(key, value);
  w.set_f32("general.sampling.temp", std::nanf(""));
  for (const auto& t : src->tensors()) {
    const uint8_t* data = src->tensor_data(t);
    w.add_tensor(t.name, t.ne, t.type, std::vector<uint8_t>(data, data + t.nbytes));
  }
  const std::string nan_model = "/tmp/gem4_cli_nan_temp_" + std::to_string(getpid()) + ".gguf";
  w.write(nan_model);
  const CommandResult from_file =
      gem4("run -m " + quoted(nan_model) + " -p 'In the beginning' -t 2 -c 512 -n 2");
  const CommandResult overridden =
      gem4("run -m " + quoted(nan_model) + " -p 'In the beginning' -t 2 -c 512 -n 2 --temp 0");
  std::remove(nan_model.c_str());
  EXPECT_EQ(from_file.rc, 2) << from_file.err;
  EXPECT_NE(
      from_file.err.find(nan_model + ": general.sampling.temp must be a finite number (as a float), got nan"),
      std::string::npos)
      << from_file.err;
  EXPECT_EQ(overridden.rc, 0) << "the flag replaces the file's value: " << overridden.err;
}

// llama.cpp's spellings of the context and micro-batch flags are accepted beside gem4's own.
TEST(CliText, LlamaCppFlagSpellingsAreAccepted) {
  const std::string model = gem4::test::testdata("tiny-gemma4/tiny-gemma4-f32.gguf");
  const CommandResult r = gem4("run -m " + quoted(model) + " -p 'In the beginning' -n 2 --temp 0 -t 2 --ctx-size 256 -ub 8");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("(f16, 256 tokens)"), std::string::npos) << r.err;
  const CommandResult same = gem4("run -m " + quoted(model) + " -p 'In the beginning' -n 2 --temp 0 -t 2 -c 256 --ubatch 8");
  ASSERT_EQ(same.rc, 0) << same.err;
  EXPECT_EQ(r.out, same.out);
  const CommandResult bad = gem4("run -m " + quoted(model) + " -p 'In the beginning' -n 2 --ubatch-size 0");
  EXPECT_EQ(bad.rc, 2) << bad.err;
  EXPECT_NE(bad.err.find("'--ubatch' must be at least 1"), std::string::npos) << bad.err;
}

// Perplexity over the whole of valid.txt (181 chunks of 256): llama.cpp gives 33.7321.
TEST(CliText, PerplexityMatchesLlamaCppSlow) {
  const std::string model = gem4::test::testdata("tiny-gemma4/tiny-gemma4-f32.gguf");
  const std::string text = gem4::test::testdata("tiny-gemma4/valid.txt");
  const CommandResult r = gem4("perplexity -m " + quoted(model) + " -f " + quoted(text) + " -c 256 -t 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(PPL = ([0-9.]+))"))) << r.out;
  const double ppl = std::stod(m[1]);
  std::printf("gem4 perplexity, valid.txt, ctx 256: PPL = %.4f (llama.cpp 33.7321)\n", ppl);
  EXPECT_NEAR(ppl, 33.7321, 33.7321 * 0.005);
  EXPECT_NE(r.err.find("46465 tokens, 181 chunks of 256"), std::string::npos) << r.err;
}

TEST(CliText, TokenizeMatchesGoldensWithVocabOnlyFile) {
  const std::string vocab = gem4::test::testdata("tokenizer/gemma4-vocab.gguf");
  const auto goldens = lines_of(read_all(gem4::test::testdata("tokenizer/tokenize-public.jsonl")));
  ASSERT_EQ(goldens.size(), 213u);
  // The golden lines themselves are valid requests (extra fields are ignored).
  std::string input;
  for (const auto& g : goldens) input += g + "\n";
  const CommandResult r = gem4("tokenize -m " + quoted(vocab) + " --no-bos", input);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto out = lines_of(r.out);
  ASSERT_EQ(out.size(), goldens.size());
  for (size_t i = 0; i < goldens.size(); ++i) {
    const json want = json::parse(goldens[i]);
    const json got = json::parse(out[i]);
    EXPECT_EQ(got.value("ids", json()), want["ids"]) << want["name"];
    EXPECT_EQ(got.value("decoded", json()), want["decoded"]) << want["name"];
  }

  // With BOS (the vocabulary's default): [2] + ids, and the decoded text starts with "<bos>".
  const CommandResult b = gem4("tokenize -m " + quoted(vocab), goldens[0] + "\n" + goldens[2] + "\n");
  ASSERT_EQ(b.rc, 0) << b.err;
  const auto bl = lines_of(b.out);
  ASSERT_EQ(bl.size(), 2u);
  const json golden0 = json::parse(goldens[0]);
  json want_ids = json::array({2});
  for (const auto& id : golden0["ids"]) want_ids.push_back(id);
  EXPECT_EQ(json::parse(bl[0])["ids"], want_ids);
  EXPECT_EQ(json::parse(bl[0])["decoded"], "<bos>" + golden0["decoded"].get<std::string>());
  EXPECT_EQ(json::parse(bl[1])["ids"], json::array({2}));  // empty text
}

TEST(CliText, TokenizeReportsMalformedLinesAndContinues) {
  const std::string vocab = gem4::test::testdata("tokenizer/gemma4-vocab.gguf");
  const std::string input =
      "{\"text\": \"Hello world\"}\n"
      "this is not json\n"
      "{\"text\": 5}\n"
      "[\"text\"]\n"
      "\n"
      "{\"txt\": \"Hello\"}\n"
      "{\"text\": \"x\", \"parse_special\": \"yes\"}\n"
      "{\"text\": \"<|turn>user\\n\", \"parse_special\": true}\n"
      "{\"text\": \"<|turn>user\\n\"}\n";
  const CommandResult r = gem4("tokenize -m " + quoted(vocab) + " --no-bos", input);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto out = lines_of(r.out);
  ASSERT_EQ(out.size(), 9u) << r.out;
  std::vector<json> j;
  for (const auto& l : out) j.push_back(json::parse(l));
  // "Hello world" -> [9259, 1902] (llamacpp-golden-11).
  EXPECT_EQ(j[0]["ids"], json::array({9259, 1902}));
  EXPECT_EQ(j[0]["decoded"], "Hello world");
  for (int i : {1, 2, 3, 4, 5, 6}) {
    ASSERT_TRUE(j[i].contains("error")) << out[i];
    EXPECT_EQ(j[i]["error"].get<std::string>().rfind("line " + std::to_string(i + 1) + ":", 0), 0u) << out[i];
  }
  EXPECT_NE(j[2]["error"].get<std::string>().find("'text'"), std::string::npos);
  EXPECT_NE(j[6]["error"].get<std::string>().find("'parse_special'"), std::string::npos);
  // <|turn> is CONTROL: a token only with parse_special (sp-turn-user goldens: 105 2364 107).
  EXPECT_EQ(j[7]["ids"], json::array({105, 2364, 107}));
  EXPECT_NE(j[8]["ids"].size(), 3u);
  EXPECT_EQ(j[8]["decoded"], "<|turn>user\n");
}

TEST(CliText, TemplateMatchesGoldensWithVocabOnlyFile) {
  const std::string vocab = gem4::test::testdata("tokenizer/gemma4-vocab.gguf");
  const auto goldens = lines_of(read_all(gem4::test::testdata("tokenizer/chat-template-public.jsonl")));
  ASSERT_EQ(goldens.size(), 3u);
  std::string input;
  for (const auto& g : goldens) input += g + "\n";
  input += "not json\n{\"messages\": []}\n{\"messages\": [{\"role\": \"wizard\", \"content\": \"hi\"}]}\n";
  input += "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"add_generation_prompt\": 1}\n";
  input += "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n";
  const CommandResult r = gem4("template -m " + quoted(vocab) + " --ids", input);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto out = lines_of(r.out);
  ASSERT_EQ(out.size(), 8u) << r.out;
  for (size_t i = 0; i < goldens.size(); ++i) {
    const json want = json::parse(goldens[i]);
    const json got = json::parse(out[i]);
    EXPECT_EQ(got.value("rendered", json()), want["rendered"]) << want["name"];
    EXPECT_EQ(got.value("ids", json()), want["ids"]) << want["name"];
  }
  for (size_t i = 3; i < 7; ++i) EXPECT_TRUE(json::parse(out[i]).contains("error")) << out[i];
  // Defaults: no generation prompt, thinking off, BOS text from the vocabulary.
  EXPECT_EQ(json::parse(out[7])["rendered"], "<bos><|turn>user\nhi<turn|>\n");
  // Without --ids only "rendered" is written.
  const CommandResult plain = gem4("template -m " + quoted(vocab), goldens[0] + "\n");
  ASSERT_EQ(plain.rc, 0) << plain.err;
  EXPECT_EQ(json::parse(plain.out), json({{"rendered", json::parse(goldens[0])["rendered"]}}));
}

// The cells of the roofline table's row for `test` ("pp16", "tg4"), empty when there is none.
std::vector<std::string> roofline_cells(const std::string& out, const std::string& test) {
  for (const std::string& line : lines_of(out)) {
    if (line.rfind("| " + test + " | prune=", 0) != 0) continue;
    std::vector<std::string> cells;
    std::istringstream in(line.substr(1));
    for (std::string c; std::getline(in, c, '|');) cells.push_back(c.substr(1, c.size() - 2));
    return cells;
  }
  return {};
}

// Sets GEM4_ISA for the commands run in its scope (`isa` nullptr: unset), restoring it afterwards.
class ScopedIsaEnv {
 public:
  explicit ScopedIsaEnv(const char* isa) {
    const char* old = std::getenv("GEM4_ISA");
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (isa)
      setenv("GEM4_ISA", isa, 1);
    else
      unsetenv("GEM4_ISA");
  }
  ~ScopedIsaEnv() {
    if (had_)
      setenv("GEM4_ISA", old_.c_str(), 1);
    else
      unsetenv("GEM4_ISA");
  }

 private:
  bool had_ = false;
  std::string old_;
};

// `gem4 bench --roofline` on the tiny in-memory model: the roofline table has a row per test; the peaks
// are measured with the running kernel set's instructions, so with any SIMD set the prompt row's int8
// fraction, and with every set the decode row's bandwidth fraction, are positive percentages of the
// highest peak seen during the run (the Scalar set has no int8 peak: its fraction reads "-").
void expect_roofline_fractions(const CommandResult& r) {
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("roofline (peaks: the highest measured during the run"), std::string::npos) << r.out;
  const auto pp = roofline_cells(r.out, "pp16"), tg = roofline_cells(r.out, "tg4");
  ASSERT_EQ(pp.size(), 13u) << r.out;
  ASSERT_EQ(tg.size(), 13u) << r.out;
  EXPECT_GT(std::stod(tg[7]), 0.0) << tg[7];  // of read bandwidth, "87.6 %"
  EXPECT_EQ(tg[7].back(), '%');
  EXPECT_GT(std::stod(tg[8]), 0.0) << tg[8];  // of the bandwidth measured around each repetition
  EXPECT_EQ(tg[8].back(), '%');
  EXPECT_GT(std::stod(tg[9]), 0.0) << tg[9];    // a plain read of the token's weights, GB/s
  EXPECT_GT(std::stod(tg[10]), 0.0) << tg[10];  // decode's share of it
  EXPECT_EQ(tg[10].back(), '%');
  // The read bandwidth is at least the plain read of the weights (the faster of the two reads at each
  // moment), so decode's share of it is at most its share of the latter (both printed to 0.1 %).
  EXPECT_LE(std::stod(tg[7]), std::stod(tg[10]) + 0.05) << tg[7] << " vs " << tg[10];
  for (int c = 7; c <= 10; ++c) EXPECT_EQ(pp[c], "-") << c;  // a prompt test has no decode columns
  if (r.err.find("ISA scalar") != std::string::npos) {
    EXPECT_EQ(pp[3], "-");
    return;
  }
  EXPECT_GT(std::stod(pp[3]), 0.0) << pp[3];  // of int8 peak, "12.3 %"
  EXPECT_EQ(pp[3].back(), '%');
}

TEST(CliBench, RooflineReportsFractionsOfThePeaks) {  // the best set, or the one GEM4_ISA names
  expect_roofline_fractions(gem4("bench --preset tiny -p 16 -n 4 -r 2 --prune 1 --roofline"));
}

// Forced down to the AVX2 set, the peaks are measured with its instructions (not AVX-512's), so the
// fractions are there too and the report says which instructions the int8 peak is of.
TEST(CliBench, RooflineWithTheAvx2SetMeasuresAvx2Peaks) {
  const ScopedIsaEnv env("avx2");
  const CommandResult r = gem4("bench --preset tiny -p 16 -n 4 -r 2 --prune 1 --roofline");
  if (r.err.find("ISA avx2") == std::string::npos) GTEST_SKIP() << "no AVX2 on this CPU: " << r.err;
  expect_roofline_fractions(r);
  EXPECT_NE(r.out.find("int8 (avx2: vpmaddubsw ymm) "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("read (avx2: 256-bit loads, plain, with page-head prefetches or in 4 or 8 streams) "), std::string::npos)
      << r.out;
}

// `gem4 bench --products`: one table per decode test and variant, its shares adding up to the whole of
// the products' time; a prompt-only test gets none.
TEST(CliBench, ProductsTableSharesAddUp) {
  const CommandResult r = gem4("bench --preset tiny -p 16,0 -n 0,4 -r 2 --prune 1 --products");
  ASSERT_EQ(r.rc, 0) << r.err;
  const size_t at = r.out.find("decode products, tg4 prune=1");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("decode products, pp16"), std::string::npos) << r.out;
  std::istringstream lines(r.out.substr(at));
  std::string line;
  double share = 0;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("| ", 0) != 0 || line.rfind("| products", 0) == 0) continue;
    std::vector<std::string> cells;
    std::istringstream row(line);
    for (std::string c; std::getline(row, c, '|');) cells.push_back(c);
    ASSERT_EQ(cells.size(), 6u) << line;  // "", kind, per token, share, MiB, GB/s
    EXPECT_GT(std::stod(cells[2]), 0.0) << line;
    EXPECT_GT(std::stod(cells[5]), 0.0) << line;  // GB/s (the tiny model's MiB per token round to 0)
    share += std::stod(cells[3]);
    ++rows;
  }
  EXPECT_GT(rows, 2);
  EXPECT_NEAR(share, 100.0, 0.1 * rows) << r.out;  // each share rounded to 0.1 %
}

// With --roofline the table also has the plain read of each kind's weights and the products' share of
// it; kinds under 64 MiB a token (all of the tiny model's) show "-" there instead of a cache's speed.
TEST(CliBench, ProductsTableWithRooflineHasThePlainReadColumns) {
  const CommandResult r = gem4("bench --preset tiny -p 0 -n 4 -r 1 --prune 1 --products --roofline");
  ASSERT_EQ(r.rc, 0) << r.err;
  const size_t at = r.out.find("| products | per token |");
  ASSERT_NE(at, std::string::npos) << r.out;
  std::istringstream lines(r.out.substr(at));
  std::string line;
  std::getline(lines, line);
  EXPECT_NE(line.find("| GB/s | plain read of their weights GB/s | of that |"), std::string::npos) << line;
  int rows = 0;
  while (std::getline(lines, line) && line.rfind("|", 0) == 0) {
    if (line.rfind("|---", 0) == 0) continue;
    std::vector<std::string> cells;
    std::istringstream row(line);
    for (std::string c; std::getline(row, c, '|');) cells.push_back(c);
    ASSERT_EQ(cells.size(), 8u) << line;
    EXPECT_GT(std::stod(cells[5]), 0.0) << line;
    EXPECT_EQ(cells[6], " - ") << line;
    EXPECT_EQ(cells[7], " - ") << line;
    ++rows;
  }
  EXPECT_GT(rows, 2) << r.out;
}

// The memory line says how much of a mapped packed-weight cache is in 4 KiB pages at the end of the run
// (where the kernel can tell), for the writer and for a later load; an in-memory model has no such note.
TEST(CliBench, MemoryLineSaysHowMuchOfTheMappedCacheIsInSmallPages) {
  static const char probe[4096] = {1};
  if (gem4::bytes_in_small_pages(probe, sizeof probe) < 0) {
    GTEST_SKIP() << "this kernel cannot say which pages are mapped huge (PAGEMAP_SCAN)";
  }
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("gem4_bench_pages_" + std::to_string(getpid()))).string();
  const std::string path = gem4::test::testdata("llamacpp-ref/gemma4-tiny-q8_0.gguf");
  const std::regex note(
      R"(\(.*(written to|mapped from) .*; at the end ([0-9.]+) MiB of the mapped copies in 4 KiB pages\)\n)");
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run == 0 ? "writer" : "later load");
    const CommandResult r = gem4("bench -m " + quoted(path) + " -p 0 -n 2 -r 1 --pack-cache " + quoted(dir));
    ASSERT_EQ(r.rc, 0) << r.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, note)) << r.out;
    EXPECT_EQ(m[1].str(), run == 0 ? "written to" : "mapped from");
    EXPECT_LE(std::stod(m[2].str()), 2.0) << m[0];  // the tiny model's cache is under 2 MiB
  }
  std::filesystem::remove_all(dir);
  const CommandResult r = gem4("bench --preset tiny -p 0 -n 2 -r 1");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.find("of the mapped copies"), std::string::npos) << r.out;
}

// inspect names the file type llama.cpp wrote into the file; bench names a model by it.
TEST(CliInspect, NamesTheFileType) {
  const std::string path = gem4::test::testdata("llamacpp-ref/gemma4-tiny-q8_0.gguf");
  const CommandResult r = gem4("inspect " + quoted(path));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  general\.file_type +7 \(Q8_0\)\n)"))) << r.out;
  EXPECT_NE(r.out.find("blk.0.ffn_gate.weight                    q8_0"), std::string::npos) << r.out;
  const CommandResult b = gem4("bench -m " + quoted(path) + " -p 0 -n 2 -r 1 --prune 1");
  ASSERT_EQ(b.rc, 0) << b.err;
  EXPECT_NE(b.out.find("| gemma4 6L Q8_0 |"), std::string::npos) << b.out;
}

// inspect takes its file as the one argument or, as every other command takes a model, with -m; neither
// or both is an error that says how to give it.
TEST(CliInspect, TakesTheFileAsArgumentOrWithDashM) {
  const std::string path = quoted(gem4::test::testdata("llamacpp-ref/gemma4-tiny-q8_0.gguf"));
  const CommandResult positional = gem4("inspect --no-tensors " + path);
  ASSERT_EQ(positional.rc, 0) << positional.err;
  const CommandResult flag = gem4("inspect --no-tensors -m " + path);
  ASSERT_EQ(flag.rc, 0) << flag.err;
  EXPECT_EQ(flag.out, positional.out);
  EXPECT_NE(flag.out.find("general.file_type"), std::string::npos) << flag.out;
  const CommandResult none = gem4("inspect --no-tensors");
  EXPECT_NE(none.rc, 0);
  EXPECT_NE(none.err.find("gem4 inspect FILE or -m FILE"), std::string::npos) << none.err;
  const CommandResult both = gem4("inspect -m " + path + " " + path);
  EXPECT_NE(both.rc, 0);
  EXPECT_NE(both.err.find("expected one GGUF file, got 2"), std::string::npos) << both.err;
}

// `gem4 chat --session FILE`: a conversation saved after each turn goes on in a later process, with
// the earlier prompt's K/V read back from FILE.kv instead of recomputed, and the reply is the one a
// single process holding both turns gives.
TEST(CliChat, SessionFileResumesTheConversation) {
  const std::string model = quoted(gem4::test::testdata("tiny-gemma4/tiny-gemma4-f32.gguf"));
  const std::string file = "/tmp/gem4_chat_session_" + std::to_string(getpid()) + ".json";
  std::system(("rm -rf '" + file + "' '" + file + ".kv'").c_str());
  const std::string system =
      "You are a scribe of the old books. Answer in the words of the King James Bible, in one verse, and "
      "name the book and the chapter you took it from, as the scribes of old did when they copied the law.";
  const std::string flags = " -m " + model + " -t 1 --temp 0 -n 12 --system " + quoted(system);
  const CommandResult both = gem4("chat" + flags, "Who made the heaven?\nAnd the earth?\n");
  ASSERT_EQ(both.rc, 0) << both.err;
  const CommandResult one = gem4("chat" + flags + " --session " + quoted(file), "Who made the heaven?\n");
  ASSERT_EQ(one.rc, 0) << one.err;
  const json saved = json::parse(read_all(file));
  EXPECT_EQ(saved["format"], "gem4-chat-session");
  ASSERT_EQ(saved["messages"].size(), 3u) << saved.dump();  // system, user, assistant
  const CommandResult two = gem4("chat" + flags + " --session " + quoted(file), "And the earth?\n");
  ASSERT_EQ(two.rc, 0) << two.err;
  EXPECT_NE(two.err.find("resumed 3 messages"), std::string::npos) << two.err;
  // The second process reused the first prompt's chunks from the disk (64-token chunks).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(two.err, m, std::regex(R"(\[prompt: (\d+) new tokens, (\d+) reused\])"))) << two.err;
  EXPECT_GE(std::stoi(m[2]), 64) << two.err;
  // Its reply is the second reply of the single process (each reply ends with a newline).
  ASSERT_FALSE(two.out.empty());
  ASSERT_GE(both.out.size(), two.out.size());
  EXPECT_EQ(both.out.substr(both.out.size() - two.out.size()), two.out)
      << "one process:\n" << both.out << "\nresumed:\n" << two.out;
  EXPECT_EQ(json::parse(read_all(file))["messages"].size(), 5u);
  // A file that is not a session is refused by name.
  {
    std::ofstream f(file);
    f << "[1, 2, 3]";
  }
  const CommandResult bad = gem4("chat" + flags + " --session " + quoted(file), "hi\n");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find(file), std::string::npos) << bad.err;
  std::system(("rm -rf '" + file + "' '" + file + ".kv'").c_str());
}

}  // namespace
