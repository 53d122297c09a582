// `gem4 chat` in a real pseudo-terminal (tmux): three turns with the tiny model, checking that turns 2
// and 3 process only the new tokens, then /exit. The expected counts come from the token sequences
// themselves: turn k's prompt P_k (the rendered conversation) shares its first lcp(P_k-1, P_k) tokens
// with the previous prompt, which are cached; the previous turn's generation prompt ends with the empty
// thought channel that the template does not write for an earlier model turn, so the cache diverges
// there and the new tokens are the previous reply plus the new user turn.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "generate/generate.h"
#include "kernels/thread_pool.h"
#include "model/model.h"
#include "test_util.h"
#include "text/chat_format.h"
#include "text/output_parser.h"
#include "text/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs a shell command; returns its stdout.
std::string sh(const std::string& cmd, int* rc = nullptr) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  if (rc) *rc = status;
  return out;
}

// A tmux server of our own (its own socket), killed when this goes out of scope, whatever happened.
class Tmux {
 public:
  Tmux() : socket_("gem4_chat_test_" + std::to_string(getpid())) {}
  ~Tmux() { sh(tmux() + " kill-server >/dev/null 2>&1"); }
  std::string tmux() const { return "TERM=xterm-256color tmux -L " + socket_; }
  bool start(const std::string& command) {
    int rc = 0;
    sh(tmux() + " -f /dev/null new-session -d -s chat -x 200 -y 50 " + shell_quote(command) + " 2>&1", &rc);
    return rc == 0;
  }
  std::string capture() const { return sh(tmux() + " capture-pane -p -J -S - -t chat 2>/dev/null"); }
  void type_line(const std::string& text) {
    sh(tmux() + " send-keys -t chat -l " + shell_quote(text));
    sh(tmux() + " send-keys -t chat Enter");
  }
  void key(const std::string& k) { sh(tmux() + " send-keys -t chat " + k); }
  // Polls the pane until pred(pane) holds or the timeout passes; returns the last capture.
  template <class Pred>
  bool wait_for(Pred pred, double seconds, std::string* pane) {
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    do {
      *pane = capture();
      if (pred(*pane)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (Clock::now() < end);
    return false;
  }

 private:
  std::string socket_;
};

struct TurnCounts {
  int fresh, reused;
};
std::vector<TurnCounts> reported_counts(const std::string& pane) {
  std::vector<TurnCounts> out;
  const std::regex re(R"(\[prompt: (\d+) new tokens, (\d+) reused\])");
  for (auto it = std::sregex_iterator(pane.begin(), pane.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back({std::stoi((*it)[1]), std::stoi((*it)[2])});
  return out;
}

// The last non-empty line of the pane is the input prompt.
bool at_prompt(const std::string& pane) {
  const size_t end = pane.find_last_not_of(" \n");
  if (end == std::string::npos) return false;
  const size_t start = pane.rfind('\n', end);
  return pane.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1)) == ">";
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

const char* kSystem =
    "You are a scribe of the King James Bible. Answer every question in the words of the Authorized Version, "
    "as it was printed in the year of our Lord sixteen hundred and eleven, with thee and thou and hath and doth, "
    "and keep each answer short, for the reader is weary and the candle burneth low.";
const char* kTurns[] = {"Who made the heaven and the earth?", "And who divided the waters of the sea?",
                        "What said the LORD unto Moses?"};
constexpr int kReplyTokens = 8;

TEST(ChatTmux, TurnsProcessOnlyNewTokensAndExitEnds) {
  const std::string model_path = gem4::test::testdata("tiny-gemma4/tiny-gemma4-f32.gguf");

  // The same conversation through the library, to know each turn's prompt tokens (the replies are
  // greedy, so the binary writes the same ones).
  auto model = gem4::Model::load(model_path);
  const auto tok = gem4::text::Tokenizer::from_gguf(*model->file);
  gem4::ThreadPool pool(2);
  gem4::SessionOptions opt;
  opt.n_ctx = 512;
  gem4::Session session(*model, &pool, opt);
  nlohmann::json messages = nlohmann::json::array({{{"role", "system"}, {"content", kSystem}}});
  std::vector<std::vector<int32_t>> prompts;
  std::vector<TurnCounts> expected;
  for (const char* turn : kTurns) {
    messages.push_back({{"role", "user"}, {"content", turn}});
    gem4::generate::GenerateRequest req;
    req.prompt = tok.encode(gem4::text::render_chat(messages, nullptr, true, false, "<bos>"), false, true);
    req.sampling.temperature = 0;
    req.max_tokens = kReplyTokens;
    const auto res = gem4::generate::generate(session, tok, req);
    const int n = int(req.prompt.size());
    const int reused = prompts.empty() ? 0 : int(common_prefix(prompts.back(), req.prompt));
    if (!prompts.empty()) {
      EXPECT_LT(reused, int(prompts.back().size()));  // diverges inside the old prompt
    }
    EXPECT_EQ(res.stats.prompt_reused, reused);
    expected.push_back({n - reused, reused});
    prompts.push_back(req.prompt);
    messages.push_back({{"role", "assistant"}, {"content", gem4::text::parse_output(res.text).content}});
  }
  for (int k = 1; k < 3; ++k) {
    // Only the previous reply and the new user turn are new: far fewer tokens than the whole prompt.
    EXPECT_LT(expected[k].fresh * 3, int(prompts[k].size())) << "turn " << k + 1;
    EXPECT_GT(expected[k].fresh, 0);
  }

  Tmux tmux;
  const std::string command = shell_quote(GEM4_BINARY) + " chat -m " + shell_quote(model_path) +
                              " --temp 0 -t 2 -c 512 -n " + std::to_string(kReplyTokens) + " --system " +
                              shell_quote(kSystem) + "; echo \"[exit $?]\"; sleep 60";
  ASSERT_TRUE(tmux.start(command)) << "tmux could not start a session";
  std::string pane;
  ASSERT_TRUE(tmux.wait_for(at_prompt, 60, &pane)) << "no prompt; pane:\n" << pane;
  EXPECT_NE(pane.find("chat: context 512 tokens"), std::string::npos) << pane;
  for (size_t k = 0; k < 3; ++k) {
    tmux.type_line(kTurns[k]);
    ASSERT_TRUE(tmux.wait_for([&](const std::string& p) { return reported_counts(p).size() == k + 1 && at_prompt(p); },
                              60, &pane))
        << "turn " << k + 1 << " did not finish; pane:\n" << pane;
  }
  const auto got = reported_counts(pane);
  ASSERT_EQ(got.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(got[k].fresh, expected[k].fresh) << "turn " << k + 1 << "\n" << pane;
    EXPECT_EQ(got[k].reused, expected[k].reused) << "turn " << k + 1 << "\n" << pane;
    EXPECT_EQ(got[k].fresh + got[k].reused, int(prompts[k].size())) << "turn " << k + 1;
  }
  std::printf("chat turns (new/reused tokens): %d/%d, %d/%d, %d/%d\n", got[0].fresh, got[0].reused, got[1].fresh,
              got[1].reused, got[2].fresh, got[2].reused);

  tmux.type_line("/exit");
  EXPECT_TRUE(tmux.wait_for([](const std::string& p) { return p.find("[exit ") != std::string::npos; }, 30, &pane))
      << "/exit did not end the chat; pane:\n" << pane;
  EXPECT_NE(pane.find("[exit 0]"), std::string::npos) << pane;
}

TEST(ChatTmux, CtrlCAtThePromptExits) {
  const std::string model_path = gem4::test::testdata("tiny-gemma4/tiny-gemma4-f32.gguf");
  Tmux tmux;
  const std::string command = shell_quote(GEM4_BINARY) + " chat -m " + shell_quote(model_path) +
                              " -t 1 -c 128; echo \"[exit $?]\"; sleep 60";
  ASSERT_TRUE(tmux.start(command));
  std::string pane;
  ASSERT_TRUE(tmux.wait_for(at_prompt, 60, &pane)) << pane;
  tmux.key("C-c");
  EXPECT_TRUE(tmux.wait_for([](const std::string& p) { return p.find("[exit ") != std::string::npos; }, 30, &pane))
      << pane;
  EXPECT_NE(pane.find("[exit 130]"), std::string::npos) << pane;
}

}  // namespace
