// Runtime CPU feature detection (cpuid on x86-64, the kernel's hardware capabilities on AArch64), used
// to pick kernel implementations.
#pragma once
#include <string>

namespace gem4 {

// The kernel sets, narrowest first (a set may be forced down, never above what the CPU has):
//   Scalar   plain loops, any x86-64 (or other) CPU
//   Avx2     AVX2 + FMA + F16C: Haswell and later, every AMD Zen; int8 products via vpmaddubsw/vpmaddwd
//   AvxVnni  Avx2 plus AVX-VNNI (vpdpbusd on ymm): Intel Alder Lake and later client CPUs, AMD Zen 5
//   Avx512   AVX-512 F+BW+VL+DQ+VNNI (+BF16 where the CPU has it): Ice Lake server and later, Zen 4/5
// and on AArch64 (each built only for its own architecture; the other architecture's sets are never
// supported):
//   Neon         Advanced SIMD of every ARMv8.0 CPU (Cortex-A53/A72, Raspberry Pi 3/4); int8 products
//                via smull/smlal + sadalp
//   NeonDotprod  Neon plus sdot/udot (ARMv8.2 dotprod): Cortex-A55/A76 and later, Pi 5, Graviton 2,
//                Ampere Altra, Apple M1
//   NeonI8mm     NeonDotprod plus smmla (ARMv8.6 i8mm): Graviton 3/4, Cortex-A510/A710/X2 and later,
//                Apple M2 and later
enum class Isa { Scalar = 0, Avx2 = 1, AvxVnni = 2, Avx512 = 3, Neon = 4, NeonDotprod = 5, NeonI8mm = 6 };
// The sets of the architecture this build targets, narrowest first (what tests iterate over).
#if defined(__aarch64__)
constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Neon, Isa::NeonDotprod, Isa::NeonI8mm};
#else
constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::AvxVnni, Isa::Avx512};
#endif

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false, avx512bf16 = false;
  bool avx512dq = false;  // the *_avx512.cpp files are compiled with -mavx512dq
  bool avxvnni = false;
  bool amd = false;                                   // vendor "AuthenticAMD"
  bool asimd = false, dotprod = false, i8mm = false;  // AArch64: Advanced SIMD, sdot/udot, smmla
};

const CpuFeatures& cpu_features();
// The best ISA this CPU supports, lowered by the GEM4_ISA environment variable
// (scalar|avx2|avxvnni|avx512 on x86-64, scalar|neon|dotprod|i8mm on AArch64) or by set_isa_override
// (tests use it to run every path). A GEM4_ISA the CPU lacks is reported once on stderr and the widest
// supported set below it is used; one not in the list is reported and the best supported set is used.
Isa active_isa();
void set_isa_override(Isa isa);  // clamps to what the CPU supports (a set of the other architecture: Scalar)
void clear_isa_override();
const char* isa_name(Isa isa);
// Whether this CPU can run the set (what set_isa_override would not clamp).
bool isa_supported(Isa isa);
std::string cpu_features_string();

}  // namespace gem4
