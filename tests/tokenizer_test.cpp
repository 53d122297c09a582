// Tokenizer tests: hand-built vocabularies for the rules one at a time, then the real Gemma 4
// vocabulary against the llama.cpp / Hugging Face goldens, and the tiny-gemma4 vocabulary.
#include "text/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "test_util.h"
#include "text/detokenizer.h"
#include "text/vocab.h"

namespace gem4::text {
namespace {

using Ids = std::vector<int32_t>;

const std::string kSpace = "\xE2\x96\x81";  // U+2581

using test::testdata;  // fails the test (never skips) when the data is missing

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Independent check: is `s` well-formed UTF-8 (no overlongs, surrogates or values past U+10FFFF)?
bool well_formed_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char b = s[i];
    uint32_t cpt;
    size_t len;
    if (b < 0x80) {
      cpt = b, len = 1;
    } else if ((b & 0xE0) == 0xC0) {
      cpt = b & 0x1F, len = 2;
    } else if ((b & 0xF0) == 0xE0) {
      cpt = b & 0x0F, len = 3;
    } else if ((b & 0xF8) == 0xF0) {
      cpt = b & 0x07, len = 4;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char c = s[i + k];
      if ((c & 0xC0) != 0x80) return false;
      cpt = (cpt << 6) | (c & 0x3F);
    }
    const uint32_t min_for_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cpt < min_for_len[len] || cpt > 0x10FFFF || (cpt >= 0xD800 && cpt <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

// ---- a hand-built vocabulary ------------------------------------------------------------------
//
//  0 <pad> C   1 <eos> C   2 <bos> C   3 <unk> U   4 <|turn> C   5 <turn|> C
//  6 <|tool_response> UD   7 <|"|> UD   8 </s> N   9..264 <0x00>..<0xFF> B
//  then normal tokens in the order given to make_vocab.
struct SmallVocab {
  VocabData data;
  int32_t id(const std::string& text) const {
    for (size_t i = 0; i < data.tokens.size(); ++i)
      if (data.tokens[i] == text) return static_cast<int32_t>(i);
    ADD_FAILURE() << "no token " << text;
    return -1;
  }
  int32_t byte(int b) const { return 9 + b; }
};

// The bytes of a GGUF file holding v's tokenizer keys (eos 1, bos 2), then whatever `edit` changes.
std::vector<uint8_t> vocab_gguf(const SmallVocab& v,
                                const std::function<void(gguf::GgufWriter&)>& edit = {}) {
  gguf::GgufWriter w;
  w.set_string("tokenizer.ggml.model", v.data.model);
  w.set_string_array("tokenizer.ggml.tokens", v.data.tokens);
  w.set_i32_array("tokenizer.ggml.token_type", v.data.types);
  w.set_string_array("tokenizer.ggml.merges", v.data.merges);
  w.set_u32("tokenizer.ggml.eos_token_id", 1);
  w.set_u32("tokenizer.ggml.bos_token_id", 2);
  if (edit) edit(w);
  return w.to_bytes();
}

// One to three letters of "abcd": words that make merges reuse each other's symbols.
std::string short_word(std::mt19937& rng) {
  std::string w;
  for (int n = 1 + int(rng() % 3); n > 0; --n) w += char('a' + rng() % 4);
  return w;
}

SmallVocab make_vocab(const std::vector<std::string>& normal, const std::vector<std::string>& merges) {
  SmallVocab v;
  auto add = [&](const std::string& t, TokenType type) {
    v.data.tokens.push_back(t);
    v.data.types.push_back(static_cast<int32_t>(type));
  };
  add("<pad>", TokenType::Control);
  add("<eos>", TokenType::Control);
  add("<bos>", TokenType::Control);
  add("<unk>", TokenType::Unknown);
  add("<|turn>", TokenType::Control);
  add("<turn|>", TokenType::Control);
  add("<|tool_response>", TokenType::UserDefined);
  add("<|\"|>", TokenType::UserDefined);
  add("</s>", TokenType::Normal);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(name, TokenType::Byte);
  }
  for (const std::string& t : normal) add(t, TokenType::Normal);
  v.data.merges = merges;
  v.data.special.pad = 0;
  v.data.special.eos = 1;
  v.data.special.bos = 2;
  v.data.special.unk = 3;
  return v;
}

TEST(TokenizerSmall, LowestRankMergeWins) {
  // "abc": with "b c" ranked first the result is [a, bc]; with "a b" first it is [ab, c].
  SmallVocab v1 = make_vocab({"a", "b", "c", "ab", "bc"}, {"b c", "a b"});
  Tokenizer t1(v1.data);
  EXPECT_EQ(t1.encode("abc", false, false), (Ids{v1.id("a"), v1.id("bc")}));
  SmallVocab v2 = make_vocab({"a", "b", "c", "ab", "bc"}, {"a b", "b c"});
  Tokenizer t2(v2.data);
  EXPECT_EQ(t2.encode("abc", false, false), (Ids{v2.id("ab"), v2.id("c")}));
}

TEST(TokenizerSmall, MergesChainAndTiesGoLeftmost) {
  SmallVocab v = make_vocab({"a", "aa", "aaaa"}, {"a a", "aa aa"});
  Tokenizer t(v.data);
  EXPECT_EQ(t.encode("aaa", false, false), (Ids{v.id("aa"), v.id("a")}));
  EXPECT_EQ(t.encode("aaaaa", false, false), (Ids{v.id("aaaa"), v.id("a")}));
  EXPECT_EQ(t.encode("aaaaaaa", false, false), (Ids{v.id("aaaa"), v.id("aa"), v.id("a")}));
}

TEST(TokenizerSmall, SpacesBecomeMarkerWithoutPrefix) {
  SmallVocab v =
      make_vocab({"a", "b", kSpace, kSpace + "b", kSpace + kSpace}, {kSpace + " b", kSpace + " " + kSpace});
  Tokenizer t(v.data);
  EXPECT_EQ(t.encode("a b", false, false), (Ids{v.id("a"), v.id(kSpace + "b")}));
  EXPECT_EQ(t.encode(" a", false, false), (Ids{v.id(kSpace), v.id("a")}));
  // Three spaces: "▁ b" outranks "▁ ▁", so the last space goes to the b.
  EXPECT_EQ(t.encode("   b", false, false), (Ids{v.id(kSpace + kSpace), v.id(kSpace + "b")}));
  EXPECT_EQ(t.decode(t.encode("a   b ", false, false)), "a   b ");
  EXPECT_TRUE(t.encode("", false, false).empty());
  EXPECT_EQ(t.encode("", true, false), (Ids{2}));
  EXPECT_EQ(t.encode("a", true, false), (Ids{2, v.id("a")}));
}

TEST(TokenizerSmall, ByteFallback) {
  SmallVocab v = make_vocab({"x", "y", "xy!"}, {"x y"});  // "xy" is a merge result but not a token
  Tokenizer t(v.data);
  // é is not in the vocabulary: its two bytes.
  EXPECT_EQ(t.encode("\xC3\xA9", false, false), (Ids{v.byte(0xC3), v.byte(0xA9)}));
  // The merged symbol "xy" is not a token, so it falls back to bytes, as in llama.cpp.
  EXPECT_EQ(t.encode("xy", false, false), (Ids{v.byte('x'), v.byte('y')}));
  EXPECT_EQ(t.decode(t.encode("x\xC3\xA9y", false, false)), "x\xC3\xA9y");
}

TEST(TokenizerSmall, MissingByteTokenIsDropped) {
  SmallVocab v = make_vocab({"a"}, {});
  v.data.tokens[9 + 0xA9] = "<0xA9-gone>";  // no token for byte 0xA9 any more
  Tokenizer t(v.data);
  EXPECT_EQ(t.encode("a\xC3\xA9", false, false), (Ids{v.id("a"), v.byte(0xC3)}));
}

TEST(TokenizerSmall, NewlineRuns) {
  SmallVocab v = make_vocab({"a", "\n", "\n\n", "\n\n\n\n"}, {"\n \n", "\n\n \n\n", "a \n"});
  Tokenizer t(v.data);
  // A run that is a token is emitted whole even where BPE would not produce it.
  EXPECT_EQ(t.encode("\n\n\n\n", false, false), (Ids{v.id("\n\n\n\n")}));
  // A run that is not a token goes through BPE: [\n\n, \n].
  EXPECT_EQ(t.encode("\n\n\n", false, false), (Ids{v.id("\n\n"), v.id("\n")}));
  // Newlines are split from the text, so "a \n" can never apply.
  EXPECT_EQ(t.encode("a\na", false, false), (Ids{v.id("a"), v.id("\n"), v.id("a")}));
}

TEST(TokenizerSmall, MergeAcrossSpaceBoundaryIsKept) {
  // "> ▁" joins a character to the following space: the line must not be cut there.
  SmallVocab v =
      make_vocab({">", "<", kSpace, ">" + kSpace, kSpace + "<", "a"}, {"> " + kSpace, kSpace + " <"});
  Tokenizer t(v.data);
  EXPECT_EQ(t.encode("> <", false, false), (Ids{v.id(">" + kSpace), v.id("<")}));
  EXPECT_EQ(t.encode("a <", false, false), (Ids{v.id("a"), v.id(kSpace + "<")}));
}

TEST(TokenizerSmall, SpecialTokensByMode) {
  SmallVocab v = make_vocab({"a"}, {});
  Tokenizer t(v.data);
  // parse_special: CONTROL and USER_DEFINED tokens match.
  EXPECT_EQ(t.encode("<|turn>a<turn|>", false, true), (Ids{4, v.id("a"), 5}));
  EXPECT_EQ(t.encode("<|tool_response>a", false, true), (Ids{6, v.id("a")}));
  // Without it, USER_DEFINED still match, CONTROL ones are text, and <|tool_response> is CONTROL
  // after the EOG promotion.
  EXPECT_EQ(t.encode("<|\"|>a", false, false), (Ids{7, v.id("a")}));
  const Ids as_text = t.encode("<turn|>", false, false);
  EXPECT_EQ(as_text.size(), 7u);
  EXPECT_EQ(t.decode(as_text), "<turn|>");
  EXPECT_NE(t.encode("<|tool_response>", false, false), (Ids{6}));
  // <unk> (UNKNOWN) is matched only with parse_special.
  EXPECT_EQ(t.encode("<unk>", false, true), (Ids{3}));
  EXPECT_EQ(t.encode("<unk>", false, false).size(), 5u);
}

TEST(TokenizerSmall, LongestSpecialFirst) {
  SmallVocab v = make_vocab({"x"}, {});
  v.data.tokens.push_back("<a>");
  v.data.types.push_back(static_cast<int32_t>(TokenType::UserDefined));
  v.data.tokens.push_back("<a><a>");
  v.data.types.push_back(static_cast<int32_t>(TokenType::UserDefined));
  Tokenizer t(v.data);
  const int32_t one = v.id("x") + 1, two = v.id("x") + 2;
  EXPECT_EQ(t.encode("<a><a><a>", false, false), (Ids{two, one}));
}

TEST(TokenizerSmall, EogSetAndAttributes) {
  SmallVocab v = make_vocab({"a"}, {});
  Tokenizer t(v.data);
  EXPECT_EQ(t.eog_ids(), (Ids{1, 5, 6}));  // <eos>, <turn|>, <|tool_response>
  EXPECT_TRUE(t.is_eog(5));
  EXPECT_FALSE(t.is_eog(8));  // </s> is dropped from EOG when <|tool_response> exists
  EXPECT_TRUE(t.is_normal(8));
  EXPECT_TRUE(t.is_control(6));
  EXPECT_TRUE(t.is_user_defined(6));
  EXPECT_EQ(t.token_type(6), TokenType::UserDefined);  // the file's type is kept
  EXPECT_FALSE(t.is_eog(-1));
  EXPECT_FALSE(t.is_eog(1 << 20));
  EXPECT_EQ(t.bos(), 2);
  EXPECT_EQ(t.eos(), 1);
  EXPECT_TRUE(t.add_bos_default());
}

TEST(TokenizerSmall, EogFromEosIdOnly) {
  // No Gemma texts: the EOG set is just the eos id, wherever it is.
  VocabData d;
  d.tokens = {"q", "r", "s"};
  d.special.eos = 2;
  Tokenizer t(d);
  EXPECT_EQ(t.eog_ids(), (Ids{2}));
  EXPECT_EQ(t.bos(), kNoToken);
  EXPECT_THROW(t.encode("q", true, false), TokenizerError);
}

TEST(TokenizerSmall, Pieces) {
  SmallVocab v = make_vocab({"a" + kSpace + "b"}, {});
  Tokenizer t(v.data);
  EXPECT_EQ(t.token_piece(v.id("a" + kSpace + "b")), "a b");
  EXPECT_EQ(t.token_piece(v.byte(0x41)), "A");
  EXPECT_EQ(t.token_piece(5), "<turn|>");
  EXPECT_EQ(t.token_piece(5, /*special=*/false), "");
  EXPECT_EQ(t.token_piece(7, /*special=*/false), "<|\"|>");  // USER_DEFINED is always shown
  EXPECT_EQ(t.decode({2, v.id("a" + kSpace + "b"), 5}), "<bos>a b<turn|>");
  EXPECT_EQ(t.decode({2, v.id("a" + kSpace + "b"), 5}, false), "a b");
  EXPECT_THROW(t.token_piece(-1), TokenizerError);
  EXPECT_THROW(t.decode({1 << 20}), TokenizerError);
}

TEST(TokenizerSmall, LoadErrors) {
  SmallVocab v = make_vocab({"a"}, {});
  VocabData bad_model = v.data;
  bad_model.model = "llama";
  EXPECT_THROW(Tokenizer{bad_model}, TokenizerError);
  VocabData dup = v.data;
  dup.tokens.push_back("a");
  dup.types.push_back(1);
  EXPECT_THROW(Tokenizer{dup}, TokenizerError);
  VocabData short_types = v.data;
  short_types.types.resize(3);
  EXPECT_THROW(Tokenizer{short_types}, TokenizerError);
  VocabData empty;
  EXPECT_THROW(Tokenizer{empty}, TokenizerError);
}

// Enough merges that the table is built on two threads: symbols that are not tokens get their ids
// in rank order (left part, right part, then the two joined), and a repeated pair keeps its lowest
// rank, exactly as one pass through the merges in rank order assigns them (simulated here with a
// map). The parts are short words over "abcd", some of them tokens, so later merges reuse symbols
// that earlier ones created.
TEST(TokenizerSmall, ManyMergesGiveSymbolsAndRanksOfOnePassInRankOrder) {
  std::mt19937 rng(7);
  std::vector<std::string> normal;
  for (int k = 0; k < 30; ++k)
    if (std::string w = short_word(rng); std::find(normal.begin(), normal.end(), w) == normal.end())
      normal.push_back(w);
  std::vector<std::string> merges;
  for (int k = 0; k < 12000; ++k)
    merges.push_back(k % 997 == 5 ? short_word(rng) : short_word(rng) + " " + short_word(rng));
  SmallVocab v = make_vocab(normal, merges);
  const Vocab vocab(v.data);

  std::map<std::string, int32_t> symbols;
  for (size_t id = 0; id < v.data.tokens.size(); ++id) symbols[v.data.tokens[id]] = int32_t(id);
  auto sym = [&](const std::string& s) {
    return symbols.emplace(s, int32_t(symbols.size())).first->second;  // a new symbol takes the next id
  };
  std::map<std::pair<int32_t, int32_t>, Merge> table;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const size_t pos = merges[rank].find(' ', 1);
    if (pos == std::string::npos) continue;  // a merge without a space never applies
    const std::string left = merges[rank].substr(0, pos), right = merges[rank].substr(pos + 1);
    const int32_t l = sym(left), r = sym(right);
    table.emplace(std::make_pair(l, r), Merge{int32_t(rank), sym(left + right)});
  }
  ASSERT_GT(symbols.size(), v.data.tokens.size() + 100);  // many symbols are not tokens
  for (const auto& [s, id] : symbols) EXPECT_EQ(vocab.symbol(s), id) << s;
  EXPECT_EQ(vocab.n_merges(), int(table.size()));
  for (const auto& [pair, m] : table) {
    const auto got = vocab.merge(pair.first, pair.second);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->rank, m.rank);
    EXPECT_EQ(got->result, m.result);
  }
}

