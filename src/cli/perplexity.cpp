// gem4 perplexity: llama-perplexity's protocol, so figures are comparable: the text is tokenized
// (with BOS), cut into non-overlapping chunks of --ctx tokens, the first token of each chunk replaced
// by BOS, and only the second half of each chunk scored.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/text_input.h"
#include "kernels/thread_pool.h"
#include "model/forward.h"
#include "model/model.h"

namespace gem4::cli {

int cmd_perplexity(int argc, char** argv, int first) {
  Args a("perplexity", "Perplexity of a text file, computed the way llama-perplexity does.");
  a.value("-m,--model", "FILE", "GGUF model");
  a.value("-f,--file", "FILE", "text file (tokenized with the model's tokenizer, BOS first)");
  a.value("--ids-file", "FILE", "whitespace-separated token ids instead of text");
  a.value("-c,--ctx,--ctx-size", "N", "tokens per chunk", "512");
  a.value("--ubatch,-ub,--ubatch-size", "N", "micro-batch size", "512");
  a.value("--chunks", "N", "score at most N chunks");
  a.value("--kv-type", "TYPE", "KV cache type: f32 | f16 | bf16 | q8_0", "f32");
  declare_thread_flag(a);
  declare_load_flags(a);
  declare_plan_flags(a);
  if (!a.parse(argc, argv, first)) {
    std::printf("%s", a.help().c_str());
    return 0;
  }
  if (!a.has("-m")) throw ArgError("perplexity: -m FILE is required");
  auto model = Model::load(a.str("-m"), load_options(a));
  std::fprintf(stderr, "perplexity: weights %s\n", model->packed_origin.c_str());
  std::vector<int32_t> tokens;
  if (a.has("--ids-file")) {
    std::ifstream f(a.str("--ids-file"));
    if (!f) throw std::runtime_error("perplexity: cannot read --ids-file " + a.str("--ids-file"));
    long long id;
    while (f >> id) tokens.push_back(int32_t(id));
  } else if (a.has("-f")) {
    tokens = tokenize_file(*model, a.str("-f"), /*add_bos=*/true);
  } else {
    throw ArgError("perplexity: give -f FILE or --ids-file FILE");
  }
  const int n_ctx = int(a.integer("-c"));
  const int ubatch = std::min<int>(int(a.integer("--ubatch")), n_ctx);
  if (n_ctx < 4) throw ArgError("perplexity: --ctx must be at least 4");
  int n_chunks = int(tokens.size()) / n_ctx;
  if (a.has("--chunks")) n_chunks = std::min<int>(n_chunks, int(a.integer("--chunks")));
  if (n_chunks < 1)
    throw std::runtime_error("perplexity: the text has " + std::to_string(tokens.size()) +
                             " tokens, fewer than --ctx " + std::to_string(n_ctx));
  const int32_t bos = int32_t(model->file->get_int_or("tokenizer.ggml.bos_token_id", 2));

  ThreadPool pool(thread_count(a));
  KvCache kv(model->config, n_ctx, 1, ubatch, kv_type_from_name(a.str("--kv-type")));
  Forward fwd(*model, &pool);
  fwd.switches = plan_switches(a);
  fwd.ubatch = ubatch;
  const int first_scored = n_ctx / 2;
  double nll = 0, nll2 = 0;
  long long count = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::fprintf(stderr, "perplexity: %zu tokens, %d chunks of %d; KV cache %s (%zu bytes)\n", tokens.size(),
               n_chunks, n_ctx, kv_type_name(kv.type()), kv.bytes());
  for (int ch = 0; ch < n_chunks; ++ch) {
    kv.clear(0);
    Batch batch;
    for (int j = 0; j < n_ctx; ++j) {
      const int32_t t = j == 0 ? bos : tokens[size_t(ch) * n_ctx + j];
      // Only rows whose logits are scored are outputs: the first half of each chunk is pruned too.
      batch.push_back({t, j, 0, j >= first_scored && j < n_ctx - 1, false});
    }
    ForwardOutputs out;
    fwd.run(batch, kv, out);
    for (size_t r = 0; r < out.logit_rows.size(); ++r) {
      const int j = out.logit_rows[r];
      const float* lg = out.logits.data() + r * size_t(out.n_vocab);
      double mx = lg[0];
      for (int v = 1; v < out.n_vocab; ++v) mx = std::max(mx, double(lg[v]));
      double sum = 0;
      for (int v = 0; v < out.n_vocab; ++v) sum += std::exp(double(lg[v]) - mx);
      const double lp = double(lg[tokens[size_t(ch) * n_ctx + j + 1]]) - mx - std::log(sum);
      nll -= lp;
      nll2 += lp * lp;
      count++;
    }
    const double mean = nll / count;
    std::fprintf(stderr, "[%d]%.4f%s", ch + 1, std::exp(mean), (ch + 1) % 10 == 0 ? "\n" : " ");
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double mean = nll / count;
  const double var = nll2 / count - mean * mean;
  const double ppl = std::exp(mean);
  const double err = count > 1 ? ppl * std::sqrt(std::max(0.0, var) / (count - 1)) : 0.0;
  std::fprintf(stderr, "\nscored %lld tokens in %.2f s (%.1f tokens/s)\n", count, secs,
               n_chunks * double(n_ctx) / secs);
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, err);
  return 0;
}

}  // namespace gem4::cli
