// The AVX-VNNI kernel set's int8 GEMV and GEMM on packed weights (vpdpbusd on ymm): int8_ymm.inc.
#define GEM4_YMM_VNNI 1
#define GEM4_YMM_NAMESPACE ymm_avxvnni
#include "kernels/int8_ymm.inc"
