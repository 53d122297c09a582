#include "model/model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <thread>

#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"

namespace gem4 {

namespace {

// Every matrix the forward pass multiplies by (not the PLE table: it is only looked up by row).
template <class Fn>
void for_each_matrix(ModelWeights& w, Fn&& fn) {
  fn(w.token_embd);
  fn(w.ple_model_proj);
  fn(w.nextn_pre_proj);
  fn(w.nextn_post_proj);
  for (LayerWeights& l : w.layers) {
    for (MatrixView* m : {&l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output, &l.ffn_gate, &l.ffn_up, &l.ffn_down,
                          &l.ple_inp_gate, &l.ple_proj}) {
      fn(*m);
    }
  }
}

// Packs the matrices (on AVX-512 CPUs; a no-op elsewhere). With `release_mapping`, the packed tensors'
// pages of the file mapping are dropped afterwards: the kernels no longer read them (other than the
// embedding rows of tokens seen, which fault back in from the page cache), so resident memory stays
// about one copy of the weights.
void pack_matrices(Model& m, bool release_mapping) {
  if (active_isa() != Isa::Avx512) return;
  ThreadPool pool(int(std::max(1u, std::min(std::thread::hardware_concurrency(), 16u))));
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  for_each_matrix(m.weights, [&](MatrixView& v) {
    if (!v.data || v.packed || !packable_type(v.type)) return;
    v = m.packed.add(v, &pool);
    if (release_mapping && v.packed) {
      const auto start = reinterpret_cast<uintptr_t>(v.data);
      const uintptr_t begin = (start + page - 1) / page * page;
      const uintptr_t end = (start + size_t(v.out) * v.row_bytes) / page * page;
      if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    }
  });
}

}  // namespace

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
  pack_matrices(*m, /*release_mapping=*/true);
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
  pack_matrices(*m, /*release_mapping=*/false);  // the generator's memory is not a file mapping
  return m;
}

}  // namespace gem4
