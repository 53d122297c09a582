// The decode GEMVs' software prefetch on x86, as GemvPrefetch (matmul_internal.h) says, for a block of
// `bytes` at p that the kernel is about to read.
#pragma once
#include <xmmintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/matmul_internal.h"
#include "kernels/page_heads.h"

namespace gem4::matmul_detail {

template <GemvPrefetch kPf>
inline void gemv_prefetch(const uint8_t* p, size_t bytes) {
  if constexpr (kPf.page_heads) {
    prefetch_page_head(p, bytes);
  } else {
#pragma GCC unroll 17
    for (size_t line = 0; line < bytes; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(p + kPf.l1 + line),
                   kPf.l1_non_temporal ? _MM_HINT_NTA : _MM_HINT_T0);
      if constexpr (kPf.l2 != 0) _mm_prefetch(reinterpret_cast<const char*>(p + kPf.l2 + line), _MM_HINT_T1);
    }
  }
}

}  // namespace gem4::matmul_detail