// A tokenizer read from a GGUF file (its tokens and merges read in place) gives the ids of the same
// vocabulary built by hand, and a file missing or mistyping a key is an error naming file and key.
TEST(TokenizerSmall, FromGgufMatchesHandBuiltAndNamesBadKeys) {
  SmallVocab v = make_vocab({"a", "b", "ab", "c"}, {"a b", "ab c"});
  auto write = [&](const std::function<void(gguf::GgufWriter&)>& edit) { return vocab_gguf(v, edit); };
  auto open = [](const std::vector<uint8_t>& bytes) {
    return gguf::GgufFile::from_memory(bytes.data(), bytes.size(), "vocab.gguf");
  };
  VocabData hand = v.data;
  hand.special.eos = 1;
  hand.special.bos = 2;
  const Tokenizer by_hand(hand);
  const auto good = open(write([](gguf::GgufWriter&) {}));
  const Tokenizer from_file = Tokenizer::from_gguf(*good);
  for (const std::string text : {"abc", "ab ab c", "cab<turn|>a"})
    EXPECT_EQ(from_file.encode(text, true, true), by_hand.encode(text, true, true)) << text;
  EXPECT_EQ(from_file.encode("ab", false, false), (Ids{v.id("ab")}));
  // "ab c" makes "abc", which is not a token: its bytes.
  EXPECT_EQ(from_file.encode("abc", false, false), (Ids{v.byte('a'), v.byte('b'), v.byte('c')}));
  EXPECT_EQ(from_file.vocab().n_merges(), 2);
  EXPECT_EQ(from_file.eos(), 1);

  auto error_of = [&](const std::function<void(gguf::GgufWriter&)>& edit) {
    const auto f = open(write(edit));
    try {
      Tokenizer::from_gguf(*f);
    } catch (const TokenizerError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos && msg.find("vocab.gguf") != std::string::npos;
  };
  std::string msg = error_of([](gguf::GgufWriter& w) { w.set_u32("tokenizer.ggml.merges", 3); });
  EXPECT_TRUE(has(msg, "tokenizer.ggml.merges: expected an array of strings")) << msg;
  msg = error_of([](gguf::GgufWriter& w) { w.set_u32("tokenizer.ggml.tokens", 3); });
  EXPECT_TRUE(has(msg, "tokenizer.ggml.tokens: expected an array of strings")) << msg;
  msg = error_of([](gguf::GgufWriter& w) { w.set_string("tokenizer.ggml.model", "llama"); });
  EXPECT_TRUE(has(msg, "only the 'gemma4' tokenizer")) << msg;
  msg = error_of([](gguf::GgufWriter& w) { w.set_string_array("tokenizer.ggml.token_type", {"x"}); });
  EXPECT_TRUE(has(msg, "tokenizer.ggml.token_type: expected an array of int32")) << msg;
  // A token text twice (the index is built with lookups ahead of the inserts): both ids named, late
  // in the array too, past the lookahead.
  std::vector<std::string> repeated = v.data.tokens;
  for (int k = 0; k < 40; ++k) repeated.push_back("t" + std::to_string(k));
  repeated.push_back("t7");
  std::vector<int32_t> repeated_types = v.data.types;
  repeated_types.resize(repeated.size(), 1);  // normal tokens
  msg = error_of([&](gguf::GgufWriter& w) {
    w.set_string_array("tokenizer.ggml.tokens", repeated);
    w.set_i32_array("tokenizer.ggml.token_type", repeated_types);
  });
  EXPECT_TRUE(has(msg, "duplicate token 't7' at ids " + std::to_string(v.data.tokens.size() + 7) + " and " +
                           std::to_string(repeated.size() - 1)))
      << msg;
  // Token types stored as uint32 read as the int32 ones.
  std::vector<uint32_t> unsigned_types(v.data.types.begin(), v.data.types.end());
  const auto as_u32 =
      open(write([&](gguf::GgufWriter& w) { w.set_u32_array("tokenizer.ggml.token_type", unsigned_types); }));
  const Tokenizer from_u32 = Tokenizer::from_gguf(*as_u32);
  for (int32_t id = 0; id < int32_t(v.data.types.size()); ++id)
    EXPECT_EQ(from_u32.token_type(id), from_file.token_type(id)) << id;
}

TEST(TokenizerSmall, LlamaNormalization) {
  auto norm = [](std::string_view s) {
    std::string out;
    append_llama_normalized(out, s);
    return out;
  };
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(norm("a b"), "a" + kSpace + "b");
  EXPECT_EQ(norm("\x80"), fffd);
  EXPECT_EQ(norm("\xFF"), fffd);
  EXPECT_EQ(norm("\xE4\xBD"), fffd + fffd);             // truncated: one U+FFFD per byte
  EXPECT_EQ(norm("\xC0\xAF"), "/");                     // overlong form keeps its code point
  EXPECT_EQ(norm("\xED\xA0\x80"), "\xED\xA0\x80");      // a surrogate passes through
  EXPECT_EQ(norm("\xF7\xBF\xBF\xBF"), fffd);            // > U+10FFFF (llama.cpp throws here)
  EXPECT_EQ(norm("\xF0\x9F\x98"), fffd + fffd + fffd);  // truncated emoji
  EXPECT_EQ(norm(std::string("\0x", 2)), std::string("\0x", 2));
  EXPECT_EQ(norm("\xE4\xBD\xA0"), "\xE4\xBD\xA0");
}

TEST(TokenizerSmall, RandomBytesDoNotCrash) {
  SmallVocab v = make_vocab({"a", "b", "ab", kSpace, "\n"}, {"a b"});
  Tokenizer t(v.data);
  std::mt19937 rng(7);
  const std::string alphabet = "ab <|>\n\x80\xC3\xE4\xF0\xFF\xBD\xA9";
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s;
    const int len = rng() % 24;
    for (int i = 0; i < len; ++i)
      s += (rng() % 3 == 0) ? static_cast<char>(rng() & 0xFF) : alphabet[rng() % alphabet.size()];
    for (bool special : {false, true}) {
      const Ids ids = t.encode(s, false, special);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t.n_vocab());
      StreamingDetokenizer stream(t);
      std::string text;
      for (int32_t id : ids) text += stream.push(id);
      text += stream.flush();
      ASSERT_TRUE(well_formed_utf8(text));
    }
  }
}

