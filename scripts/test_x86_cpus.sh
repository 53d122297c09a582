#!/usr/bin/env bash
# make test-x86-cpus: the one x86-64 binary `make build` makes, checked for the CPUs this machine is not
# (an AVX-512 machine's tests force the narrower kernel sets with GEM4_ISA, but its CPU still has every
# instruction, so a stray one would go unnoticed there):
#   1. statically (objdump): every function of gem4 and gem4_tests that uses an instruction beyond the
#      x86-64 baseline (VEX/EVEX encodings, mask registers, BMI) belongs to a kernel set's own files: its
#      name carries its set (avx2, avxvnni, avx512) or it is local to one file (an anonymous namespace).
#      An inline function with external linkage, compiled into an AVX-512 file and into a plain one,
#      would otherwise leave the linker free to keep the AVX-512 copy for every caller;
#   2. under qemu-user (its TCG emulates AVX2, FMA and F16C since QEMU 7.2, no AVX-512, no AVX-VNNI):
#      -cpu Haswell-v4 (an Intel AVX2 CPU): detection picks `avx2`, GEM4_ISA=avx512 says why not; the
#         kernel tests against their scalar references and the tiny models' llama.cpp reference logits;
#      -cpu EPYC-Milan (an AMD AVX2 CPU, Zen 3: the AMD choices of software prefetch): picks `avx2`;
#         the shared-input products and the reference logits;
#      -cpu Nehalem-v1 (SSE4.2, no AVX): picks `scalar`, GEM4_ISA=avx2 says why not; the reference logits;
#   3. `gem4 run` of the trained tiny model, greedy, on each: the same text as on this machine.
# Usage: scripts/test_x86_cpus.sh [build-dir]
set -euo pipefail
BUILD=${1:-build}
MODEL=../shared/testdata/tiny-gemma4/tiny-gemma4-f32.gguf
GEM4=$BUILD/bin/gem4
TESTS=$BUILD/bin/gem4_tests

fail() {
  echo "test-x86-cpus: $*" >&2
  exit 1
}
[ "$(uname -m)" = x86_64 ] || fail "runs on x86-64 only"
for tool in objdump qemu-x86_64-static; do
  command -v "$tool" >/dev/null || fail "$tool is missing (scripts/install-deps.sh installs it)"
done
[ -f "$MODEL" ] || fail "$MODEL is missing"
for bin in "$GEM4" "$TESTS"; do
  [ -x "$bin" ] || fail "no binary at $bin (make build)"
done
if grep -q '^GEM4_NATIVE:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  echo "test-x86-cpus: skipped: $BUILD is built with GEM4_NATIVE=ON (-march=native), for this CPU only"
  exit 0
fi

