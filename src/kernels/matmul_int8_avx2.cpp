// The AVX2 kernel set's int8 GEMV and GEMM on packed weights (vpmaddubsw / vpmaddwd): int8_ymm.inc.
#define GEM4_YMM_VNNI 0
#define GEM4_YMM_NAMESPACE ymm_avx2
#include "kernels/int8_ymm.inc"