// ---- streaming detokenizer ------------------------------------------------------------------

TEST(StreamingDetokenizer, HoldsBackPartialCharacters) {
  SmallVocab v = make_vocab({"a"}, {});
  Tokenizer t(v.data);
  StreamingDetokenizer s(t);
  EXPECT_EQ(s.push(v.id("a")), "a");
  EXPECT_EQ(s.push(v.byte(0xE4)), "");
  EXPECT_EQ(s.push(v.byte(0xBD)), "");
  EXPECT_EQ(s.pending_bytes(), 2u);
  EXPECT_EQ(s.push(v.byte(0xA0)), "\xE4\xBD\xA0");
  EXPECT_EQ(s.push(5), "<turn|>");
  EXPECT_EQ(s.flush(), "");
}

TEST(StreamingDetokenizer, ReplacesInvalidBytes) {
  SmallVocab v = make_vocab({"a"}, {});
  Tokenizer t(v.data);
  const std::string fffd = "\xEF\xBF\xBD";
  StreamingDetokenizer s(t);
  EXPECT_EQ(s.push(v.byte(0xFF)), fffd);
  EXPECT_EQ(s.push(v.byte(0xE4)), "");
  EXPECT_EQ(s.push(v.id("a")), fffd + "a");  // the broken sequence, then the letter
  EXPECT_EQ(s.push(v.byte(0xF0)), "");
  EXPECT_EQ(s.push(v.byte(0x9F)), "");
  EXPECT_EQ(s.flush(), fffd);             // unfinished at the end
  EXPECT_EQ(s.push(v.byte(0xC0)), fffd);  // can never start a character
  EXPECT_EQ(s.push(v.byte(0xED)), "");
  EXPECT_EQ(s.push(v.byte(0xA0)), fffd + fffd);  // surrogate: ED is invalid with A0, then A0 alone
  StreamingDetokenizer quiet(t, /*special=*/false);
  EXPECT_EQ(quiet.push(5), "");
}

