#include "model/model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include "gguf/large_alloc.h"
#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"
#include "model/packed_cache.h"

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
                          &l.ple_inp_gate, &l.ple_proj, &l.router}) {
      fn(*m);
    }
    for (MatrixView& m : l.expert_gate_up) fn(m);
    for (MatrixView& m : l.expert_gate) fn(m);
    for (MatrixView& m : l.expert_up) fn(m);
    for (MatrixView& m : l.expert_down) fn(m);
  }
}

// The matrices that get packed copies (on AVX-512 CPUs; none elsewhere).
std::vector<MatrixView*> matrices_to_pack(ModelWeights& w) {
  std::vector<MatrixView*> out;
  for_each_matrix(w, [&](MatrixView& v) {
    if (v.data && !v.packed && wants_packed_copy(v)) out.push_back(&v);
  });
  return out;
}

// Packing runs on every core (it is done before any other work starts).
int packing_threads() { return int(std::max(1u, std::min(std::thread::hardware_concurrency(), 16u))); }

// madvise over the whole pages inside [data, data + bytes) of the file mapping.
void advise_pages(const void* data, size_t bytes, int advice) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = (start + page - 1) / page * page;
  const uintptr_t end = (start + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, advice);
}

// Drops the packed tensors' pages of the file mapping: the kernels no longer read them (other than the
// embedding rows of tokens seen, which fault back in from the page cache), so resident memory stays
// about one copy of the weights.
void release_file_pages(std::span<MatrixView* const> matrices) {
  for (const MatrixView* v : matrices) advise_pages(v->data, size_t(v->out) * v->row_bytes, MADV_DONTNEED);
}

// A matrix just packed from a file mapping: its pages of the mapping are dropped now, as
// release_file_pages drops them, rather than after the last matrix, so that resident memory stays about
// one copy of the weights throughout the load (a 31B Q4_0, 16.4 GiB, packed into memory on a 23 GiB VM
// peaked at 23.0 GiB resident, the page cache squeezed out, when they were dropped at the end; now 16.5).
void release_packed_source(MatrixView* v) { release_file_pages(std::span<MatrixView* const>(&v, 1)); }

// Packs the matrices into this process's memory; read from a file mapping (`from_file`), each releases
// its source pages as it is packed (release_packed_source). Not a generator's memory, which that would zero.
void pack_all(Model& m, std::span<MatrixView* const> matrices, ThreadPool* pool, bool from_file) {
  size_t total = 0;
  for (const MatrixView* v : matrices) total += PackedStore::reserved_bytes(*v);
  m.packed.reserve(total);  // one block for them all, in huge pages
  for (MatrixView* v : matrices) {
    *v = m.packed.add(*v, pool);
    if (from_file) release_packed_source(v);
  }
}

// With packed_in_memory, after the packed copies were read into memory: the matrices a token also
// streams that have no packed copy (F16, BF16: F32 matrices have one) are copied out of the file
// mapping into this process's memory too, so that no weight a token streams is left in the page
// cache's memory (see read_packed_cache for why that can be slower). Returns what the load line says about it
// ("" when there is nothing to copy).
std::string copy_unpacked_matrices(Model& m, ThreadPool* pool) {
  std::vector<MatrixView*> rest;
  size_t total = 0;
  for_each_matrix(m.weights, [&](MatrixView& v) {
    if (!v.data || v.packed) return;
    rest.push_back(&v);
    total += (size_t(v.out) * v.row_bytes + 63) / 64 * 64;  // each copy 64-byte aligned
  });
  if (rest.empty()) return "";
  const std::string size = std::to_string((total + (1 << 20) - 1) >> 20) + " MiB";
  uint8_t* block = nullptr;
  try {
    block = static_cast<uint8_t*>(allocate_large(total, Pages::Huge));
  } catch (const std::bad_alloc&) {
    return "; the matrices without packed copies left mapped (no memory for " + size + ")";
  }
  // In pieces of at most 16 MiB shared out among the threads, as read_packed_cache reads.
  struct Piece {
    const uint8_t* from;
    uint8_t* to;
    size_t bytes;
  };
  constexpr size_t kPiece = size_t{16} << 20;
  std::vector<Piece> pieces;
  std::vector<ByteSpan> originals;
  size_t at = 0;
  for (MatrixView* v : rest) {
    const size_t bytes = size_t(v->out) * v->row_bytes;
    originals.push_back({static_cast<const uint8_t*>(v->data), bytes});
    for (size_t off = 0; off < bytes; off += kPiece)
      pieces.push_back(
          {static_cast<const uint8_t*>(v->data) + off, block + at + off, std::min(kPiece, bytes - off)});
    v->data = block + at;
    at += (bytes + 63) / 64 * 64;
  }
  pool->parallel_for_dynamic(int64_t(pieces.size()), 1, [&](int64_t p0, int64_t p1, int) {
    for (int64_t p = p0; p < p1; ++p) std::memcpy(pieces[p].to, pieces[p].from, pieces[p].bytes);
  });
  m.packed.adopt_memory(block, total);
  // The copied matrices' pages of the file mapping are dropped, as release_file_pages drops the packed
  // ones', so that resident memory stays about one copy of the weights.
  for (const ByteSpan& o : originals) advise_pages(o.data, o.size, MADV_DONTNEED);
  const std::string what =
      rest.size() == 1 ? " matrix without a packed copy" : " matrices without packed copies";
  return "; " + std::to_string(rest.size()) + what + " (" + size + ") copied too";
}

