// CPU feature detection with cpuid. A feature counts only if the OS also saves the register state it
// needs (XCR0 via xgetbv): AVX needs the SSE and AVX halves, AVX-512 additionally the opmask and upper
// ZMM state. A hypervisor can hide AVX-512 state even when cpuid reports the instructions.
// On AArch64 the kernel says what the CPU has: getauxval(AT_HWCAP/AT_HWCAP2) on Linux, sysctlbyname
// on macOS (where every Apple CPU has Advanced SIMD and dotprod, M2 and later i8mm).
#include "kernels/cpu_features.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define GEM4_X86 1
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#define GEM4_ARM64_LINUX 1
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#define GEM4_ARM64_APPLE 1
#endif

namespace gem4 {
namespace {

std::string cpu_features_string_raw();

#if GEM4_X86
uint64_t read_xcr0() {
  uint32_t lo, hi;
  // xgetbv with ecx = 0; encoded as bytes so no -mxsave flag is needed.
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const unsigned max_leaf = a;
  f.amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "Auth" "enti" "cAMD"
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  const bool avx = (c >> 28) & 1;
  const bool fma = (c >> 12) & 1;
  const bool f16c = (c >> 29) & 1;
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;                 // SSE (bit 1) + AVX upper halves (bit 2)
  const bool os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;  // opmask, ZMM0-15 upper, ZMM16-31
  if (!os_avx || max_leaf < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned leaf7_max_sub = a;
  f.avx2 = (b >> 5) & 1;
  f.fma = fma;
  f.f16c = f16c;
  if (os_avx512) {
    f.avx512f = (b >> 16) & 1;
    f.avx512bw = (b >> 30) & 1;
    f.avx512vl = (b >> 31) & 1;
    f.avx512dq = (b >> 17) & 1;
    f.avx512vnni = (c >> 11) & 1;
  }
  if (leaf7_max_sub >= 1) {
    __cpuid_count(7, 1, a, b, c, d);
    f.avxvnni = (a >> 4) & 1;
    if (os_avx512) f.avx512bf16 = (a >> 5) & 1;
  }
  return f;
}
#elif GEM4_ARM64_LINUX
CpuFeatures detect() {
  // The bits of <asm/hwcap.h>, spelled out so that an older libc's headers do not drop them.
  constexpr unsigned long kHwcapAsimd = 1ul << 1, kHwcapAsimddp = 1ul << 20;
  constexpr unsigned long kHwcap2I8mm = 1ul << 13;
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  CpuFeatures f;
  f.asimd = (hw & kHwcapAsimd) != 0;
  f.dotprod = f.asimd && (hw & kHwcapAsimddp) != 0;
  f.i8mm = f.asimd && (hw2 & kHwcap2I8mm) != 0;
  return f;
}
#elif GEM4_ARM64_APPLE
bool sysctl_flag(const char* name) {
  int v = 0;
  size_t len = sizeof v;
  return sysctlbyname(name, &v, &len, nullptr, 0) == 0 && v != 0;
}
CpuFeatures detect() {
  CpuFeatures f;
  f.asimd = true;  // every AArch64 CPU Apple ships
  f.dotprod = sysctl_flag("hw.optional.arm.FEAT_DotProd");
  f.i8mm = sysctl_flag("hw.optional.arm.FEAT_I8MM");
  return f;
}
#else
CpuFeatures detect() {
  CpuFeatures f;
#if defined(__aarch64__)
  f.asimd = true;  // Advanced SIMD is part of the AArch64 base; the extensions are not known here
#endif
  return f;
}
#endif

Isa best_supported(const CpuFeatures& f) {
#if defined(__aarch64__)
  if (f.asimd && f.dotprod && f.i8mm) return Isa::NeonI8mm;
  if (f.asimd && f.dotprod) return Isa::NeonDotprod;
  if (f.asimd) return Isa::Neon;
#else
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni && f.avx2 && f.fma && f.f16c)
    return Isa::Avx512;
  if (f.avx2 && f.fma && f.f16c && f.avxvnni) return Isa::AvxVnni;
  if (f.avx2 && f.fma && f.f16c) return Isa::Avx2;
#endif
  return Isa::Scalar;
}

// Whether the CPU has what set `isa` needs. The sets are nested except AvxVnni and Avx512: a CPU with
// AVX-512 VNNI but without AVX-VNNI (Ice Lake, Sapphire Rapids without it, Zen 4 has both) can run
// Avx512 but not AvxVnni. Each architecture's sets exist only in its own build (the other's kernel
// files are not compiled), so they are never supported there.
bool supports(const CpuFeatures& f, Isa isa) {
  [[maybe_unused]] const bool avx2 = f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case Isa::Scalar:
      return true;
#if defined(__aarch64__)
    case Isa::Neon:
      return f.asimd;
    case Isa::NeonDotprod:
      return f.asimd && f.dotprod;
    case Isa::NeonI8mm:
      return f.asimd && f.dotprod && f.i8mm;
#else
    case Isa::Avx2:
      return avx2;
    case Isa::AvxVnni:
      return avx2 && f.avxvnni;
    case Isa::Avx512:
      return best_supported(f) == Isa::Avx512;
#endif
    default:
      return false;
  }
}

// The first set of `isa`'s family (x86-64 or AArch64): clamping goes down within the family, then to
// Scalar.
int family_first(Isa isa) { return isa >= Isa::Neon ? static_cast<int>(Isa::Neon) : 1; }

// The widest supported set not above `wanted`.
Isa clamp_to_cpu(Isa wanted, const CpuFeatures& f) {
  for (int i = static_cast<int>(wanted); i >= family_first(wanted) && i > 0; --i) {
    if (supports(f, static_cast<Isa>(i))) return static_cast<Isa>(i);
  }
  return Isa::Scalar;
}

// "scalar, avx2, avxvnni, avx512": the names GEM4_ISA takes in this build.
std::string isa_names() {
  std::string s;
  for (Isa isa : kAllIsas) s += std::string(s.empty() ? "" : ", ") + isa_name(isa);
  return s;
}

// The ISA named by GEM4_ISA, or the CPU's best when unset; never one the CPU cannot run. A value that
// names no set, or a set this CPU lacks, is said on stderr (once: this runs in a static initialiser).
Isa from_environment(Isa best) {
  const char* env = std::getenv("GEM4_ISA");
  if (!env || !*env) return best;
  for (Isa isa : kAllIsas) {
    if (std::strcmp(env, isa_name(isa)) != 0) continue;
    const Isa got = clamp_to_cpu(isa, cpu_features());
    if (got != isa) {
      std::fprintf(stderr, "gem4: GEM4_ISA=%s: this CPU lacks that kernel set (%s); using %s\n", env,
                   cpu_features_string_raw().c_str(), isa_name(got));
    }
    return got;
  }
  std::fprintf(stderr, "gem4: GEM4_ISA=%s is not one of %s; using %s\n", env, isa_names().c_str(),
               isa_name(best));
  return best;
}

constexpr int kNoOverride = -1;
std::atomic<int> g_override{kNoOverride};

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

Isa active_isa() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o != kNoOverride) return static_cast<Isa>(o);
  static const Isa from_env = from_environment(best_supported(cpu_features()));
  return from_env;
}

void set_isa_override(Isa isa) {
  g_override.store(static_cast<int>(clamp_to_cpu(isa, cpu_features())), std::memory_order_relaxed);
}

bool isa_supported(Isa isa) { return supports(cpu_features(), isa); }

void clear_isa_override() { g_override.store(kNoOverride, std::memory_order_relaxed); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::AvxVnni:
      return "avxvnni";
    case Isa::Avx512:
      return "avx512";
    case Isa::Neon:
      return "neon";
    case Isa::NeonDotprod:
      return "dotprod";
    case Isa::NeonI8mm:
      return "i8mm";
  }
  return "unknown";
}

std::string cpu_features_string() { return cpu_features_string_raw() + " -> " + isa_name(active_isa()); }

namespace {
std::string cpu_features_string_raw() {
  const CpuFeatures& f = cpu_features();
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512dq, "avx512dq");
  add(f.avx512vnni, "avx512vnni");
  add(f.avx512bf16, "avx512bf16");
  add(f.amd, "amd");
  add(f.avxvnni, "avxvnni");
  add(f.asimd, "asimd");
  add(f.dotprod, "dotprod");
  add(f.i8mm, "i8mm");
  if (s.empty()) s = "(none)";
  return s;
}
}  // namespace

}  // namespace gem4
