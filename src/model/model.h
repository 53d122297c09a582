// A loaded Gemma 4 model: hyper-parameters, the tensor table and the bound weights. The bytes stay in
// the GGUF mapping (or in memory owned by the generator); small 1-D tensors are copied to f32, and on
// AVX-512 CPUs the Q8_0/Q4_0 matrices are repacked once for the int8 kernels (kernels/packed_matrix.h).
#pragma once
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "model/config.h"
#include "kernels/packed_matrix.h"
#include "model/weights.h"

namespace gem4 {

// How Model::load treats a file.
struct LoadOptions {
  // Folder of the packed-weight cache (model/packed_cache.h); empty: pack at every load, write nothing.
  // The front ends default to default_packed_cache_dir(); library callers opt in.
  std::string packed_cache_dir;
  // Read the cache file's copies into this process's memory instead of mapping the file
  // (read_packed_cache: a copy at every load, for VMs whose page cache reads slower than fresh memory).
  // Without a cache folder the copies are packed into memory anyway.
  bool packed_in_memory = false;
};

struct Model {
  std::unique_ptr<gguf::GgufFile> file;  // metadata (and, for a file on disk, the tensor mapping)
  std::shared_ptr<void> storage;         // tensor memory of an in-memory (generated) model
  TensorTable tensors;
  ModelConfig config;
  ModelWeights weights;
  PackedStore packed;                    // packed copies of weights' matrices (see pack_file_matrices)
  std::string packed_origin;             // where the packed copies came from, for the front ends to print
  // The cache folder the model was loaded with ("": none): the front ends keep the tokenizer's merge
  // table there too (text::Tokenizer::from_gguf).
  std::string cache_dir;

  // Opens a GGUF file (mmap); throws with the file name and the offending key or tensor.
  static std::unique_ptr<Model> load(const std::string& path, const LoadOptions& opt = {});
  // A model whose metadata comes from `meta` and whose tensors live in `storage`.
  static std::unique_ptr<Model> from_memory(std::unique_ptr<gguf::GgufFile> meta, TensorTable tensors,
                                            std::shared_ptr<void> storage);
};

}  // namespace gem4
