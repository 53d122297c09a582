// A loaded Gemma 4 model: hyper-parameters, the tensor table and the bound weights. The bytes stay in
// the GGUF mapping (or in memory owned by the generator); nothing is copied except small 1-D tensors.
#pragma once
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "model/config.h"
#include "model/weights.h"

namespace gem4 {

struct Model {
  std::unique_ptr<gguf::GgufFile> file;  // metadata (and, for a file on disk, the tensor mapping)
  std::shared_ptr<void> storage;         // tensor memory of an in-memory (generated) model
  TensorTable tensors;
  ModelConfig config;
  ModelWeights weights;

  // Opens a GGUF file (mmap); throws with the file name and the offending key or tensor.
  static std::unique_ptr<Model> load(const std::string& path);
  // A model whose metadata comes from `meta` and whose tensors live in `storage`.
  static std::unique_ptr<Model> from_memory(std::unique_ptr<gguf::GgufFile> meta, TensorTable tensors,
                                            std::shared_ptr<void> storage);
};

}  // namespace gem4
