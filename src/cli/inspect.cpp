// gem4 inspect FILE (or -m FILE, as the other commands take a model): metadata, the tensor table, parameter
// and size totals, and the derived layer plan.
#include <cstdio>
#include <map>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/weights.h"

namespace gem4::cli {

int cmd_inspect(int argc, char** argv, int first) {
  Args a("inspect",
         "Shows a GGUF file's metadata, tensors, totals and (for Gemma 4) the layer plan.\n"
         "gem4 inspect FILE [options], or gem4 inspect -m FILE [options]");
  a.value("-m,--model", "FILE", "GGUF file (or give it as the one argument)");
  a.flag("--no-tensors", "omit the tensor table");
  a.flag("--no-metadata", "omit the metadata listing");
  if (!a.parse(argc, argv, first)) {
    std::printf("%s", a.help().c_str());
    return 0;
  }
  const size_t files = a.positional().size() + (a.has("--model") ? 1 : 0);
  if (files != 1)
    throw ArgError(files == 0 ? "inspect: expected a GGUF file (gem4 inspect FILE or -m FILE)"
                              : "inspect: expected one GGUF file, got " + std::to_string(files));
  const std::string path = a.has("--model") ? a.str("--model") : a.positional()[0];
  auto f = gguf::GgufFile::open(path);
  std::printf("file: %s\nGGUF v%u, %zu bytes, alignment %llu, %zu metadata keys, %zu tensors\n", path.c_str(), f->version(),
              f->file_size(), (unsigned long long)f->alignment(), f->metadata().size(), f->tensors().size());
  if (!a.on("--no-metadata")) {
    std::printf("\nmetadata:\n");
    for (const auto& [key, value] : f->metadata()) {
      std::string shown = value.to_string(8);
      if (key == "general.file_type") {  // llama.cpp's file-type id: name it ("7 (Q8_0)")
        if (const char* name = gguf::stated_file_type_name(*f)) shown += std::string(" (") + name + ")";
      }
      std::printf("  %-48s %s\n", key.c_str(), shown.c_str());
    }
  }
  std::map<std::string, std::pair<long long, long long>> by_type;  // type -> (params, bytes)
  long long params = 0, bytes = 0;
  if (!a.on("--no-tensors")) std::printf("\ntensors:\n  %-40s %-6s %s\n", "name", "type", "shape");
  for (const auto& t : f->tensors()) {
    const long long n = t.n_elements();
    params += n;
    bytes += (long long)t.nbytes;
    auto& bt = by_type[ggml_type_name(t.type)];
    bt.first += n;
    bt.second += (long long)t.nbytes;
    if (!a.on("--no-tensors")) {
      std::string shape = "[";
      for (size_t i = 0; i < t.ne.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.ne[i]);
      std::printf("  %-40s %-6s %s]\n", t.name.c_str(), ggml_type_name(t.type), shape.c_str());
    }
  }
  std::printf("\ntotals: %.3f B parameters (%lld), %s of tensor data\n", params / 1e9, params, human_bytes(double(bytes)).c_str());
  for (const auto& [type, pb] : by_type)
    std::printf("  %-6s %14lld params  %s\n", type.c_str(), pb.first, human_bytes(double(pb.second)).c_str());

  const std::string arch = f->get_string_or("general.architecture", "");
  if (arch != "gemma4" && arch != "gemma4-assistant") return 0;
  const ModelConfig c = ModelConfig::from_gguf(*f);
  std::printf("\nGemma 4 (%s): %d layers, d_model %d, %d heads, vocab %s, context %d, sliding window %d, PLE %d\n",
              c.arch.c_str(), c.n_layer, c.d_model, c.n_head,
              f->has("tokenizer.ggml.tokens") ? std::to_string(f->find("tokenizer.ggml.tokens")->elems.size()).c_str() : "?",
              c.n_ctx_train, c.sliding_window, c.ple_dim);
  if (c.arch == "gemma4" && c.n_kv_shared > 0)
    std::printf(
        "KV: layers 0-%d own KV (%d layers); layers %d-%d are KV-shared (%d); rows are pruned after layer "
        "%d's K/V write\n",
        c.first_shared - 1, c.first_shared, c.first_shared, c.n_layer - 1, c.n_kv_shared, c.prune_layer());
  else if (c.arch == "gemma4")
    std::printf("KV: every layer owns its KV (no KV-shared layers), so pruning does not apply\n");
  if (c.n_expert > 0) {
    // Active parameters per token: everything but the experts a token does not use (and the
    // embedding tables, which are looked up, not multiplied; the tied head counts once).
    long long expert_params = 0;
    for (const auto& t : f->tensors())
      if (t.name.find("_exps.weight") != std::string::npos) expert_params += t.n_elements();
    const long long active = params - expert_params + expert_params * c.n_expert_used / c.n_expert;
    auto count = [](long long n) {
      char b[32];
      std::snprintf(b, sizeof b, n >= 1000000000 ? "%.2f B" : "%.2f M", n >= 1000000000 ? n / 1e9 : n / 1e6);
      return std::string(b);
    };
    std::printf("MoE: every layer has a dense MLP beside %d experts of width %d, %d used per token; %s of the %s "
                "parameters are active per token\n",
                c.n_expert, c.n_ff_exp, c.n_expert_used, count(active).c_str(), count(params).c_str());
  }
  std::printf("\nlayer plan:\n  %-5s %-8s %-5s %-6s %-12s %s\n", "layer", "type", "hd", "kv_h", "ffn", "kv");
  for (int l = 0; l < c.n_layer; ++l) {
    const auto& L = c.layers[l];
    std::string kv = L.owns_kv ? "owns KV (slot " + std::to_string(L.kv_slot) + ")"
                     : L.kv_source >= 0 ? "reads KV of layer " + std::to_string(L.kv_source)
                                        : "reads the target's KV";
    const std::string ffn = c.n_expert > 0 ? std::to_string(L.n_ff) + "+" + std::to_string(c.n_expert_used) + "/" +
                                                 std::to_string(c.n_expert) + "x" + std::to_string(c.n_ff_exp)
                                           : std::to_string(L.n_ff);
    std::printf("  %-5d %-8s %-5d %-6d %-12s %s\n", l, L.sliding ? "sliding" : "full", L.head_dim, L.n_kv_heads,
                ffn.c_str(), kv.c_str());
  }
  return 0;
}

}  // namespace gem4::cli
