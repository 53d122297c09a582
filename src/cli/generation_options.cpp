#include "cli/generation_options.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "cli/common.h"
#include "generate/grammar/gbnf.h"
#include "generate/grammar/json_schema.h"
#include "text/chat_format.h"

namespace gem4::cli {

void declare_session_flags(Args& a) {
  a.value("-c,--ctx,--ctx-size", "N", "context size in tokens", "the model's, at most 4096");
  a.value("--ubatch,-ub,--ubatch-size", "N", "micro-batch size for prompt processing", "512");
  a.value("--kv-type", "TYPE", "KV cache type: f32 | f16 | bf16 | q8_0", "f16");
  a.value("--cache-ram", "MIB", "memory for K/V snapshots of past prefixes (0: off)", "256");
  a.value("--prompt-cache", "DIR", "keep prompt prefixes' K/V on disk in DIR, across runs");
  a.value("--prompt-cache-mib", "MIB", "size cap of the --prompt-cache folder", "4096");
  declare_thread_flag(a);
  declare_load_flags(a);
  declare_plan_flags(a);
}

std::unique_ptr<generate::PromptCacheDir> open_prompt_cache_at(const std::string& dir, uint64_t max_bytes,
                                                               const Model& model, const KvCache& kv,
                                                               const generate::PrefixStore& store) {
  if (!model.file) throw ArgError("--prompt-cache needs a model file");
  generate::PromptCacheKey key;
  key.model_id = generate::model_file_identity(*model.file);
  key.layout = kv.layout_signature();
  key.chunk_tokens = store.chunk_tokens();
  key.chunk_bytes = store.chunk_bytes();
  return std::make_unique<generate::PromptCacheDir>(dir, key, max_bytes);
}

std::unique_ptr<generate::PromptCacheDir> open_prompt_cache(const Args& a, const Model& model,
                                                            const KvCache& kv,
                                                            const generate::PrefixStore* store) {
  if (!a.has("--prompt-cache")) return nullptr;
  if (!store) throw ArgError("--prompt-cache needs --cache-ram above 0 (the chunks go through memory)");
  const long long mib = a.integer("--prompt-cache-mib");
  if (mib < 1) throw ArgError("flag '--prompt-cache-mib' must be at least 1");
  return open_prompt_cache_at(a.str("--prompt-cache"), uint64_t(mib) << 20, model, kv, *store);
}

void declare_spec_flags(Args& a) {
  a.value("--spec", "KINDS", "speculative decoding: none, mtp, draft, ngram or a combination (mtp,ngram)",
          "none");
  a.value("-md,--model-draft", "FILE", "drafter: a gemma4-assistant GGUF (mtp) or a smaller gemma4 (draft)");
  a.value("--draft-max", "N", "most drafted tokens per round", "3");
  a.flag("--draft-adaptive", "tune the draft length from measured acceptance and step costs");
}

Speculation speculation(const Args& a, const Model& model, ThreadPool* pool, const SessionOptions& opt,
                        uint64_t seed) {
  Speculation s;
  s.spec = a.str("--spec");
  if (a.has("-md")) s.draft_model = Model::load(a.str("-md"), load_options(a));
  s.drafter = generate::make_drafter(s.spec, model, {s.draft_model.get()}, pool, opt);
  s.opt.draft_max = int(a.integer("--draft-max"));
  if (s.opt.draft_max < 0) throw ArgError("flag '--draft-max' must be >= 0");
  s.opt.adaptive = a.on("--draft-adaptive");
  s.opt.seed = seed;
  return s;
}

SessionOptions session_options(const Args& a, const Model& model) {
  SessionOptions o;
  o.n_ctx = model.config.n_ctx_train > 0 ? std::min(model.config.n_ctx_train, 4096) : 4096;
  if (a.has("-c")) {
    const long long n = a.integer("-c");
    if (n < 1 || n > (1 << 24)) throw ArgError("flag '-c' must be between 1 and 16777216");
    o.n_ctx = int(n);
  }
  const long long ub = a.integer("--ubatch");
  if (ub < 1) throw ArgError("flag '--ubatch' must be at least 1");
  o.ubatch = int(std::min<long long>(ub, o.n_ctx));
  o.kv_type = kv_type_from_name(a.str("--kv-type"));
  o.switches = plan_switches(a);
  const long long ram = a.integer("--cache-ram");
  if (ram < 0) throw ArgError("flag '--cache-ram' must be >= 0");
  o.prefix_store_bytes = size_t(ram) << 20;
  return o;
}

void declare_sampling_flags(Args& a) {
  a.value("-n,--n-predict", "N", "tokens to generate at most (-1: until end of generation or a full context)",
          "-1");
  a.value("--temp", "T", "temperature (0: greedy)", "general.sampling.temp, else 1.0");
  a.value("--top-k", "K", "top-k (0: off)", "general.sampling.top_k, else 64");
  a.value("--top-p", "P", "top-p (1: off)", "general.sampling.top_p, else 0.95");
  a.value("--min-p", "P", "min-p (0: off)", "general.sampling.min_p, else 0");
  a.value("--repeat-penalty", "X", "repetition penalty (1: off)",
          "general.sampling.penalty_repeat, else 1.0");
  a.value("--repeat-last-n", "N", "penalty window in tokens (-1: all)",
          "general.sampling.penalty_last_n, else 64");
  a.value("--presence-penalty", "X", "presence penalty", "0");
  a.value("--frequency-penalty", "X", "frequency penalty", "0");
  a.value("--seed", "N", "random seed", "random");
  a.value("--stop", "TEXT", "stop when the output contains TEXT (not printed)");
  a.flag("--ignore-eos", "do not stop at end-of-generation tokens");
}

namespace {

// One sampling value: the flag's, else the file's general.sampling.* key, else `fallback`; as a float
// it must be finite (and, where `positive`, above 0), and an error names the flag or the key, not the
// sampler's field (1e39 is a valid double but an infinite float).
float sampling_value(const Args& a, const std::string& flag, const gguf::GgufFile& file, const char* key,
                     float fallback, bool positive = false) {
  std::string source, given;
  double v = fallback;
  if (a.has(flag)) {
    v = a.number(flag);
    source = "flag '" + flag + "'", given = a.str(flag);
  } else if (key && file.has(key)) {
    v = file.get_float_or(key, fallback);
    std::ostringstream text;
    text << v;
    source = file.path() + ": " + key, given = text.str();
  } else {
    return fallback;
  }
  const float f = float(v);
  if (!std::isfinite(f) || (positive && !(f > 0)))
    throw ArgError(source + (positive ? " must be a finite number above 0" : " must be a finite number") +
                   " (as a float), got " + given);
  return f;
}

}  // namespace

generate::SamplingParams sampling_params(const Args& a, const gguf::GgufFile& file) {
  generate::SamplingParams p;
  p.temperature = sampling_value(a, "--temp", file, "general.sampling.temp", p.temperature);
  p.top_k = int32_t(file.get_int_or("general.sampling.top_k", p.top_k));
  p.top_p = sampling_value(a, "--top-p", file, "general.sampling.top_p", p.top_p);
  p.min_p = sampling_value(a, "--min-p", file, "general.sampling.min_p", p.min_p);
  p.repeat_penalty =
      sampling_value(a, "--repeat-penalty", file, "general.sampling.penalty_repeat", p.repeat_penalty, true);
  p.repeat_last_n = int32_t(file.get_int_or("general.sampling.penalty_last_n", p.repeat_last_n));
  if (a.has("--top-k")) p.top_k = int32_t(a.integer("--top-k"));
  if (a.has("--repeat-last-n")) p.repeat_last_n = int32_t(a.integer("--repeat-last-n"));
  p.presence_penalty = sampling_value(a, "--presence-penalty", file, nullptr, p.presence_penalty);
  p.frequency_penalty = sampling_value(a, "--frequency-penalty", file, nullptr, p.frequency_penalty);
  if (a.has("--seed")) {
    p.seed = uint64_t(a.integer("--seed"));
  } else {
    std::random_device rd;
    p.seed = (uint64_t(rd()) << 32) ^ rd();
  }
  return p;
}

void apply_request_flags(const Args& a, generate::GenerateRequest& req) {
  req.max_tokens = int(std::clamp<long long>(a.integer("-n"), -1, INT_MAX));  // -5 is -1, 2^32 not 0
  if (a.has("--stop")) req.stop.push_back(a.str("--stop"));
  req.stop_at_eog = !a.on("--ignore-eos");
}

void declare_constraint_flags(Args& a) {
  a.value("--json-schema", "FILE|JSON",
          "the output must be JSON valid under this JSON Schema (a file or inline)");
  a.flag("--json-object", "the output must be a JSON object");
  a.value("--grammar", "FILE",
          "the output must match this GBNF grammar (llama.cpp's syntax, start rule root)");
}

namespace {
std::string read_text_file(const std::string& flag, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ArgError(flag + ": cannot read " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

std::shared_ptr<generate::GrammarConstraint> constraint_from_flags(const Args& a,
                                                                   const text::Tokenizer& tokenizer) {
  namespace gr = generate::grammar;
  const int n = int(a.has("--json-schema")) + int(a.on("--json-object")) + int(a.has("--grammar"));
  if (n == 0) return nullptr;
  if (n > 1) throw ArgError("give only one of --json-schema, --json-object and --grammar");
  std::string gbnf, flag;
  try {
    if (a.has("--json-schema")) {
      flag = "--json-schema";
      std::string v = a.str("--json-schema");
      const size_t first = v.find_first_not_of(" \t\r\n");
      if (first == std::string::npos || (v[first] != '{' && v[first] != '[' && v != "true"))
        v = read_text_file(flag, v);
      gbnf = gr::json_schema_to_gbnf(std::string_view(v));
    } else if (a.on("--json-object")) {
      flag = "--json-object";
      gbnf = gr::json_object_gbnf();
    } else {
      flag = "--grammar";
      gbnf = read_text_file(flag, a.str("--grammar"));
    }
    // <text> token references in a --grammar resolve in the model's vocabulary.
    const gr::TokenLookup lookup = [&tokenizer](std::string_view t) { return tokenizer.find_token(t); };
    auto grammar = std::make_shared<gr::Grammar>(gr::parse_gbnf(gbnf, "root", lookup));
    return std::make_shared<generate::GrammarConstraint>(grammar, gr::TokenTrie::from_tokenizer(tokenizer));
  } catch (const gr::SchemaError& e) {
    throw ArgError(flag + ": " + e.what());
  } catch (const gr::GrammarError& e) {
    throw ArgError(flag + ": " + e.what());
  }
}

std::string describe_sampling(const generate::SamplingParams& p) {
  char buf[256];
  std::string s;
  if (p.temperature <= 0) {
    s = "sampling: greedy";
  } else {
    std::snprintf(buf, sizeof buf, "sampling: temp %.2f, top-k %d, top-p %.3f, min-p %.3f, seed %llu",
                  p.temperature, p.top_k, p.top_p, p.min_p, (unsigned long long)p.seed);
    s = buf;
  }
  if (p.repeat_penalty != 1.0f) {
    std::snprintf(buf, sizeof buf, ", repeat-penalty %.2f (last %d)", p.repeat_penalty, p.repeat_last_n);
    s += buf;
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::snprintf(buf, sizeof buf, ", presence %.2f, frequency %.2f", p.presence_penalty,
                  p.frequency_penalty);
    s += buf;
  }
  return s;
}

std::vector<int32_t> chat_prompt_tokens(const text::Tokenizer& tokenizer, const nlohmann::json& messages,
                                        bool think, bool add_bos) {
  const std::string bos_text =
      add_bos && tokenizer.bos() >= 0 ? std::string(tokenizer.token_text(tokenizer.bos())) : "";
  // Replies kept from earlier turns hold tool-call arguments as JSON text; the template wants objects.
  const std::string prompt = text::render_chat(text::normalize_tool_call_arguments(messages), nullptr,
                                               /*add_generation_prompt=*/true, think, bos_text);
  return tokenizer.encode(prompt, /*add_bos=*/false, /*parse_special=*/true);
}

namespace {
constexpr const char* kFaint = "\x1b[2m";
constexpr const char* kNormal = "\x1b[0m";
void write_out(FILE* f, std::string_view s) {
  std::fwrite(s.data(), 1, s.size(), f);
  std::fflush(f);
}
}  // namespace

ReplyPrinter::ReplyPrinter() : tty_(isatty(STDOUT_FILENO) == 1) {}

void ReplyPrinter::push(std::string_view piece) { print(parser_.push(piece)); }

void ReplyPrinter::finish() {
  print(parser_.finish());
  if (dim_) write_out(stdout, kNormal);
  dim_ = false;
}

void ReplyPrinter::print(const text::OutputDelta& d) {
  if (!d.reasoning.empty()) {
    reasoned_ = true;
    if (tty_) {
      if (!dim_) write_out(stdout, kFaint);
      dim_ = true;
      write_out(stdout, d.reasoning);
    } else {
      write_out(stderr, d.reasoning);
    }
  }
  if (!d.content.empty() || !d.tool_calls.empty()) {
    if (dim_) {
      write_out(stdout, kNormal);
      dim_ = false;
    }
    if (reasoned_) {  // separate the thoughts from the answer
      write_out(tty_ ? stdout : stderr, "\n");
      reasoned_ = false;
    }
    write_out(stdout, d.content);
    for (const auto& call : d.tool_calls)
      write_out(stdout, "\n[tool call] " +
                            call.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
}

}  // namespace gem4::cli
