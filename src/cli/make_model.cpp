// gem4 make-model: writes a random-weight Gemma 4 GGUF (no download needed for tests and benchmarks): a
// text model, or with --preset e2b-mmproj / e4b-mmproj / tiny-mmproj a projector file holding both
// towers (media/mmproj_synthetic.h).
#include <chrono>
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "kernels/thread_pool.h"
#include "media/mmproj_synthetic.h"
#include "model/generator.h"

namespace gem4::cli {

int cmd_make_model(int argc, char** argv, int first) {
  Args a("make-model", "Writes a random-weight Gemma 4 GGUF with the real tensor set of a preset.");
  a.value(
      "--preset", "NAME",
      "tiny | e2b | e4b | 26b-a4b | 31b | tiny-moe | tiny-dense31 | small-moe, or a projector (mmproj) with "
      "both towers: e2b-mmproj | e4b-mmproj | tiny-mmproj",
      "tiny");
  a.value("--type", "TYPE",
          "type of 2-D weights: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k, or q4_k_m "
          "(llama-quantize's mix); projectors: f16 (the default there), bf16, f32, q8_0",
          "f32");
  a.value("--vocab", "FILE", "copy the tokenizer section of this GGUF (sets the vocabulary size)");
  a.value("--n-vocab", "N", "size of the synthetic vocabulary (without --vocab)");
  a.value("--ctx", "N", "context_length written to the file");
  a.value("--seed", "N", "random seed", "42");
  a.flag("--no-shared-kv", "omit the unused K/V tensors of KV-shared layers (as Google's QAT files do)");
  a.flag("--pure",
         "embedding tables of --type too (default: Q6_K below Q8_0, as llama-quantize writes them)");
  a.value("--blocks", "N",
          "projectors: blocks of each tower (default the preset's: 16 vision and 12 audio for e2b/e4b)");
  a.value("-o,--output", "FILE", "output path");
  declare_thread_flag(a);
  if (!a.parse(argc, argv, first)) {
    std::printf("%s", a.help().c_str());
    return 0;
  }
  if (!a.has("-o")) throw ArgError("make-model: -o FILE is required");
  const std::string preset = a.str("--preset");
  const std::string mmproj_suffix = "-mmproj";
  if (preset.size() > mmproj_suffix.size() &&
      preset.compare(preset.size() - mmproj_suffix.size(), mmproj_suffix.size(), mmproj_suffix) == 0) {
    GgmlType type = GgmlType::F16;  // what llama.cpp's converter writes projectors in by default
    if (a.has("--type")) {
      const auto t = ggml_type_from_name(a.str("--type"));
      if (!t) throw ArgError("make-model: --type '" + a.str("--type") + "' is not a GGML type");
      type = *t;
    }
    media::SyntheticMmproj m;
    try {
      m = media::synthetic_mmproj_preset(preset.substr(0, preset.size() - mmproj_suffix.size()), type,
                                         uint64_t(a.integer("--seed")));
    } catch (const std::invalid_argument& e) {
      throw ArgError(std::string("make-model: ") + e.what());
    }
    if (a.has("--blocks")) {
      const int64_t blocks = a.integer("--blocks");
      if (blocks < 1 || blocks > 64) throw ArgError("make-model: --blocks must be 1..64");
      m.v.n_layer = m.a.n_layer = int(blocks);
    }
    const auto t0 = std::chrono::steady_clock::now();
    media::write_synthetic_mmproj(m, a.str("-o"));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "make-model: wrote %s (projector %s, vision + audio, %s) in %.1f s\n",
                 a.str("-o").c_str(), preset.c_str(), ggml_type_name(type), s);
    return 0;
  }
  if (a.has("--blocks")) throw ArgError("make-model: --blocks is for the projector presets (*-mmproj)");
  GeneratorSpec spec;
  spec.preset = a.str("--preset");
  if (!parse_generated_type(a.str("--type"), &spec))
    throw ArgError("make-model: --type '" + a.str("--type") +
                   "' is not a known type (a GGML type or q4_k_m)");
  spec.vocab_file = a.str("--vocab");
  if (a.has("--n-vocab")) spec.n_vocab = int(a.integer("--n-vocab"));
  if (a.has("--ctx")) spec.n_ctx = int(a.integer("--ctx"));
  spec.seed = uint64_t(a.integer("--seed"));
  spec.include_shared_kv = !a.on("--no-shared-kv");
  spec.pure = a.on("--pure");
  ThreadPool pool(thread_count(a));
  const auto t0 = std::chrono::steady_clock::now();
  write_generated_model(spec, a.str("-o"), &pool);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "make-model: wrote %s (preset %s, %s) in %.1f s\n", a.str("-o").c_str(),
               spec.preset.c_str(), spec.q4_k_m ? "Q4_K_M mix" : ggml_type_name(spec.type), s);
  return 0;
}

}  // namespace gem4::cli
