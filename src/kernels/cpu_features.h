// Runtime CPU feature detection (cpuid), used to pick kernel implementations.
#pragma once
#include <string>

namespace gem4 {

enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };  // Avx512 means F+BW+VL+DQ+VNNI (+BF16 if has_bf16)

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false, avx512bf16 = false;
  bool avx512dq = false;  // the *_avx512.cpp files are compiled with -mavx512dq
  bool avxvnni = false;
  bool amd = false;  // vendor "AuthenticAMD"
};

const CpuFeatures& cpu_features();
// The best ISA this CPU supports, lowered by the GEM4_ISA environment variable (scalar|avx2|avx512)
// or by set_isa_override (tests use it to run every path).
Isa active_isa();
void set_isa_override(Isa isa);  // clamps to what the CPU supports
void clear_isa_override();
const char* isa_name(Isa isa);
std::string cpu_features_string();

}  // namespace gem4
