// Runtime CPU feature detection (cpuid), used to pick kernel implementations.
#pragma once
#include <string>

namespace gem4 {

// The kernel sets, narrowest first (a set may be forced down, never above what the CPU has):
//   Scalar   plain loops, any x86-64 (or other) CPU
//   Avx2     AVX2 + FMA + F16C: Haswell and later, every AMD Zen; int8 products via vpmaddubsw/vpmaddwd
//   AvxVnni  Avx2 plus AVX-VNNI (vpdpbusd on ymm): Intel Alder Lake and later client CPUs, AMD Zen 5
//   Avx512   AVX-512 F+BW+VL+DQ+VNNI (+BF16 where the CPU has it): Ice Lake server and later, Zen 4/5
enum class Isa { Scalar = 0, Avx2 = 1, AvxVnni = 2, Avx512 = 3 };
constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::AvxVnni, Isa::Avx512};

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false, avx512bf16 = false;
  bool avx512dq = false;  // the *_avx512.cpp files are compiled with -mavx512dq
  bool avxvnni = false;
  bool amd = false;  // vendor "AuthenticAMD"
};

const CpuFeatures& cpu_features();
// The best ISA this CPU supports, lowered by the GEM4_ISA environment variable
// (scalar|avx2|avxvnni|avx512) or by set_isa_override (tests use it to run every path). A GEM4_ISA the
// CPU lacks, or one not in that list, is reported once on stderr and the best supported set is used.
Isa active_isa();
void set_isa_override(Isa isa);  // clamps to what the CPU supports
void clear_isa_override();
const char* isa_name(Isa isa);
// Whether this CPU can run the set (what set_isa_override would not clamp).
bool isa_supported(Isa isa);
std::string cpu_features_string();

}  // namespace gem4