TEST(StreamingDetokenizer, ValidPrefix) {
  std::string out;
  EXPECT_EQ(append_valid_utf8(out, "ab\xE4\xBD", false), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  EXPECT_EQ(append_valid_utf8(out, "ab\xE4\xBD", true), 4u);
  EXPECT_EQ(out, "ab\xEF\xBF\xBD");
  out.clear();
  EXPECT_EQ(append_valid_utf8(out, "\xF0\x9F\x98\x80", false), 4u);
  EXPECT_EQ(out, "\xF0\x9F\x98\x80");
}

// ---- the real Gemma 4 vocabulary --------------------------------------------------------------

const Tokenizer& gemma4() {
  static const Tokenizer t = [] {
    auto file = gguf::GgufFile::open(testdata("tokenizer/gemma4-vocab.gguf"));
    return Tokenizer::from_gguf(*file);
  }();
  return t;
}

const Tokenizer& tiny() {
  static const Tokenizer t = [] {
    auto file = gguf::GgufFile::open(testdata("tiny-gemma4/tiny-gemma4-f32.gguf"));
    return Tokenizer::from_gguf(*file);
  }();
  return t;
}

struct GoldenCase {
  std::string name, text, decoded;
  bool parse_special = false;
  Ids ids;
};

std::vector<GoldenCase> load_goldens() {
  const std::string path = testdata("tokenizer/tokenize-public.jsonl");
  std::ifstream in(path);
  if (!in) throw std::runtime_error("missing golden file " + path);
  std::vector<GoldenCase> cases;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    GoldenCase c;
    c.name = j.at("name").get<std::string>();
    c.text = j.at("text").get<std::string>();
    c.decoded = j.at("decoded").get<std::string>();
    c.parse_special = j.at("parse_special").get<bool>();
    c.ids = j.at("ids").get<Ids>();
    cases.push_back(std::move(c));
  }
  return cases;
}

