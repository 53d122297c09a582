// The generation loop (generate/generate.h) on the trained tiny Gemma 4: greedy continuations against
// the llama.cpp / PyTorch goldens of tiny-gemma4/README.md, and the loop's stopping, streaming and
// prefix-reuse bookkeeping.
#include "generate/generate.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/thread_pool.h"
#include "model/model.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace gem4::generate {
namespace {

// tiny-gemma4/README.md, "Greedy continuations (48 tokens)": the text after each prompt. The README
// wraps long lines; its line breaks after a verse's final punctuation are real newlines (one verse
// per line, and the Q8_0 note spells one as "\n"), the break inside "were as / the waters" is a wrap.
struct GreedyGolden {
  const char* prompt;
  const char* continuation;
};
const GreedyGolden kGreedyGoldens[] = {
    {"In the beginning God created",
     " his word; and in the earthquake his words;\n"
     "And said, I will not let the earth be glad, nor be in the earth beneath, and let the earth be moved.\n"
     "For the earth is full of the heaven"},
    {"And the LORD said unto Moses,",
     " Stretch out thine hand over the waters of the sea; and the waters were as the waters of the seas, and the "
     "waters were as the waters of the seas.\n"
     "And the waters were as the waters in the midst of"},
    {"Blessed are the",
     " man whom the LORD God of Israel hath sent to reproach the LORD his God.\n"
     "And the LORD said unto Moses, Stretch out thine hand over the land of Egypt for a possession.\n"
     "And the LORD said unto Moses, Stret"},
};

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

class GenerateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = Model::load(test::testdata("tiny-gemma4/tiny-gemma4-f32.gguf")).release();
    tokenizer_ = new text::Tokenizer(text::Tokenizer::from_gguf(*model_->file));
    pool_ = new ThreadPool(2);
  }
  static void TearDownTestSuite() {
    delete pool_;
    delete tokenizer_;
    delete model_;
  }
  static std::unique_ptr<Session> session(KvType kv = KvType::F16) {
    SessionOptions o;
    o.n_ctx = 512;
    o.kv_type = kv;
    return std::make_unique<Session>(*model_, pool_, o);
  }
  static GenerateRequest greedy(const std::string& prompt, int max_tokens) {
    GenerateRequest r;
    r.prompt = tokenizer_->encode(prompt, /*add_bos=*/true, /*parse_special=*/true);
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    return r;
  }
  static Model* model_;
  static text::Tokenizer* tokenizer_;
  static ThreadPool* pool_;
};
Model* GenerateTest::model_ = nullptr;
text::Tokenizer* GenerateTest::tokenizer_ = nullptr;
ThreadPool* GenerateTest::pool_ = nullptr;

TEST_F(GenerateTest, PromptTokenizesAsInTheReadme) {
  EXPECT_EQ(tokenizer_->encode("In the beginning God created", true, true),
            (std::vector<int32_t>{2, 1294, 349, 2793, 478, 2447, 373}));
}

TEST_F(GenerateTest, GreedyContinuationsMatchLlamaCpp) {
  for (KvType kv : {KvType::F16, KvType::F32}) {
    for (const auto& g : kGreedyGoldens) {
      if (kv == KvType::F32 && &g != &kGreedyGoldens[0]) continue;  // one prompt suffices for the f32 cache
      auto s = session(kv);
      std::string streamed;
      const auto res = generate(*s, *tokenizer_, greedy(g.prompt, 48), [&](std::string_view piece, int32_t) {
        streamed += piece;
        return true;
      });
      EXPECT_TRUE(starts_with(res.text, g.continuation))
          << "prompt: " << g.prompt << " (kv " << kv_type_name(kv) << ")\n got: " << res.text
          << "\nwant: " << g.continuation;
      EXPECT_EQ(streamed, res.text);
      EXPECT_EQ(res.stats.generated, 48);
      EXPECT_EQ(res.tokens.size(), 48u);
      EXPECT_EQ(res.stats.stop, StopReason::Length);
      EXPECT_EQ(res.text, tokenizer_->decode(res.tokens, /*special=*/false));
      // The session holds the prompt and every generated token but the last.
      EXPECT_EQ(s->tokens().size(), res.stats.prompt_tokens + 47u);
    }
  }
}

