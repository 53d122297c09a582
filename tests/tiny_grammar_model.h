// The trained tiny model with its tokenizer and vocabulary trie, loaded once per test suite: the
// fixture of the grammar tests that generate with the model (grammar_test, grammar_tool_call_test).
#pragma once
#include <gtest/gtest.h>

#include <memory>

#include "generate/grammar/token_trie.h"
#include "kernels/thread_pool.h"
#include "model/model.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace gem4::test {

class TinyGrammarModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = Model::load(testdata("tiny-gemma4/tiny-gemma4-f32.gguf")).release();
    tokenizer_ = new text::Tokenizer(text::Tokenizer::from_gguf(*model_->file));
    trie_ = new std::shared_ptr<const generate::grammar::TokenTrie>(
        generate::grammar::TokenTrie::from_tokenizer(*tokenizer_));
    pool_ = new ThreadPool(2);
  }
  static void TearDownTestSuite() {
    delete pool_;
    delete trie_;
    delete tokenizer_;
    delete model_;
    pool_ = nullptr, trie_ = nullptr, tokenizer_ = nullptr, model_ = nullptr;
  }
  inline static Model* model_ = nullptr;
  inline static text::Tokenizer* tokenizer_ = nullptr;
  inline static std::shared_ptr<const generate::grammar::TokenTrie>* trie_ = nullptr;
  inline static ThreadPool* pool_ = nullptr;
};

}  // namespace gem4::test
