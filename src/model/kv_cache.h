// The KV cache: K and V only for the KV-owning layers (spec 1.2); shared layers read their donor's.
// Each sequence has its own cells. Full-attention layers keep one cell per position (up to n_ctx);
// sliding layers keep a ring of (window + max_ubatch) cells, indexed by position modulo the ring
// size, so a micro-batch never overwrites a key that one of its own queries still needs, and rolling
// back a rejected speculative draft (at most max_ubatch positions) never loses a live key.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/large_alloc.h"
#include "model/config.h"

namespace gem4 {

// Q8_0: blocks of 32 values with one f16 scale each (34 bytes per 32 values, llama.cpp's -ctk/-ctv
// q8_0), quantized as llama.cpp's x86 backend stores K/V rows; attention reads the blocks directly.
// Needs head dimensions that are multiples of 32.
enum class KvType { F32, F16, BF16, Q8_0 };
const char* kv_type_name(KvType t);
KvType kv_type_from_name(const std::string& s);  // throws std::invalid_argument naming the value

class KvCache {
 public:
  KvCache(const ModelConfig& c, int n_ctx, int n_seq, int max_ubatch, KvType type);

  int n_ctx() const { return n_ctx_; }
  int n_seq() const { return n_seq_; }
  KvType type() const { return type_; }
  int max_ubatch() const { return max_ubatch_; }
  // Number of positions stored for a sequence (the next position to write).
  int seq_len(int seq) const { return seq_len_.at(seq); }
  // Forget positions >= len (rollback of rejected drafts, or a new prompt).
  void truncate(int seq, int len);
  // Whether truncate(seq, len) keeps every key the next position needs: sliding rings only hold the
  // last (window + max_ubatch) positions, so a rollback further than that must recompute.
  bool can_truncate(int seq, int len) const;
  void clear(int seq) { truncate(seq, 0); }
  void clear_all();
  // Copy the first len positions of src into dst (prefix reuse); sliding rings keep what is live.
  void copy_prefix(int src, int dst, int len);
  // Marks positions [0, len) as written (the forward pass calls it after writing a micro-batch).
  void set_seq_len(int seq, int len);

  // --- Moving K/V rows in and out (prefix snapshots, the prompt cache) ---
  // Bytes of one position's K and V rows over every slot. A block of n positions is laid out slot by
  // slot: slot 0's K rows [n][width], its V rows [n][width], then slot 1, ... (the cache type's bytes).
  size_t position_bytes() const;
  // The lowest position whose K/V every slot of seq still holds (rings keep only their last cells;
  // a restored ring holds only what was restored). Rows below it cannot be exported.
  int live_from(int seq) const;
  // Copies the rows of positions [begin, end) of seq into dst ((end - begin) * position_bytes()).
  // Throws std::out_of_range when a position is not held (below live_from or at/after seq_len).
  void export_rows(int seq, int begin, int end, uint8_t* dst) const;
  // Writes rows of a block of positions [begin, end) (the export_rows layout) into seq's cells: the
  // full slots' rows of positions >= full_from and the wrapping rings' rows of positions >= ring_from
  // (a ring must not take positions older than the window it restores: they would overwrite newer
  // cells). Does not change seq_len; see set_restored.
  void import_rows(int seq, int begin, int end, const uint8_t* src, int full_from, int ring_from);
  // After import_rows: seq holds positions [0, len), its rings only from ring_from on.
  void set_restored(int seq, int len, int ring_from);
  // Positions a query at position p reads in a wrapping ring: [p - sliding_window() + 1, p].
  // 0 when no slot wraps (every position of the context has its own cell).
  int ring_window() const { return ring_window_; }
  // Describes the cells (type, per slot: sliding or full, width, wrapping): a prompt cache made with
  // another layout is not used.
  std::string layout_signature() const;

  // Cell capacity of a KV slot (n_ctx for full layers, the ring size for sliding ones).
  int capacity(int slot) const { return slots_[slot].capacity; }
  int cell_of(int slot, int pos) const { return slots_[slot].sliding ? pos % slots_[slot].capacity : pos; }
  int row_width(int slot) const { return slots_[slot].width; }  // n_kv_heads * head_dim
  // Write one K and V row (f32) for a position.
  void write(int slot, int seq, int pos, const float* k, const float* v);
  // Raw storage of a cell's K or V row, in the cache type.
  const void* k_row(int slot, int seq, int cell) const;
  const void* v_row(int slot, int seq, int cell) const;
  // Read a row as f32 (converting if needed).
  void read_k(int slot, int seq, int cell, float* dst) const;
  void read_v(int slot, int seq, int cell, float* dst) const;

  size_t bytes() const;  // allocated bytes of K/V storage

 private:
  // Zeroed bytes from allocate_large in 4 KiB pages (Pages::Small), so the cache costs time and
  // memory only as positions are written. (A std::vector wrote every byte up front: ~15 % of the time
  // to first token of a short prompt with the default context; huge pages made 2 MiB of each large
  // plane resident at its first write: 11 of the 78 MiB of fresh memory before an E2B's first token.)
  class ZeroedBytes {
   public:
    ZeroedBytes() = default;
    ZeroedBytes(ZeroedBytes&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
    ZeroedBytes& operator=(ZeroedBytes&&) = delete;
    ~ZeroedBytes() { free_large(p_, n_); }
    void allocate(size_t n);  // once; throws std::bad_alloc
    uint8_t* data() { return p_; }
    const uint8_t* data() const { return p_; }
    size_t size() const { return n_; }

   private:
    uint8_t* p_ = nullptr;
    size_t n_ = 0;
  };
  struct Slot {
    bool sliding = false;
    bool wraps = false;  // a sliding ring smaller than the context: cells are reused
    int capacity = 0;
    int width = 0;
    ZeroedBytes k, v;  // [n_seq][capacity][width] in the cache type
  };
  size_t row_bytes(const Slot& s) const;  // one K or V row of a slot in the cache type
  size_t offset(const Slot& s, int seq, int cell) const;
  int n_ctx_, n_seq_, max_ubatch_;
  KvType type_;
  std::vector<Slot> slots_;
  std::vector<int> seq_len_;
  std::vector<int> ring_from_;  // per sequence: rings hold no position below this (restored rings)
  int ring_window_ = 0;
};

}  // namespace gem4