TEST_F(GenerateTest, StopStringEndsTheTextBeforeIt) {
  const std::string golden = kGreedyGoldens[1].continuation;
  const std::string stop = "waters were";
  auto req = greedy(kGreedyGoldens[1].prompt, 48);
  req.stop = {"no such text", stop};
  auto s = session();
  std::string streamed;
  const auto res = generate(*s, *tokenizer_, req, [&](std::string_view piece, int32_t) {
    streamed += piece;
    return true;
  });
  EXPECT_EQ(res.text, golden.substr(0, golden.find(stop)));
  EXPECT_EQ(streamed, res.text);
  EXPECT_EQ(res.stats.stop, StopReason::StopString);
  EXPECT_EQ(res.stats.stop_string, stop);
  EXPECT_STREQ(stop_reason_name(res.stats.stop), "stop");
  EXPECT_LT(res.stats.generated, 48);
}

TEST_F(GenerateTest, CallbackReturningFalseCancels) {
  auto s = session();
  int calls = 0;
  std::string streamed;
  const auto res = generate(*s, *tokenizer_, greedy(kGreedyGoldens[0].prompt, 48), [&](std::string_view piece, int32_t) {
    streamed += piece;
    return ++calls < 5;
  });
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(res.stats.generated, 5);
  EXPECT_EQ(res.stats.stop, StopReason::Cancelled);
  EXPECT_STREQ(stop_reason_name(res.stats.stop), "cancelled");
  EXPECT_EQ(streamed, res.text);
  EXPECT_TRUE(starts_with(kGreedyGoldens[0].continuation, res.text));
}

TEST_F(GenerateTest, EndOfGenerationTokenStopsAndIsNotEmitted) {
  auto req = greedy(kGreedyGoldens[0].prompt, 48);
  req.sampling.logit_bias[tokenizer_->eos()] = 100.0f;  // force <eos> as the first token
  auto s = session();
  int calls = 0;
  const auto res = generate(*s, *tokenizer_, req, [&](std::string_view, int32_t) { return ++calls, true; });
  EXPECT_EQ(res.stats.stop, StopReason::Eog);
  EXPECT_STREQ(stop_reason_name(res.stats.stop), "eog");
  EXPECT_EQ(res.stats.generated, 1);
  EXPECT_EQ(res.tokens, std::vector<int32_t>{tokenizer_->eos()});
  EXPECT_EQ(res.text, "");
  EXPECT_EQ(calls, 0);

  // Without the EOG stop the token is text like any other (CONTROL tokens written out on request).
  req.stop_at_eog = false;
  req.special_text = true;
  req.max_tokens = 2;
  const auto res2 = generate(*s, *tokenizer_, req);
  EXPECT_EQ(res2.stats.stop, StopReason::Length);
  EXPECT_EQ(res2.text, "<eos><eos>");
}

TEST_F(GenerateTest, PromptPrefixIsReused) {
  auto s = session();
  auto req = greedy("In the beginning God created the heaven and the earth.", 4);
  const auto first = generate(*s, *tokenizer_, req);
  EXPECT_EQ(first.stats.prompt_processed, int(req.prompt.size()));
  EXPECT_EQ(first.stats.prompt_reused, 0);

  // The same prompt plus the generated tokens plus more text: only the tail is new.
  auto longer = req;
  longer.prompt.insert(longer.prompt.end(), first.tokens.begin(), first.tokens.end());
  const auto extra = tokenizer_->encode(" And God said", false, false);
  longer.prompt.insert(longer.prompt.end(), extra.begin(), extra.end());
  const auto second = generate(*s, *tokenizer_, longer);
  // Cached: the prompt and the generated tokens but the last one, which was never pushed.
  EXPECT_EQ(second.stats.prompt_reused, int(req.prompt.size() + first.tokens.size()) - 1);
  EXPECT_EQ(second.stats.prompt_processed, int(extra.size()) + 1);
  EXPECT_EQ(second.stats.prompt_tokens, int(longer.prompt.size()));

  // The result equals that of a fresh session (prefix reuse does not change the logits).
  auto fresh = session();
  EXPECT_EQ(generate(*fresh, *tokenizer_, longer).tokens, second.tokens);
}

