#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernels/convert.h"
#include "tensor/blocks.h"
#include "tensor/quant.h"

namespace gem4 {

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::F32:
      return "f32";
    case KvType::F16:
      return "f16";
    case KvType::BF16:
      return "bf16";
    case KvType::Q8_0:
      return "q8_0";
  }
  return "?";
}

KvType kv_type_from_name(const std::string& s) {
  if (s == "f32") return KvType::F32;
  if (s == "f16") return KvType::F16;
  if (s == "bf16") return KvType::BF16;
  if (s == "q8_0") return KvType::Q8_0;
  throw std::invalid_argument("--kv-type: '" + s + "' is not one of f32, f16, bf16, q8_0");
}

KvCache::KvCache(const ModelConfig& c, int n_ctx, int n_seq, int max_ubatch, KvType type)
    : n_ctx_(n_ctx),
      n_seq_(n_seq),
      max_ubatch_(max_ubatch),
      type_(type),
      seq_len_(n_seq, 0),
      ring_from_(n_seq, 0) {
  if (n_ctx <= 0 || n_seq <= 0 || max_ubatch <= 0)
    throw std::invalid_argument("KvCache: sizes must be positive");
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const auto& L = c.layers[l];
    if (!L.owns_kv) continue;
    if (type == KvType::Q8_0 && L.head_dim % kQK != 0)
      throw std::invalid_argument("--kv-type q8_0: layer " + std::to_string(l) + " has head_dim " +
                                  std::to_string(L.head_dim) + ", not a multiple of the 32-value block");
    Slot s;
    s.sliding = L.sliding && c.sliding_window > 0;
    s.capacity = s.sliding ? std::min(n_ctx, c.sliding_window + max_ubatch) : n_ctx;
    s.wraps = s.sliding && s.capacity < n_ctx;
    if (s.wraps) ring_window_ = c.sliding_window;
    s.width = L.n_kv_heads * L.head_dim;
    const size_t n = size_t(n_seq) * s.capacity * row_bytes(s);
    s.k.allocate(n);
    s.v.allocate(n);
    slots_.push_back(std::move(s));
  }
}

void KvCache::ZeroedBytes::allocate(size_t n) {
  free_large(p_, n_);
  p_ = nullptr, n_ = 0;
  p_ = static_cast<uint8_t*>(allocate_large(n, Pages::Small));
  n_ = n;
}

size_t KvCache::row_bytes(const Slot& s) const {
  switch (type_) {
    case KvType::F32:
      return size_t(s.width) * 4;
    case KvType::Q8_0:
      return size_t(s.width) / kQK * sizeof(BlockQ8_0);
    default:
      return size_t(s.width) * 2;
  }
}

size_t KvCache::offset(const Slot& s, int seq, int cell) const {
  return (size_t(seq) * s.capacity + cell) * row_bytes(s);
}

void KvCache::truncate(int seq, int len) {
  if (seq < 0 || seq >= n_seq_)
    throw std::out_of_range("KvCache: sequence id " + std::to_string(seq) + " out of range");
  if (len >= seq_len_[seq]) return;
  // Positions [len, cur) overwrote ring cells of older positions: what the rings still hold starts
  // where it did before the truncation.
  const int live = live_from(seq);
  seq_len_[seq] = std::max(0, len);
  ring_from_[seq] = std::min(live, seq_len_[seq]);
}

bool KvCache::can_truncate(int seq, int len) const {
  const int cur = seq_len_.at(seq);
  if (len >= cur || len <= 0) return true;
  // The next position (len) needs keys from len - window + 1 on; a ring holds positions from
  // max(ring_from, cur - capacity) on (positions [len, cur) overwrote the cells of older ones).
  const int need = std::max(0, len - ring_window_ + 1);
  for (const auto& s : slots_) {
    if (!s.wraps) continue;
    if (std::max(ring_from_[seq], cur - s.capacity) > need) return false;
  }
  return true;
}

void KvCache::clear_all() {
  std::fill(seq_len_.begin(), seq_len_.end(), 0);
  std::fill(ring_from_.begin(), ring_from_.end(), 0);
}

void KvCache::set_seq_len(int seq, int len) { seq_len_.at(seq) = len; }

void KvCache::copy_prefix(int src, int dst, int len) {
  if (src == dst) return;
  len = std::min(len, seq_len_.at(src));
  for (auto& s : slots_) {
    const size_t row = row_bytes(s);
    const int first = s.sliding ? std::max(0, len - s.capacity) : 0;
    for (int pos = first; pos < len; ++pos) {
      const int cell = s.sliding ? pos % s.capacity : pos;
      std::memcpy(s.k.data() + offset(s, dst, cell), s.k.data() + offset(s, src, cell), row);
      std::memcpy(s.v.data() + offset(s, dst, cell), s.v.data() + offset(s, src, cell), row);
    }
  }
  seq_len_.at(dst) = len;
  ring_from_.at(dst) = std::min(len, live_from(src));
}