TEST(TokenizerGemma4, VocabularyFacts) {
  const Tokenizer& t = gemma4();
  EXPECT_EQ(t.n_vocab(), 262144);
  EXPECT_EQ(t.eog_ids(), (Ids{1, 50, 106}));
  EXPECT_EQ(t.bos(), 2);
  EXPECT_EQ(t.eos(), 1);
  EXPECT_EQ(t.unk(), 3);
  EXPECT_EQ(t.pad(), 0);
  EXPECT_EQ(t.mask(), 4);
  EXPECT_TRUE(t.add_bos_default());
  EXPECT_TRUE(t.is_control(50));
  EXPECT_TRUE(t.is_user_defined(50));
  EXPECT_FALSE(t.is_control(48));
  EXPECT_FALSE(t.is_eog(212));  // </s>
  EXPECT_EQ(t.find_token("<turn|>"), 106);
  EXPECT_EQ(t.find_token("\n"), 107);
  EXPECT_EQ(t.find_token(kSpace), 236743);
  EXPECT_EQ(t.find_token("no such token"), std::nullopt);
  EXPECT_EQ(t.token_type(238), TokenType::Byte);
  EXPECT_EQ(t.token_piece(238 + 0x41), "A");
}

TEST(TokenizerGemma4, PublicGoldens) {
  const Tokenizer& t = gemma4();
  const std::vector<GoldenCase> cases = load_goldens();
  ASSERT_EQ(cases.size(), 213u);
  int passed = 0;
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Ids ids = t.encode(c.text, false, c.parse_special);
    EXPECT_EQ(ids, c.ids);
    Ids with_bos = {t.bos()};
    with_bos.insert(with_bos.end(), c.ids.begin(), c.ids.end());
    EXPECT_EQ(t.encode(c.text, true, c.parse_special), with_bos);
    EXPECT_EQ(t.decode(c.ids), c.decoded);

    StreamingDetokenizer stream(t);
    std::string streamed;
    for (int32_t id : c.ids) {
      const std::string part = stream.push(id);
      EXPECT_TRUE(well_formed_utf8(part)) << "after id " << id;
      streamed += part;
    }
    streamed += stream.flush();
    EXPECT_EQ(streamed, c.decoded);
    passed += ids == c.ids;
  }
  EXPECT_EQ(passed, 213);
}

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

