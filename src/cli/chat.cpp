// gem4 chat: an interactive conversation in the terminal (or over a pipe).
//
// Each turn renders the whole conversation with the chat format and hands it to Session::set_tokens,
// which reuses the cached prefix, so a turn processes only what changed: the new user message, and the
// previous reply (the template writes an earlier model turn without its thought channel and without
// the empty channel of the generation prompt, so the cache diverges where that turn began). Each turn
// reports on stderr, in this stable format:
//   [prompt: N new tokens, M reused] [reply: G tokens, T t/s, stop: REASON]
// Commands: /reset (forget the conversation, keep the system message), /exit (or end of input),
// /image PATH (with --mmproj: the image goes with the next message; --image PATH does it for the first).
// /audio PATH (with --mmproj: a WAV clip goes with the next message; --audio PATH does it for the first).
// --session FILE keeps the conversation in FILE (rewritten atomically after every turn) and its
// prompts' K/V in the prompt cache (--prompt-cache, else the folder FILE.kv), so a later
// `gem4 chat --session FILE` goes on where it stopped without recomputing the conversation.
// Ctrl-C while the model writes stops that reply (kept as far as it went) and returns to the prompt;
// Ctrl-C at the prompt exits.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/generation_options.h"
#include "cli/media_input.h"
#include "generate/constraint.h"
#include "generate/generate.h"
#include "kernels/thread_pool.h"
#include "text/tokenizer.h"

