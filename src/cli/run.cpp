// gem4 run: one prompt, the continuation streamed to stdout, timings to stderr.
//
// Plain mode tokenizes the prompt as it is (special-token spellings parsed, as llama-completion does)
// with BOS unless --no-bos. --chat wraps it as a user turn with the Gemma 4 chat format (plus an
// optional system turn, and thinking with --think); the template writes the BOS itself. In chat mode
// the reply goes through the output parser: see ReplyPrinter for where the reasoning goes.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/generation_options.h"
#include "cli/media_input.h"
#include "generate/constraint.h"
#include "generate/generate.h"
#include "generate/speculative.h"
#include "kernels/thread_pool.h"
#include "text/tokenizer.h"

namespace gem4::cli {

namespace {

std::string read_prompt(const Args& a) {
  if (a.has("-p") && a.has("-f")) throw ArgError("run: give -p TEXT or -f FILE, not both");
  if (a.has("-p")) return a.str("-p");
  if (!a.has("-f")) throw ArgError("run: -p TEXT (or -f FILE) is required");
  std::ifstream f(a.str("-f"), std::ios::binary);
  if (!f) throw std::runtime_error("run: cannot read prompt file " + a.str("-f"));
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void print_timings(const generate::GenerateStats& st, const KvCache& kv, double first_token_since_start) {
  std::fprintf(stderr, "\n\nprompt:     %d tokens (%d processed, %d reused) in %.3f s, %.1f t/s\n",
               st.prompt_tokens, st.prompt_processed, st.prompt_reused, st.prompt_s,
               st.prompt_tokens_per_s());
  std::fprintf(stderr, "generation: %d tokens in %.3f s, %.1f t/s (stop: %s)\n", st.generated,
               st.generation_s, st.generation_tokens_per_s(), generate::stop_reason_name(st.stop));
  std::fprintf(stderr, "time to first token: %.3f s after the prompt, %.3f s after the process started\n",
               st.ttft_s, first_token_since_start);
  std::fprintf(stderr, "peak RSS: %s, KV cache: %s (%s, %d tokens)\n",
               human_bytes(double(peak_rss_bytes())).c_str(), human_bytes(double(kv.bytes())).c_str(),
               kv_type_name(kv.type()), kv.n_ctx());
}

}  // namespace

int cmd_run(int argc, char** argv, int first) {
  Args a("run", "Generate a continuation of a prompt, streamed to stdout (timings on stderr).");
  a.value("-m,--model", "FILE", "GGUF model");
  a.value("-p,--prompt", "TEXT", "the prompt");
  a.value("-f,--file", "FILE", "read the prompt from a file");
  a.flag("--chat", "wrap the prompt in the chat format (a user turn and the model's generation prompt)");
  a.value("--system", "TEXT", "with --chat: a system message");
  a.flag("--think", "with --chat: enable thinking (the reasoning is shown apart from the answer)");
  a.flag("--no-bos", "do not start the prompt with BOS");
  declare_spec_flags(a);
  declare_sampling_flags(a);
  declare_constraint_flags(a);
  declare_session_flags(a);
  declare_media_flags(a);
  if (!a.parse(argc, argv, first)) {
    std::printf("%s", a.help().c_str());
    return 0;
  }
  if (!a.has("-m")) throw ArgError("run: -m FILE is required");
  const bool chat = a.on("--chat");
  if (!chat && (a.has("--system") || a.on("--think")))
    throw ArgError("run: --system and --think need --chat");
  const std::string prompt_text = read_prompt(a);

  const double t_load0 = seconds_since_process_start();
  auto model = Model::load(a.str("-m"), load_options(a));
  const double t_load1 = seconds_since_process_start();
  const auto tokenizer = text::Tokenizer::from_gguf(*model->file, model->cache_dir);
  std::fprintf(
      stderr,
      "load: model %.3f s (%s of weights packed for the kernels: %s), tokenizer %.3f s (merge table %s)\n",
      t_load1 - t_load0, human_bytes(double(model->packed.bytes())).c_str(), model->packed_origin.c_str(),
      seconds_since_process_start() - t_load1, tokenizer.vocab().merge_table_origin().c_str());
  const bool add_bos = !a.on("--no-bos") && tokenizer.add_bos_default();
  ThreadPool pool(thread_count(a));
  // Images and audio: encoded by the projector, their soft tokens placed where the prompt's
  // placeholders are (in chat mode the user turn starts with them; plain prompts may hold <|image|>).
  const auto encoders = media_encoders(a, model->config.d_model);
  const std::vector<generate::MediaInput> media = media_from_flags(a, encoders.get(), &pool);

  generate::GenerateRequest req;
  if (chat) {
    nlohmann::json messages = nlohmann::json::array();
    if (a.has("--system")) messages.push_back({{"role", "system"}, {"content", a.str("--system")}});
    nlohmann::json content = prompt_text;
    if (!media.empty()) {
      content = nlohmann::json::array();
      for (const auto& m : media) content.push_back({{"type", m.image ? "image" : "audio"}});
      content.push_back({{"type", "text"}, {"text", prompt_text}});
    }
    messages.push_back({{"role", "user"}, {"content", content}});
    req.prompt = chat_prompt_tokens(tokenizer, messages, a.on("--think"), add_bos);
  } else {
    req.prompt = tokenizer.encode(prompt_text, add_bos, /*parse_special=*/true);
  }
  req.media = generate::expand_media(req.prompt, tokenizer, media);
  if (req.prompt.empty()) throw ArgError("run: the prompt is empty (give a text, or drop --no-bos)");
  req.sampling = sampling_params(a, *model->file);
  req.constraint = constraint_from_flags(a, tokenizer);
  if (req.constraint && chat && a.on("--think")) generate::allow_gemma_thinking(*req.constraint, tokenizer);
  apply_request_flags(a, req);

  const SessionOptions opt = session_options(a, *model);
  generate::check_context(int(req.prompt.size()), opt.n_ctx);
  Session session(*model, &pool, opt);
  std::fprintf(stderr, "%s\n", describe_sampling(req.sampling).c_str());

  Speculation spec = speculation(a, *model, &pool, opt, req.sampling.seed);
  session.speculate(spec.drafter.get(), spec.opt);
  auto prompt_cache = open_prompt_cache(a, *model, session.kv(), session.store());
  session.engine().set_disk(prompt_cache.get());

  ReplyPrinter printer;
  double first_token_since_start = -1;
  auto on_piece = [&](std::string_view piece, int32_t) {
    if (first_token_since_start < 0) first_token_since_start = seconds_since_process_start();
    if (chat) {
      printer.push(piece);
    } else {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  generate::SpecStats spec_stats;
  const auto result = generate::generate(session, tokenizer, req, on_piece, &spec_stats);
  if (spec.drafter)
    std::fprintf(stderr, "\nspeculative (%s): %s\n", spec.spec.c_str(), spec_stats.summary().c_str());
  if (chat) printer.finish();
  if (isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
  std::fflush(stdout);
  print_timings(result.stats, session.kv(), first_token_since_start);
  return 0;
}

}  // namespace gem4::cli
