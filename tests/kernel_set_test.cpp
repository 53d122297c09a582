// Choosing the kernel set: the override clamps to what the CPU has, and GEM4_ISA picks a set for the
// whole process (or says on stderr why it cannot) through the real `gem4` binary.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "isa_override.h"
#include "kernels/cpu_features.h"

namespace gem4 {
namespace {

using test::IsaOverride;

TEST(KernelSet, OverrideTakesTheWidestSupportedSetNotAboveTheAskedOne) {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  EXPECT_TRUE(isa_supported(Isa::Scalar));
  EXPECT_EQ(isa_supported(Isa::Avx2), avx2);
  EXPECT_EQ(isa_supported(Isa::AvxVnni), avx2 && f.avxvnni);
  for (Isa isa : kAllIsas) {
    IsaOverride o(isa);
    const Isa got = active_isa();
    EXPECT_LE(static_cast<int>(got), static_cast<int>(isa)) << isa_name(isa);
    EXPECT_TRUE(isa_supported(got)) << isa_name(isa);
    if (isa_supported(isa)) {
      EXPECT_EQ(got, isa);
    }
    // Nothing between what was asked and what was given is supported.
    for (int i = static_cast<int>(got) + 1; i <= static_cast<int>(isa); ++i)
      EXPECT_FALSE(isa_supported(static_cast<Isa>(i))) << isa_name(isa) << " gave " << isa_name(got);
  }
  EXPECT_STREQ(isa_name(Isa::AvxVnni), "avxvnni");
}

struct BenchRun {
  int rc = -1;
  std::string all;  // stdout and stderr
};
BenchRun gem4_with_isa(const std::string& isa) {
  const std::string out = "/tmp/gem4_kernel_set_" + std::to_string(getpid()) + ".txt";
  const std::string cmd =
      "GEM4_ISA='" + isa + "' '" + GEM4_BINARY +
      "' bench --preset tiny --type q4_k_m -p 16 -n 2 -r 1 --prune 1 --pack-cache off > '" + out + "' 2>&1";
  BenchRun r;
  const int status = std::system(cmd.c_str());
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  r.all = ss.str();
  std::remove(out.c_str());
  return r;
}

TEST(KernelSet, Gem4IsaPicksTheSetOrSaysWhyNot) {
  for (Isa isa : kAllIsas) {
    const BenchRun r = gem4_with_isa(isa_name(isa));
    ASSERT_EQ(r.rc, 0) << r.all;
    IsaOverride o(isa);
    const std::string want = std::string("ISA ") + isa_name(active_isa());
    EXPECT_NE(r.all.find(want), std::string::npos) << isa_name(isa) << ":\n" << r.all;
    const bool said = r.all.find("this CPU lacks that kernel set") != std::string::npos;
    EXPECT_EQ(said, !isa_supported(isa)) << r.all;
  }
  const BenchRun bad = gem4_with_isa("avx9000");
  ASSERT_EQ(bad.rc, 0) << bad.all;
  std::string names;  // this architecture's sets: "scalar, avx2, avxvnni, avx512" on x86-64
  for (Isa isa : kAllIsas) names += std::string(names.empty() ? "" : ", ") + isa_name(isa);
  EXPECT_NE(bad.all.find("GEM4_ISA=avx9000 is not one of " + names), std::string::npos) << bad.all;
}

}  // namespace
}  // namespace gem4