TEST(TokenizerGemma4, InvalidUtf8LikeLlamaCpp) {
  const Tokenizer& t = gemma4();
  const std::string path = testdata("tokenizer/tokenize-public-invalid-utf8.jsonl");
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing " << path;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    SCOPED_TRACE(j.at("name").get<std::string>());
    const std::string text = unhex(j.at("text_hex").get<std::string>());
    const Ids ids = t.encode(text, false, j.at("parse_special").get<bool>());
    // Informational in the README (llama.cpp only), but we reproduce it.
    EXPECT_EQ(ids, j.at("ids").get<Ids>());
    EXPECT_EQ(t.decode(ids), unhex(j.at("decoded_hex").get<std::string>()));
    ++n;
  }
  EXPECT_EQ(n, 8);
}

// A plain, slow transcription of llama.cpp's BPE session: the whole line at once, the lowest
// (rank, position) pair merged each step, no piece splitting and no cache.
Ids reference_bpe(const Vocab& v, std::string_view word) {
  std::vector<std::string> syms;
  for (size_t i = 0; i < word.size();) {
    const unsigned char b = word[i];
    const size_t len = std::min<size_t>(b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4, word.size() - i);
    syms.emplace_back(word.substr(i, len));
    i += len;
  }
  for (;;) {
    int best = -1, best_rank = 0;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      const auto m = v.merge(v.symbol(syms[i]), v.symbol(syms[i + 1]));
      if (m && (best < 0 || m->rank < best_rank)) best = static_cast<int>(i), best_rank = m->rank;
    }
    if (best < 0) break;
    syms[best] += syms[best + 1];
    syms.erase(syms.begin() + best + 1);
  }
  Ids out;
  for (const std::string& s : syms) {
    if (auto id = v.find(s)) {
      out.push_back(*id);
    } else {
      for (unsigned char c : s)
        if (v.byte_token(c) != kNoToken) out.push_back(v.byte_token(c));
    }
  }
  return out;
}