TEST_F(GenerateTest, StatsAreConsistent) {
  auto s = session();
  const auto res = generate(*s, *tokenizer_, greedy(kGreedyGoldens[2].prompt, 16));
  const auto& st = res.stats;
  EXPECT_EQ(st.generated, 16);
  EXPECT_GT(st.prompt_s, 0);
  EXPECT_GT(st.generation_s, 0);
  EXPECT_GE(st.ttft_s, st.prompt_s);
  EXPECT_LE(st.ttft_s, st.prompt_s + st.generation_s);
  EXPECT_GT(st.prompt_tokens_per_s(), 0);
  EXPECT_GT(st.generation_tokens_per_s(), 0);
  EXPECT_STREQ(stop_reason_name(st.stop), "length");
}

TEST_F(GenerateTest, ContextLengthIsChecked) {
  auto s = session();
  GenerateRequest req;
  req.prompt.assign(600, 349);
  try {
    generate(*s, *tokenizer_, req);
    FAIL() << "expected ContextLengthError";
  } catch (const ContextLengthError& e) {
    EXPECT_STREQ(e.what(), "prompt of 600 tokens does not fit the context of 512");
  }
  EXPECT_NO_THROW(check_context(512, 512));
  EXPECT_THROW(check_context(513, 512), ContextLengthError);
  EXPECT_THROW(generate(*s, *tokenizer_, GenerateRequest{}), std::invalid_argument);

  // A prompt that fills the context exactly still gets one token, then stops for length.
  req.prompt.assign(512, 349);
  req.sampling.temperature = 0;
  const auto res = generate(*s, *tokenizer_, req);
  EXPECT_EQ(res.stats.generated, 1);
  EXPECT_EQ(res.stats.stop, StopReason::Length);
}

// TextStream: UTF-8 from byte tokens and stop strings split across tokens, token by token.
TEST_F(GenerateTest, TextStreamHoldsBackPartialCharactersAndStops) {
  const auto byte = [&](int b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const auto id = tokenizer_->find_token(name);
    EXPECT_TRUE(id.has_value()) << name;
    return id.value_or(0);
  };
  TextStream utf8(*tokenizer_, {}, false);
  EXPECT_EQ(utf8.push(byte(0xE2)), "");  // U+2192 RIGHTWARDS ARROW = E2 86 92
  EXPECT_EQ(utf8.push(byte(0x86)), "");
  EXPECT_EQ(utf8.push(byte(0x92)), "\xE2\x86\x92");
  EXPECT_EQ(utf8.push(byte(0xE2)), "");
  EXPECT_EQ(utf8.finish(), "\xEF\xBF\xBD");  // an unfinished character ends as U+FFFD

  // "the LORD said" with stop "LORD s": the text before it comes out, nothing after.
  const auto ids = tokenizer_->encode("the LORD said unto", false, false);
  TextStream stop(*tokenizer_, {"LORD s"}, false);
  std::string out;
  for (int32_t id : ids) out += stop.push(id);
  out += stop.finish();
  EXPECT_EQ(out, "the ");
  EXPECT_TRUE(stop.stopped());
  EXPECT_EQ(stop.stop_string(), "LORD s");

  // A partial stop string at the end is released as text.
  TextStream partial(*tokenizer_, {"LORD said"}, false);
  out.clear();
  for (int32_t id : tokenizer_->encode("the LORD sa", false, false)) out += partial.push(id);
  EXPECT_EQ(out, "the ");
  EXPECT_EQ(partial.finish(), "LORD sa");
  EXPECT_FALSE(partial.stopped());
}

}  // namespace
}  // namespace gem4::generate