echo "== test-x86-cpus: instructions beyond x86-64 only inside the kernel sets' files"
for bin in "$GEM4" "$TESTS"; do
  # Function headers ("addr <name>:") and instruction lines ("  addr:<TAB>mnemonic operands").
  strays=$(objdump -d --no-show-raw-insn -C "$bin" | awk '
    /^[0-9a-f]+ <.*>:$/ { fn = $0; next }
    /^ +[0-9a-f]+:\t(v[a-z0-9]+|k[a-z]+|shlx|shrx|sarx|andn|bzhi|pdep|pext|rorx|mulx) / {
      if (!(fn in seen)) { seen[fn] = 1; print fn }
    }' | grep -v -E '\(anonymous namespace\)|avx2|avxvnni|avx512' || true)
  if [ -n "$strays" ]; then
    printf 'test-x86-cpus: %s: functions outside the kernel sets use AVX or later instructions:\n%s\n' \
      "$bin" "$strays" >&2
    exit 1
  fi
  echo "$bin: none outside"
done

export GEM4_PACK_CACHE=off
qemu() {  # qemu CPU-MODEL BINARY ARGS... (TCG's notes on CPU features it leaves out go to /dev/null)
  local cpu=$1
  shift
  qemu-x86_64-static -cpu "$cpu" "$@" 2> >(grep -v "TCG doesn't support requested feature" >&2)
}
bench_isa() {  # CPU-MODEL GEM4_ISA -> the bench output
  GEM4_ISA=$2 qemu "$1" "$GEM4" bench --preset tiny --type q8_0 -p 8 -n 1 -r 1 --prune 1 --pack-cache off 2>&1
}
expect() {  # TEXT PATTERN WHAT
  grep -q -- "$2" <<<"$1" || fail "$3: no \"$2\" in
$1"
}
# Gem4IsaPicksTheSetOrSaysWhyNot starts the gem4 binary from inside the tests, which qemu-user does not
# follow; the bench_isa runs check GEM4_ISA on the binary directly. Matmul.ContiguousStridesAndManyPanels
# (a minute under emulation, its scalar reference most of it) runs natively with every set forced.
KERNEL_TESTS='KernelSet.Override*:CpuFeatures.*:Ops.*:AttentionOps.*:Matmul.*:MatrixView.*:ThreadPool.*'
NATIVE_ONLY='Matmul.ContiguousStridesAndManyPanels'

echo "== test-x86-cpus: -cpu Haswell-v4 (AVX2, FMA, F16C; no AVX-512, no AVX-VNNI)"
out=$(bench_isa Haswell-v4 "")
grep -q "ISA avx2" <<<"$out" ||
  fail "-cpu Haswell-v4: the avx2 set was not picked (QEMU 7.2 or later emulates AVX2; $(qemu-x86_64-static --version | head -1)):
$out"
out=$(bench_isa Haswell-v4 avx512)
expect "$out" "GEM4_ISA=avx512: this CPU lacks that kernel set" "-cpu Haswell-v4, GEM4_ISA=avx512"
expect "$out" "ISA avx2" "-cpu Haswell-v4, GEM4_ISA=avx512"
qemu Haswell-v4 "$TESTS" --gtest_brief=1 "--gtest_filter=$KERNEL_TESTS:Models/LlamaCppReference.*:-$NATIVE_ONLY"

echo "== test-x86-cpus: -cpu EPYC-Milan (an AMD AVX2 CPU)"
out=$(bench_isa EPYC-Milan "")
expect "$out" "ISA avx2" "-cpu EPYC-Milan"
qemu EPYC-Milan "$TESTS" --gtest_brief=1 \
  '--gtest_filter=Matmul.SharedInput*:Models/LlamaCppReference.*'

echo "== test-x86-cpus: -cpu Nehalem-v1 (SSE4.2, no AVX)"
out=$(bench_isa Nehalem-v1 "")
expect "$out" "ISA scalar" "-cpu Nehalem-v1"
out=$(bench_isa Nehalem-v1 avx2)
expect "$out" "GEM4_ISA=avx2: this CPU lacks that kernel set" "-cpu Nehalem-v1, GEM4_ISA=avx2"
expect "$out" "ISA scalar" "-cpu Nehalem-v1, GEM4_ISA=avx2"
qemu Nehalem-v1 "$TESTS" --gtest_brief=1 '--gtest_filter=KernelSet.Override*:CpuFeatures.*:Models/LlamaCppReference.*'

echo "== test-x86-cpus: gem4 run, greedy, against this machine's run"
RUN=(run -m "$MODEL" -p 'In the beginning God created' -n 48 --temp 0 -t 2 -c 512)
want=$("$GEM4" "${RUN[@]}" 2>/dev/null)
[ -n "$want" ] || fail "gem4 run printed nothing on this machine"
for cpu in Haswell-v4 EPYC-Milan Nehalem-v1; do
  got=$(qemu "$cpu" "$GEM4" "${RUN[@]}" 2>/dev/null)
  [ "$got" = "$want" ] || fail "-cpu $cpu prints
$got
this machine
$want"
  echo "-cpu $cpu: the same $(printf '%s' "$got" | wc -c) bytes of text"
done
echo "== test-x86-cpus: passed"
