// Test helper: runs a scope under one kernel set (set_isa_override; clamped to what the CPU has) and
// restores the automatic choice when the scope ends.
#pragma once
#include "kernels/cpu_features.h"

namespace gem4::test {

struct IsaOverride {
  explicit IsaOverride(Isa isa) { set_isa_override(isa); }
  ~IsaOverride() { clear_isa_override(); }
  IsaOverride(const IsaOverride&) = delete;
  IsaOverride& operator=(const IsaOverride&) = delete;
};

}  // namespace gem4::test