// Gives a file's matrices their packed copies: mapped (or, with packed_in_memory, read) from the cache
// file when it is current, else packed here (and written to the cache for next time).
void pack_file_matrices(Model& m, const LoadOptions& opt) {
  const std::vector<MatrixView*> matrices = matrices_to_pack(m.weights);
  if (matrices.empty()) {
    m.packed_origin =
        "read in place: packed copies are made of Q8_0, Q4_0, Q4_K, Q5_K and Q6_K matrices for the SIMD "
        "kernel sets, and this file or kernel set has none";
    return;
  }
  ThreadPool pool(packing_threads());
  const std::string& dir = opt.packed_cache_dir;
  std::string why_not_read, why_not_used, pages;
  if (!dir.empty() && opt.packed_in_memory &&
      read_packed_cache(dir, *m.file, matrices, &pool, m.packed, &why_not_read)) {
    m.packed_origin = "read into memory from " + packed_cache_path(dir, m.file->path());
    m.packed_origin += copy_unpacked_matrices(m, &pool);
    release_file_pages(matrices);
    return;
  }
  // Not read into memory (no memory for it, a read error): a current cache is still mapped rather than
  // packed again; a cache that is not current fails here for the same reason.
  if (!dir.empty() && map_packed_cache(dir, *m.file, matrices, m.packed, &why_not_used, &pages)) {
    m.packed_origin = "mapped from " + packed_cache_path(dir, m.file->path());
    if (!pages.empty()) m.packed_origin += "; " + pages;
    if (opt.packed_in_memory) m.packed_origin += " (not read into memory: " + why_not_read + ")";
    release_file_pages(matrices);
    return;
  }
  if (dir.empty()) {
    pack_all(m, matrices, &pool, true);
    m.packed_origin = "packed at load (no cache)";
  } else {
    std::string note;
    if (pack_into_cache(dir, *m.file, matrices, &pool, m.packed, &note, release_packed_source)) {
      m.packed_origin = "packed at load (" + why_not_used + "); " + note;
      // The copies were just made in the cache file's pages; asked for them in memory, read them there
      // (from the page cache) as a later load would.
      PackedStore own;
      if (opt.packed_in_memory && read_packed_cache(dir, *m.file, matrices, &pool, own, &why_not_read)) {
        m.packed = std::move(own);
        m.packed_origin += "; read into memory from it" + copy_unpacked_matrices(m, &pool);
      } else if (opt.packed_in_memory) {
        m.packed_origin += "; left mapped: " + why_not_read;
      }
    } else {
      pack_all(m, matrices, &pool, true);
      m.packed_origin = "packed at load (" + why_not_used + "); cache not written: " + note;
    }
  }
  // Every matrix packed here has already dropped its pages of the file (release_packed_source).
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& opt) {
  auto m = std::make_unique<Model>();
  m->file = gguf::GgufFile::open(path);
  m->tensors = tensor_table_from_gguf(*m->file);
  m->config = ModelConfig::from_gguf(*m->file);
  m->weights = ModelWeights::bind(m->config, m->tensors, path);
  // The PLE table (2.3 B parameters in E2B) is only looked up row by row, for the tokens seen. Tell
  // the kernel not to read ahead around those rows, so the table never becomes resident as a whole.
  if (auto it = m->tensors.find("per_layer_token_embd.weight"); it != m->tensors.end()) {
    advise_pages(it->second.data, it->second.nbytes, MADV_RANDOM);
  }
  pack_file_matrices(*m, opt);
  m->cache_dir = opt.packed_cache_dir;
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
  ThreadPool pool(packing_threads());
  pack_all(*m, matrices_to_pack(m->weights), &pool, false);  // no cache: the generator's memory is not a file
  m->packed_origin = "packed at load (an in-memory model)";
  return m;
}

}  // namespace gem4
