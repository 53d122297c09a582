// Random-weight Gemma 4 models of any shape and type, so tests and benchmarks need no download.
// Presets `tiny`, `e2b`, `e4b` follow the real dimensions and tensor set (spec 1.1 and 4.4; e2b/e4b
// keep the unused K/V tensors of shared layers, as llama.cpp-converted files do); `26b-a4b` (mixture of
// experts) and `31b` (dense) the real dimensions of the other two (spec 1.4) in the tensor layout of
// llama.cpp's converter (../shared/testdata/llamacpp-ref-family/README.md), `tiny-moe` and
// `tiny-dense31` those layouts at that folder's sizes, `small-moe` the MoE layout with rows of whole
// K-quant super-blocks. Weights are drawn so
// activations stay in a realistic range: linear weights with variance 1/fan_in, norms near 1.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gguf/ggml_types.h"
#include "model/model.h"

namespace gem4 {

class ThreadPool;

struct GeneratorSpec {
  std::string preset = "tiny";    // tiny | e2b | e4b | 26b-a4b | 31b | tiny-moe | tiny-dense31 | small-moe
  GgmlType type = GgmlType::F32;  // type of the 2-D weights (1-D tensors stay F32)
  std::string vocab_file;         // copy the tokenizer of this GGUF (its size sets n_vocab)
  int n_vocab = 0;                // synthetic vocabulary size (0: preset default)
  int n_ctx = 0;                  // context_length key (0: preset default)
  uint64_t seed = 42;
  bool include_shared_kv = true;  // write the unused K/V tensors of KV-shared layers
  bool pure = false;              // embedding tables of `type` too (else as llama-quantize: Q6_K)
  // llama-quantize's Q4_K_M mix (with type Q4_K): attn_v and ffn_down of the layers its use_more_bits
  // picks (the first and last eighth, every third between) in Q6_K, the rest Q4_K.
  bool q4_k_m = false;
};

// Parses a --type value of the generator front ends: a GGML type name, or "q4_k_m" (Q4_K with
// q4_k_m set). False when the name is neither.
bool parse_generated_type(const std::string& name, GeneratorSpec* spec);

// The metadata (as a parsed GGUF without tensor data) and tensor list of a generated model, without
// generating any weights: for tests of shapes, parameter counts and the layer plan.
struct GeneratedLayout {
  std::unique_ptr<gguf::GgufFile> metadata;
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
  };
  std::vector<Tensor> tensors;
  int64_t n_params() const;
};
GeneratedLayout describe_generated_model(const GeneratorSpec& spec);

// Writes a GGUF file (streaming; multi-GB files never sit in memory). Throws with the path on failure.
void write_generated_model(const GeneratorSpec& spec, const std::string& path, ThreadPool* pool);
// Builds the model directly in memory (what `gem4 bench` does without -m).
std::unique_ptr<Model> generate_model(const GeneratorSpec& spec, ThreadPool* pool);

}  // namespace gem4
