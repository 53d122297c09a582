// What `gem4 run` and `gem4 chat` share: flags for the session (context, KV type, threads, plan) and
// the sampler, chat prompts, and printing a reply that the output parser splits.
// Sampling defaults come from the model's general.sampling.* keys when present.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cli/args.h"
#include "generate/drafter_factory.h"
#include "generate/generate.h"
#include "generate/prompt_cache_file.h"
#include "generate/session.h"
#include "model/model.h"
#include "text/output_parser.h"
#include "text/tokenizer.h"

namespace gem4::cli {

// -c, --ubatch, --kv-type, -t, the plan switches and the prompt caches (--cache-ram, --prompt-cache,
// --prompt-cache-mib).
void declare_session_flags(Args& a);
// n_ctx defaults to the model's context_length, capped at 4096 (a full 128k cache is rarely wanted).
SessionOptions session_options(const Args& a, const Model& model);
// --prompt-cache DIR: the folder of prompt prefixes kept on disk for `kv`'s layout (null without the
// flag). Needs a prefix store (--cache-ram > 0) to fill it. Throws naming the flag and folder.
std::unique_ptr<generate::PromptCacheDir> open_prompt_cache(const Args& a, const Model& model,
                                                            const KvCache& kv,
                                                            const generate::PrefixStore* store);
std::unique_ptr<generate::PromptCacheDir> open_prompt_cache_at(const std::string& dir, uint64_t max_bytes,
                                                               const Model& model, const KvCache& kv,
                                                               const generate::PrefixStore& store);

// --spec, -md, --draft-max, --draft-adaptive.
void declare_spec_flags(Args& a);
// The drafter these flags ask for (drafter null for --spec none) and the draft model it reads.
struct Speculation {
  std::unique_ptr<Model> draft_model;
  std::unique_ptr<generate::Drafter> drafter;
  generate::SpecOptions opt;
  std::string spec;
};
Speculation speculation(const Args& a, const Model& model, ThreadPool* pool, const SessionOptions& opt,
                        uint64_t seed);

// --temp, --top-k, --top-p, --min-p, --seed, --repeat-penalty, --repeat-last-n,
// --presence-penalty, --frequency-penalty, -n, --stop, --ignore-eos.
void declare_sampling_flags(Args& a);
// Defaults: SamplingParams' own, overridden by general.sampling.{temp,top_k,top_p,min_p,
// penalty_last_n,penalty_repeat} from the file, overridden by flags. Without --seed the seed is random.
generate::SamplingParams sampling_params(const Args& a, const gguf::GgufFile& file);
// -n, --stop and --ignore-eos applied to a request.
void apply_request_flags(const Args& a, generate::GenerateRequest& req);

// --json-schema FILE|JSON, --json-object, --grammar FILE: the grammar the output must follow.
void declare_constraint_flags(Args& a);
// The constraint these flags ask for (null without them). Throws ArgError naming the flag and, for a
// schema, the schema path ("--json-schema: $.properties.age.minimum: must be a number").
std::shared_ptr<generate::GrammarConstraint> constraint_from_flags(const Args& a,
                                                                   const text::Tokenizer& tokenizer);

// One line of sampling settings for stderr ("sampling: temp 1.00, top-k 64, ...").
std::string describe_sampling(const generate::SamplingParams& p);

// The prompt of a conversation as token ids: render_chat (with the generation prompt) starting with
// the vocabulary's BOS text, or with none when !add_bos, tokenized with special tokens parsed and no
// BOS added on top (the template already wrote it).
std::vector<int32_t> chat_prompt_tokens(const text::Tokenizer& tokenizer, const nlohmann::json& messages,
                                        bool think, bool add_bos);

// Prints a chat reply as it streams, split by the output parser: the answer goes to stdout; the
// reasoning goes to stdout dimmed (ANSI faint) when stdout is a terminal, and to stderr otherwise, so
// that a redirected stdout holds only the answer; a tool call is printed as "[tool call] {json}".
class ReplyPrinter {
 public:
  ReplyPrinter();
  void push(std::string_view piece);
  void finish();  // ends the reply (releases held-back text, resets the terminal colour)
  const text::OutputParser& parser() const { return parser_; }

 private:
  void print(const text::OutputDelta& d);
  text::OutputParser parser_;
  bool tty_;
  bool dim_ = false;       // the terminal is in faint mode
  bool reasoned_ = false;  // some reasoning was printed
};

}  // namespace gem4::cli
