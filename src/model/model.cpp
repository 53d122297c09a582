#include "model/model.h"

namespace gem4 {

std::unique_ptr<Model> Model::load(const std::string& path) {
  auto m = std::make_unique<Model>();
  m->file = gguf::GgufFile::open(path);
  m->tensors = tensor_table_from_gguf(*m->file);
  m->config = ModelConfig::from_gguf(*m->file);
  m->weights = ModelWeights::bind(m->config, m->tensors, path);
  return m;
}

std::unique_ptr<Model> Model::from_memory(std::unique_ptr<gguf::GgufFile> meta, TensorTable tensors,
                                          std::shared_ptr<void> storage) {
  auto m = std::make_unique<Model>();
  m->file = std::move(meta);
  m->storage = std::move(storage);
  m->tensors = std::move(tensors);
  m->config = ModelConfig::from_gguf(*m->file);
  m->weights = ModelWeights::bind(m->config, m->tensors, m->file->path());
  return m;
}

}  // namespace gem4