Ids reference_encode(const Vocab& v, std::string_view text) {  // no special tokens in `text`
  std::string s;
  append_llama_normalized(s, text);
  Ids out;
  for (size_t i = 0; i < s.size();) {
    const bool newline = s[i] == '\n';
    size_t j = i;
    while (j < s.size() && (s[j] == '\n') == newline) ++j;
    const std::string_view word = std::string_view(s).substr(i, j - i);
    const auto whole = newline ? v.find(word) : std::nullopt;
    const Ids part = whole ? Ids{*whole} : reference_bpe(v, word);
    out.insert(out.end(), part.begin(), part.end());
    i = j;
  }
  return out;
}

TEST(TokenizerGemma4, SameAsWholeLineBpe) {
  // The real vocabulary has one merge that joins a character to a following space (">▁</"), so the
  // piece splitting must keep "> " together.
  const Tokenizer& t = gemma4();
  const std::optional<int32_t> glued = t.find_token(">" + kSpace + "</");
  ASSERT_TRUE(glued.has_value());
  const Ids html = t.encode("<b> </b>", false, false);
  EXPECT_NE(std::find(html.begin(), html.end(), *glued), html.end());
  EXPECT_EQ(html, reference_encode(t.vocab(), "<b> </b>"));

  std::mt19937 rng(99);
  const std::vector<std::string> parts = {"> ",
                                          "</",
                                          "<b>",
                                          " ",
                                          "  ",
                                          "a",
                                          "Hello",
                                          "\n",
                                          "\n\n",
                                          "\xC3\xA9",
                                          "\xE4\xBD\xA0\xE5\xA5\xBD",
                                          "\t",
                                          "x>",
                                          ">>",
                                          "the",
                                          " world",
                                          "123",
                                          "\xF0\x9F\x98\x80",
                                          "\xE2\x96\x81",
                                          "-",
                                          "=="};
  for (int iter = 0; iter < 400; ++iter) {
    std::string s;
    const int len = 1 + rng() % 12;
    for (int i = 0; i < len; ++i) s += parts[rng() % parts.size()];
    ASSERT_EQ(t.encode(s, false, false), reference_encode(t.vocab(), s)) << s;
  }
}

TEST(TokenizerGemma4, RandomBytesDoNotCrash) {
  const Tokenizer& t = gemma4();
  std::mt19937 rng(1234);
  const std::vector<std::string> parts = {
      "<|turn>", "<turn|>",      "<|tool_response>", "<|\"|>", "\n",    "  ",
      "\t",      "\xE4\xBD\xA0", "\xF0\x9F\x98\x80", "a",      "Hello", "<",
      "|>"};
  for (int iter = 0; iter < 300; ++iter) {
    std::string s;
    const int len = rng() % 16;
    for (int i = 0; i < len; ++i)
      s += (rng() % 3 == 0) ? std::string(1, static_cast<char>(rng() & 0xFF)) : parts[rng() % parts.size()];
    for (bool special : {false, true}) {
      const Ids ids = t.encode(s, false, special);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t.n_vocab());
      (void)t.decode(ids);
    }
  }
}

// ---- tiny-gemma4 --------------------------------------------------------------------------------

TEST(TokenizerTiny, ReadmeExample) {
  const Tokenizer& t = tiny();
  EXPECT_EQ(t.n_vocab(), 4096);
  EXPECT_EQ(t.encode("In the beginning God created", true, false), (Ids{2, 1294, 349, 2793, 478, 2447, 373}));
  EXPECT_EQ(t.eog_ids(), (Ids{1, 6, 14}));
  EXPECT_EQ(t.decode({2, 1294, 349, 2793, 478, 2447, 373}), "<bos>In the beginning God created");
}

TEST(TokenizerTiny, ValidTxtTokenCount) {
  // README: llama-tokenize gives 46,465 tokens (with BOS) for the whole of valid.txt.
  const Tokenizer& t = tiny();
  const std::string text = read_file(testdata("tiny-gemma4/valid.txt"));
  const Ids ids = t.encode(text, true, false);
  EXPECT_EQ(ids.size(), 46465u);
  EXPECT_EQ(t.decode(ids), "<bos>" + text);
}

// ---- the merge table kept on disk (vocab_cache.cpp) ----------------------------------------------

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/gem4_merges_XXXXXX";
    path = ::mkdtemp(t) ? t : "";
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

std::string only_cache_file(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(dir)) found.push_back(e.path().string());
  EXPECT_EQ(found.size(), 1u);  // one file, no temporaries left
  return found.empty() ? "" : found[0];
}

