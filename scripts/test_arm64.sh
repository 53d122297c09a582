#!/usr/bin/env bash
# make test-arm64: cross-builds gem4 for AArch64 (cmake/aarch64-linux-gnu.cmake) and runs it under
# qemu-user on this x86-64 machine:
#   1. -cpu max (dotprod and i8mm: every AArch64 kernel set runs, the tests force each in turn): the
#      kernel tests against their scalar references and the tiny models' llama.cpp reference logits;
#   2. -cpu cortex-a53 (ARMv8.0, no dotprod, no i8mm): detection picks the plain Neon set and the
#      tests that must hold there (the set clamps, the Neon int8 products, the Q8_0 fidelity test);
#   3. `gem4 run` of the trained tiny model, greedy, under both CPU models: the same text as the x86
#      binary prints; GEM4_ISA says what it cannot do.
# Usage: scripts/test_arm64.sh [build-dir] [x86 gem4 binary]
set -euo pipefail
BUILD=${1:-build-arm64}
HOST_GEM4=${2:-build/bin/gem4}
JOBS=${JOBS:-$(nproc)}
SYSROOT=/usr/aarch64-linux-gnu
MODEL=../shared/testdata/tiny-gemma4/tiny-gemma4-f32.gguf

for tool in aarch64-linux-gnu-g++ qemu-aarch64-static; do
  command -v "$tool" >/dev/null || { echo "test-arm64: $tool is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
done
[ -f "$MODEL" ] || { echo "test-arm64: $MODEL is missing" >&2; exit 1; }
[ -x "$HOST_GEM4" ] || { echo "test-arm64: no x86 binary at $HOST_GEM4 to compare with (make build)" >&2; exit 1; }

# The test binary holds only the kernel and fidelity tests (the rest of the suite runs natively).
TEST_FILES="kernel_set_test.cpp;matmul_test.cpp;matmul_arm64_test.cpp;ops_test.cpp;attention_ops_test.cpp;model_llamacpp_test.cpp"
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEM4_RELEASE_OPT=-O2 \
  -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake "-DGEM4_TEST_FILES=$TEST_FILES" "${LAUNCHER[@]}" >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target gem4_tests gem4

export GEM4_PACK_CACHE=off
qemu() {  # qemu CPU-MODEL BINARY ARGS...
  local cpu=$1
  shift
  qemu-aarch64-static -cpu "$cpu" -L "$SYSROOT" "$@"
}

# Gem4IsaPicksTheSetOrSaysWhyNot starts the gem4 binary from inside the tests, which qemu-user cannot
# follow without binfmt_misc; step 3 checks GEM4_ISA on the binary directly.
KERNEL_TESTS='KernelSet.Override*:CpuFeatures.*:Ops.*:AttentionOps.*:Matmul.*:MatrixView.*:MatmulArm64.*:ThreadPool.*'
echo "== test-arm64: -cpu max: kernel tests, every AArch64 set; llama.cpp reference logits"
qemu max "$BUILD/bin/gem4_tests" --gtest_brief=1 "--gtest_filter=$KERNEL_TESTS:Models/LlamaCppReference.*"
echo "== test-arm64: -cpu cortex-a53 (no dotprod, no i8mm)"
qemu cortex-a53 "$BUILD/bin/gem4_tests" --gtest_brief=1 \
  '--gtest_filter=KernelSet.Override*:CpuFeatures.*:MatmulArm64.*:Ops.RmsNorm*:Models/LlamaCppReference.*/gemma4_tiny_q8_0'

echo "== test-arm64: gem4 run, greedy, against the x86 binary"
RUN=(run -m "$MODEL" -p 'In the beginning God created' -n 48 --temp 0 -t 2 -c 512)
want=$("$HOST_GEM4" "${RUN[@]}" 2>/dev/null)
[ -n "$want" ] || { echo "test-arm64: the x86 binary printed nothing" >&2; exit 1; }
for cpu in max cortex-a53; do
  got=$(qemu "$cpu" "$BUILD/bin/gem4" "${RUN[@]}" 2>/dev/null)
  if [ "$got" != "$want" ]; then
    printf 'test-arm64: -cpu %s prints\n%s\nthe x86 binary\n%s\n' "$cpu" "$got" "$want" >&2
    exit 1
  fi
  echo "-cpu $cpu: the same $(printf '%s' "$got" | wc -c) bytes of text"
done
# The sets each CPU model gets, and what GEM4_ISA says when it cannot have its way.
bench_isa() {  # CPU-MODEL GEM4_ISA -> the bench output
  GEM4_ISA=$2 qemu "$1" "$BUILD/bin/gem4" bench --preset tiny --type q8_0 -p 8 -n 1 -r 1 --prune 1 --pack-cache off 2>&1
}
expect() {  # TEXT PATTERN WHAT
  grep -q -- "$2" <<<"$1" || { printf 'test-arm64: %s: no "%s" in\n%s\n' "$3" "$2" "$1" >&2; exit 1; }
}
out=$(bench_isa max "")
expect "$out" "ISA i8mm" "-cpu max"
out=$(bench_isa cortex-a53 "")
expect "$out" "ISA neon" "-cpu cortex-a53"
out=$(bench_isa cortex-a53 i8mm)
expect "$out" "GEM4_ISA=i8mm: this CPU lacks that kernel set" "-cpu cortex-a53, GEM4_ISA=i8mm"
expect "$out" "ISA neon" "-cpu cortex-a53, GEM4_ISA=i8mm"
out=$(bench_isa max avx2)
expect "$out" "GEM4_ISA=avx2 is not one of scalar, neon, dotprod, i8mm" "-cpu max, GEM4_ISA=avx2"
out=$(bench_isa max dotprod)
expect "$out" "ISA dotprod" "-cpu max, GEM4_ISA=dotprod"
echo "== test-arm64: passed"
