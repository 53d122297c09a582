#include "model/model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace gem4 {

std::unique_ptr<Model> Model::load(const std::string& path) {
  auto m = std::make_unique<Model>();
  m->file = gguf::GgufFile::open(path);
  m->tensors = tensor_table_from_gguf(*m->file);
  m->config = ModelConfig::from_gguf(*m->file);
  m->weights = ModelWeights::bind(m->config, m->tensors, path);
  // The PLE table (2.3 B parameters in E2B) is only looked up row by row, for the tokens seen. Tell
  // the kernel not to read ahead around those rows, so the table never becomes resident as a whole.
  if (auto it = m->tensors.find("per_layer_token_embd.weight"); it != m->tensors.end()) {
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(it->second.data) + page - 1) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(it->second.data) + it->second.nbytes) / page * page;
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_RANDOM);
  }
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