size_t KvCache::position_bytes() const {
  size_t n = 0;
  for (const auto& s : slots_) n += 2 * row_bytes(s);
  return n;
}

int KvCache::live_from(int seq) const {
  const int len = seq_len_.at(seq);
  int from = 0;
  for (const auto& s : slots_)
    if (s.wraps) from = std::max({from, ring_from_[seq], len - s.capacity});
  return std::min(from, len);
}

void KvCache::export_rows(int seq, int begin, int end, uint8_t* dst) const {
  if (begin < live_from(seq) || end > seq_len_.at(seq) || begin > end)
    throw std::out_of_range("KvCache: positions [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") of sequence " + std::to_string(seq) + " are not all held");
  for (const auto& s : slots_) {
    const size_t row = row_bytes(s);
    for (const auto* plane : {&s.k, &s.v})
      for (int pos = begin; pos < end; ++pos, dst += row)
        std::memcpy(dst, plane->data() + offset(s, seq, s.sliding ? pos % s.capacity : pos), row);
  }
}

void KvCache::import_rows(int seq, int begin, int end, const uint8_t* src, int full_from, int ring_from) {
  if (seq < 0 || seq >= n_seq_ || begin < 0 || end > n_ctx_ || begin > end)
    throw std::out_of_range("KvCache: cannot import positions [" + std::to_string(begin) + ", " +
                            std::to_string(end) + ") into sequence " + std::to_string(seq));
  for (auto& s : slots_) {
    const size_t row = row_bytes(s);
    const int from = s.wraps ? ring_from : full_from;
    for (auto* plane : {&s.k, &s.v}) {
      for (int pos = begin; pos < end; ++pos, src += row)
        if (pos >= from)
          std::memcpy(plane->data() + offset(s, seq, s.sliding ? pos % s.capacity : pos), src, row);
    }
  }
}

void KvCache::set_restored(int seq, int len, int ring_from) {
  seq_len_.at(seq) = std::clamp(len, 0, n_ctx_);
  ring_from_.at(seq) = std::clamp(ring_from, 0, seq_len_[seq]);
}

std::string KvCache::layout_signature() const {
  std::string sig = std::string("kv ") + kv_type_name(type_) + " window " + std::to_string(ring_window_);
  for (const auto& s : slots_) sig += s.wraps ? " ring" : " full", sig += std::to_string(s.width);
  return sig;
}

namespace {
void store_row(KvType t, const float* src, uint8_t* dst, int n) {
  switch (t) {
    case KvType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      break;
    case KvType::F16:
      convert_f32_to_f16(src, reinterpret_cast<uint16_t*>(dst), n);
      break;
    case KvType::BF16:
      convert_f32_to_bf16(src, reinterpret_cast<uint16_t*>(dst), n);
      break;
    case KvType::Q8_0:
      quantize_row_q8_0_activation(src, reinterpret_cast<BlockQ8_0*>(dst), n);
      break;
  }
}
void load_row(KvType t, const uint8_t* src, float* dst, int n) {
  switch (t) {
    case KvType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      break;
    case KvType::F16:
      convert_f16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, n);
      break;
    case KvType::BF16:
      convert_bf16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, n);
      break;
    case KvType::Q8_0:
      dequantize_row(GgmlType::Q8_0, src, dst, n);
      break;
  }
}
}  // namespace

void KvCache::write(int slot, int seq, int pos, const float* k, const float* v) {
  Slot& s = slots_[slot];
  if (pos < 0 || pos >= n_ctx_)
    throw std::out_of_range("KvCache: position " + std::to_string(pos) + " outside the context");
  const int cell = cell_of(slot, pos);
  store_row(type_, k, s.k.data() + offset(s, seq, cell), s.width);
  store_row(type_, v, s.v.data() + offset(s, seq, cell), s.width);
}

const void* KvCache::k_row(int slot, int seq, int cell) const {
  return slots_[slot].k.data() + offset(slots_[slot], seq, cell);
}
const void* KvCache::v_row(int slot, int seq, int cell) const {
  return slots_[slot].v.data() + offset(slots_[slot], seq, cell);
}
void KvCache::read_k(int slot, int seq, int cell, float* dst) const {
  load_row(type_, static_cast<const uint8_t*>(k_row(slot, seq, cell)), dst, slots_[slot].width);
}
void KvCache::read_v(int slot, int seq, int cell, float* dst) const {
  load_row(type_, static_cast<const uint8_t*>(v_row(slot, seq, cell)), dst, slots_[slot].width);
}

size_t KvCache::bytes() const {
  size_t n = 0;
  for (const auto& s : slots_) n += s.k.size() + s.v.size();
  return n;
}

}  // namespace gem4