namespace gem4::cli {

namespace {

std::atomic<bool> g_generating{false};
std::atomic<bool> g_interrupted{false};

extern "C" void on_sigint(int) {
  if (g_generating.load()) {
    g_interrupted.store(true);
    return;
  }
  // At the prompt: leave the terminal on a fresh line and quit (only async-signal-safe calls here).
  const char nl = '\n';
  (void)!write(STDOUT_FILENO, &nl, 1);
  _exit(130);
}

void install_sigint_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

constexpr const char* kSessionFormat = "gem4-chat-session";

// The conversation saved by --session (null when FILE does not exist yet). Throws naming the file.
nlohmann::json read_session(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return nullptr;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    throw std::runtime_error("chat: --session " + path + " is not a chat session file: " + e.what());
  }
  if (!j.is_object() || j.value("format", "") != kSessionFormat || !j.contains("messages") ||
      !j["messages"].is_array())
    throw std::runtime_error("chat: --session " + path + " is not a chat session file (no \"format\": \"" +
                             std::string(kSessionFormat) + "\" with \"messages\")");
  for (const auto& m : j["messages"])
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw std::runtime_error("chat: --session " + path + ": a message without a \"role\"");
  return j;
}

// Written under a temporary name and renamed, so a crash leaves the old file or the new one.
void write_session(const std::string& path, const nlohmann::json& messages) {
  const nlohmann::json j = {{"format", kSessionFormat}, {"version", 1}, {"messages", messages}};
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << j.dump(1) << "\n";
    if (!f) throw std::runtime_error("chat: cannot write --session file " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw std::runtime_error("chat: cannot rename " + tmp + " to " + path + ": " + ec.message());
}

}  // namespace

int cmd_chat(int argc, char** argv, int first) {
  Args a("chat",
         "Interactive multi-turn chat (reads lines from stdin). Commands: /reset, /exit.\n"
         "Per turn, stderr shows \"[prompt: N new tokens, M reused] [reply: G tokens, T t/s, stop: R]\".");
  a.value("-m,--model", "FILE", "GGUF model");
  a.value("--system", "TEXT", "system message");
  a.flag("--think",
         "enable thinking (the reasoning is shown dimmed, or on stderr when stdout is not a terminal)");
  a.flag("--no-bos", "do not start the prompt with BOS");
  a.value("--session", "FILE", "save the conversation in FILE after each turn and resume it from there");
  declare_spec_flags(a);
  declare_sampling_flags(a);
  declare_constraint_flags(a);
  declare_session_flags(a);
  declare_media_flags(a);
  if (!a.parse(argc, argv, first)) {
    std::printf("%s", a.help().c_str());
    return 0;
  }
  if (!a.has("-m")) throw ArgError("chat: -m FILE is required");
  auto model = Model::load(a.str("-m"), load_options(a));
  std::fprintf(stderr, "chat: weights %s\n", model->packed_origin.c_str());
  const auto tokenizer = text::Tokenizer::from_gguf(*model->file, model->cache_dir);
  const bool add_bos = !a.on("--no-bos") && tokenizer.add_bos_default();
  const bool think = a.on("--think");
  generate::GenerateRequest req;
  req.sampling = sampling_params(a, *model->file);
  req.constraint = constraint_from_flags(a, tokenizer);  // each reply follows it (reset per turn)
  if (req.constraint && think) generate::allow_gemma_thinking(*req.constraint, tokenizer);
  apply_request_flags(a, req);
  ThreadPool pool(thread_count(a));
  const SessionOptions opt = session_options(a, *model);
  Session session(*model, &pool, opt);
  Speculation spec = speculation(a, *model, &pool, opt, req.sampling.seed);
  session.speculate(spec.drafter.get(), spec.opt);
  const std::string session_file = a.has("--session") ? a.str("--session") : "";
  std::unique_ptr<generate::PromptCacheDir> prompt_cache;
  if (a.has("--prompt-cache")) {
    prompt_cache = open_prompt_cache(a, *model, session.kv(), session.store());
  } else if (!session_file.empty() && session.store()) {
    prompt_cache = open_prompt_cache_at(session_file + ".kv", uint64_t(a.integer("--prompt-cache-mib")) << 20,
                                        *model, session.kv(), *session.store());
  }
  session.engine().set_disk(prompt_cache.get());
  // Media: every image of the conversation in order (what the template's placeholders stand for), and
  // those waiting for the next message. A session file keeps each image's path and re-encodes it.
  const auto encoders = media_encoders(a, model->config.d_model);
  struct Attached {
    std::string path;
    generate::MediaInput input;
    const char* type() const { return input.image ? "image" : "audio"; }  // the content part's type
  };
  std::vector<Attached> conversation_media, pending;
  for (const std::string& p : a.all("--image")) pending.push_back({p, encoders->image(p, &pool)});
  for (const std::string& p : a.all("--audio")) pending.push_back({p, encoders->audio(p, &pool)});

  nlohmann::json system_turn = nlohmann::json::array();
  if (a.has("--system")) system_turn.push_back({{"role", "system"}, {"content", a.str("--system")}});
  nlohmann::json messages = system_turn;
  if (!session_file.empty()) {
    const nlohmann::json saved = read_session(session_file);
    if (!saved.is_null()) {
      messages = saved["messages"];
      if (!messages.empty() && messages[0].value("role", "") == "system") {
        system_turn = nlohmann::json::array({messages[0]});
      }
      for (const auto& m : messages)
        if (m.contains("content") && m["content"].is_array())
          for (const auto& part : m["content"])
            if (part.value("type", "") == "image" || part.value("type", "") == "audio") {
              if (!encoders)
                throw ArgError("chat: --session " + session_file +
                               " holds images or audio: give --mmproj FILE");
              const std::string p = part.value("path", "");
              conversation_media.push_back({p, part.value("type", "") == "image"
                                                   ? encoders->image(p, &pool)
                                                   : encoders->audio(p, &pool)});
            }
      std::fprintf(stderr, "chat: resumed %zu messages from %s\n", messages.size(), session_file.c_str());
    }
  }

  const bool interactive = isatty(STDIN_FILENO) == 1;
  std::fprintf(stderr, "%s\nchat: context %d tokens; /reset starts over, /exit quits%s\n",
               describe_sampling(req.sampling).c_str(), session.n_ctx(),
               interactive ? ", Ctrl-C stops a reply" : "");
  install_sigint_handler();
  std::string line;
  while (true) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    const std::string input = trim(line);
    if (input.empty()) continue;
    if (input == "/exit" || input == "/quit") break;
    const bool image_cmd = input.rfind("/image", 0) == 0 && (input.size() == 6 || input[6] == ' ');
    const bool audio_cmd = input.rfind("/audio", 0) == 0 && (input.size() == 6 || input[6] == ' ');
    if (image_cmd || audio_cmd) {
      const char* kind = image_cmd ? "image" : "audio";
      const std::string path = trim(input.substr(6));
      if (!encoders || path.empty()) {
        std::fprintf(stderr, "error: /%s PATH needs gem4 chat --mmproj FILE\n", kind);
        continue;
      }
      try {
        pending.push_back({path, image_cmd ? encoders->image(path, &pool) : encoders->audio(path, &pool)});
        std::fprintf(stderr, "[%s %s attached to the next message]\n", kind, path.c_str());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
      }
      continue;
    }
    if (input == "/reset") {
      conversation_media.clear();
      messages = system_turn;
      if (!session_file.empty()) write_session(session_file, messages);
      std::fprintf(stderr, "[conversation reset]\n");
      continue;
    }
    nlohmann::json content = input;
    if (!pending.empty()) {
      content = nlohmann::json::array();
      for (const Attached& m : pending) content.push_back({{"type", m.type()}, {"path", m.path}});
      content.push_back({{"type", "text"}, {"text", input}});
    }
    messages.push_back({{"role", "user"}, {"content", content}});
    const size_t media_before = conversation_media.size();
    conversation_media.insert(conversation_media.end(), pending.begin(), pending.end());
    pending.clear();
    req.prompt = chat_prompt_tokens(tokenizer, messages, think, add_bos);
    std::vector<generate::MediaInput> media;
    for (const Attached& m : conversation_media) media.push_back(m.input);
    req.media = generate::expand_media(req.prompt, tokenizer, media);

    ReplyPrinter printer;
    g_interrupted.store(false);
    g_generating.store(true);
    generate::GenerateResult result;
    try {
      result = generate::generate(session, tokenizer, req, [&](std::string_view piece, int32_t) {
        if (g_interrupted.load()) return false;  // Ctrl-C: stop before printing more
        printer.push(piece);
        return true;
      });
    } catch (const generate::ContextLengthError& e) {
      g_generating.store(false);
      std::fprintf(stderr, "error: %s; /reset starts over\n", e.what());
      messages.erase(messages.end() - 1);
      conversation_media.resize(media_before);
      continue;
    } catch (...) {
      g_generating.store(false);
      throw;
    }
    g_generating.store(false);
    printer.finish();
    std::fputc('\n', stdout);
    std::fflush(stdout);
    const auto& st = result.stats;
    std::fprintf(stderr, "[prompt: %d new tokens, %d reused] [reply: %d tokens, %.1f t/s, stop: %s]\n",
                 st.prompt_processed, st.prompt_reused, st.generated, st.generation_tokens_per_s(),
                 generate::stop_reason_name(st.stop));
    // The reply as the template will show it next turn: the answer (thoughts are stripped anyway).
    nlohmann::json reply = {{"role", "assistant"}, {"content", printer.parser().content()}};
    if (!printer.parser().tool_calls().empty()) reply["tool_calls"] = printer.parser().tool_calls();
    messages.push_back(std::move(reply));
    if (!session_file.empty()) write_session(session_file, messages);
  }
  return 0;
}

}  // namespace gem4::cli