// The real vocabulary with a cache folder: the first load builds the table and writes it, the next
// maps it, and both give llama.cpp's ids on every golden. A file damaged, cut short or of another
// version is noticed, rebuilt over and mapped again on the load after.
TEST(TokenizerGemma4, MergeTableKeptOnDiskGivesTheSameIds) {
  const TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  auto file = gguf::GgufFile::open(testdata("tokenizer/gemma4-vocab.gguf"));
  const std::vector<GoldenCase> cases = load_goldens();
  auto check = [&](const Tokenizer& t, const std::string& origin_part) {
    EXPECT_NE(t.vocab().merge_table_origin().find(origin_part), std::string::npos)
        << t.vocab().merge_table_origin();
    EXPECT_EQ(t.vocab().n_merges(), gemma4().vocab().n_merges());
    for (const GoldenCase& c : cases) EXPECT_EQ(t.encode(c.text, false, c.parse_special), c.ids) << c.name;
  };
  check(Tokenizer::from_gguf(*file, dir.path), "(no cache file yet), " + dir.path);
  const std::string path = only_cache_file(dir.path);
  EXPECT_NE(path.find("/vocab-"), std::string::npos) << path;
  check(Tokenizer::from_gguf(*file, dir.path), "mapped from " + path);

  auto edit = [&](const std::function<void(std::string&)>& change) {
    std::string bytes = read_file(path);
    change(bytes);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  };
  // A temporary that a writer which died mid-write left (no process has that PID) goes when the file
  // is written again.
  const std::string abandoned = path + ".tmp-2147483000";
  std::ofstream(abandoned) << "partial";
  edit([](std::string& b) { b[b.size() - 7] ^= 0x40; });  // a merge slot's byte
  check(Tokenizer::from_gguf(*file, dir.path), "is damaged");
  EXPECT_FALSE(std::filesystem::exists(abandoned));
  check(Tokenizer::from_gguf(*file, dir.path), "mapped from");
  edit([](std::string& b) { b.resize(b.size() - 16); });
  check(Tokenizer::from_gguf(*file, dir.path), "does not match this vocabulary or its own sizes");
  edit([](std::string& b) { b[8] ^= 1; });  // the format version
  check(Tokenizer::from_gguf(*file, dir.path), "is not one this build writes");
  check(Tokenizer::from_gguf(*file, dir.path), "mapped from");
  only_cache_file(dir.path);

  // A folder that cannot be made: built as without one, and the reason given.
  const std::string blocked = dir.path + "/plain-file";
  std::ofstream(blocked) << "x";
  check(Tokenizer::from_gguf(*file, blocked + "/sub"), "not kept: cannot create");
}

// A vocabulary whose merges make symbols that are not tokens and glue characters: through a cache
// file, every symbol keeps its id and every merge its rank and result, and the ids are the same.
TEST(TokenizerSmall, MergeTableKeptOnDiskKeepsSymbolsAndGlue) {
  std::mt19937 rng(11);
  std::vector<std::string> normal = {"a", "b", "c", "d", kSpace + "a", "\xC3\xA9"};
  std::vector<std::string> merges = {"\xC3\xA9 " + kSpace + "a", "d " + kSpace + "a"};
  for (int k = 0; k < 5000; ++k) merges.push_back(short_word(rng) + " " + short_word(rng));
  SmallVocab v = make_vocab(normal, merges);
  const std::vector<uint8_t> bytes = vocab_gguf(v);
  const auto file = gguf::GgufFile::from_memory(bytes.data(), bytes.size(), "vocab.gguf");
  const TempDir dir;
  const Tokenizer plain = Tokenizer::from_gguf(*file);
  const Tokenizer first = Tokenizer::from_gguf(*file, dir.path);
  const Tokenizer mapped = Tokenizer::from_gguf(*file, dir.path);
  ASSERT_NE(mapped.vocab().merge_table_origin().find("mapped from"), std::string::npos)
      << mapped.vocab().merge_table_origin();
  const Vocab& a = plain.vocab();
  const Vocab& b = mapped.vocab();
  ASSERT_EQ(a.n_merges(), b.n_merges());
  int new_symbols = 0;
  for (const std::string& m : merges) {
    const size_t pos = m.find(' ', 1);
    const std::string left = m.substr(0, pos), right = m.substr(pos + 1);
    for (const std::string& s : {left, right, left + right}) {
      EXPECT_EQ(a.symbol(s), b.symbol(s)) << s;
      new_symbols += a.symbol(s) >= a.n_tokens();
    }
    const auto ma = a.merge(a.symbol(left), a.symbol(right)), mb = b.merge(b.symbol(left), b.symbol(right));
    ASSERT_TRUE(ma && mb) << m;
    EXPECT_EQ(ma->rank, mb->rank);
    EXPECT_EQ(ma->result, mb->result);
  }
  EXPECT_GT(new_symbols, 100);
  EXPECT_TRUE(b.glues_to_following_space("\xC3\xA9"));
  EXPECT_TRUE(b.glues_to_following_space("d"));
  EXPECT_FALSE(b.glues_to_following_space("c"));
  for (const std::string text : {"abcd a\xC3\xA9 a", "dd a ba cab", "a b c d"})
    EXPECT_EQ(mapped.encode(text, true, false), plain.encode(text, true, false)) << text;
}

}  // namespace
}  // namespace gem4::text
