// gem4 eval: logits for a list of token ids (one sequence), written as raw float32 rows.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "kernels/thread_pool.h"
#include "model/forward.h"
#include "model/model.h"

namespace gem4::cli {

int cmd_eval(int argc, char** argv, int first) {
  Args a("eval", "Runs token ids through the model and writes float32 logits (row-major, one row per output position).");
  a.value("-m,--model", "FILE", "GGUF model");
  a.value("--ids", "LIST", "comma-separated token ids, e.g. 2,651,1234");
  a.value("--ubatch,-ub,--ubatch-size", "N", "micro-batch size", "512");
  a.value("--kv-type", "TYPE", "KV cache type: f32 | f16 | bf16 | q8_0", "f32");
  a.flag("--all-logits", "write logits for every position (default: only the last)");
  a.value("--out", "FILE", "where to write the logits");
  declare_thread_flag(a);
  declare_load_flags(a);
  declare_plan_flags(a);
  if (!a.parse(argc, argv, first)) {
    std::printf("%s", a.help().c_str());
    return 0;
  }
  if (!a.has("-m")) throw ArgError("eval: -m FILE is required");
  if (!a.has("--ids")) throw ArgError("eval: --ids LIST is required");
  std::vector<int32_t> ids;
  for (const auto& s : a.list("--ids")) {
    try {
      ids.push_back(int32_t(std::stol(s)));
    } catch (const std::exception&) {
      throw ArgError("eval: --ids: '" + s + "' is not a token id");
    }
  }
  if (ids.empty()) throw ArgError("eval: --ids is empty");
  const int ubatch = int(a.integer("--ubatch"));
  if (ubatch < 1) throw ArgError("eval: --ubatch must be >= 1");
  auto model = Model::load(a.str("-m"), load_options(a));
  ThreadPool pool(thread_count(a));
  KvCache kv(model->config, std::max<int>(int(ids.size()), 1), 1, ubatch, kv_type_from_name(a.str("--kv-type")));
  Forward fwd(*model, &pool);
  fwd.switches = plan_switches(a);
  fwd.ubatch = ubatch;
  Batch batch;
  const bool all = a.on("--all-logits");
  for (size_t i = 0; i < ids.size(); ++i) batch.push_back({ids[i], int32_t(i), 0, all || i + 1 == ids.size(), false});
  ForwardOutputs out;
  const auto t0 = std::chrono::steady_clock::now();
  fwd.run(batch, kv, out);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (a.has("--out")) {
    std::ofstream f(a.str("--out"), std::ios::binary);
    if (!f) throw std::runtime_error("eval: cannot write --out " + a.str("--out"));
    f.write(reinterpret_cast<const char*>(out.logits.data()), std::streamsize(out.logits.size() * sizeof(float)));
    if (!f) throw std::runtime_error("eval: error writing --out " + a.str("--out"));
  }
  const float* last = out.logits.data() + (out.logit_rows.size() - 1) * size_t(out.n_vocab);
  const int argmax = int(std::max_element(last, last + out.n_vocab) - last);
  nlohmann::json j = {{"n_tokens", ids.size()}, {"n_rows", out.logit_rows.size()}, {"n_vocab", out.n_vocab},
                      {"last_argmax", argmax}, {"seconds", secs}, {"ubatch", ubatch}, {"kv_type", a.str("--kv-type")},
                      {"prune", fwd.switches.prune}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace gem4::cli
