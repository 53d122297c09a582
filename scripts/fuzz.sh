#!/usr/bin/env bash
# Fuzzes the GGUF reader (and the writer, via round trips) with libFuzzer + ASan + UBSan.
# Usage: scripts/fuzz.sh BUILD_DIR SECONDS
# Exits non-zero when the fuzzer finds a crash, leak, timeout or out-of-memory; the input that caused
# it is left in BUILD_DIR/gguf_artifacts/. The corpus in BUILD_DIR/gguf_corpus grows across runs.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
build=$(cd "$1" && pwd)
seconds=$2
cxx=${FUZZ_CXX:-$(command -v clang++-14 || command -v clang++ || true)}
if [ -z "$cxx" ]; then
  echo "fuzz.sh: clang++ not found (libFuzzer needs clang; run scripts/install-deps.sh)" >&2
  exit 2
fi

cd "$root"
echo "fuzz.sh: building $build/gguf_fuzz with $cxx"
"$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -fno-omit-frame-pointer -Isrc src/gguf/*.cpp tests/fuzz/gguf_fuzz.cpp -o "$build/gguf_fuzz"
"$cxx" -std=c++20 -g -O1 -Isrc src/gguf/*.cpp tests/fuzz/gguf_seeds.cpp -o "$build/gguf_seeds"

seeds="$build/gguf_seeds_dir"
corpus="$build/gguf_corpus"
artifacts="$build/gguf_artifacts"
rm -rf "$seeds"
mkdir -p "$seeds" "$corpus" "$artifacts"
testdata="$root/../shared/testdata"
real_files=()
for f in "$testdata/llamacpp-ref/gemma4-tiny-assistant-f32.gguf" "$testdata/llamacpp-ref/gemma4-tiny-q8_0.gguf" \
         "$testdata/tiny-gemma4/tiny-gemma4-q8_0.gguf"; do
  [ -f "$f" ] && real_files+=("$f")
done
"$build/gguf_seeds" "$seeds" "${real_files[@]}"
# One real file whole (784 KB): the fuzzer also starts from a genuine llama.cpp header.
if [ -f "$testdata/llamacpp-ref/gemma4-tiny-assistant-f32.gguf" ]; then
  cp "$testdata/llamacpp-ref/gemma4-tiny-assistant-f32.gguf" "$seeds/"
fi

echo "fuzz.sh: fuzzing for ${seconds}s"
status=0
"$build/gguf_fuzz" -max_total_time="$seconds" -max_len=1048576 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
  -timeout=20 -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" "$seeds" || status=$?
if [ $status -ne 0 ]; then
  echo "fuzz.sh: FAILED (exit $status); reproducer(s) in $artifacts:" >&2
  ls -l "$artifacts" >&2 || true
  exit 1
fi
echo "fuzz.sh: no findings"
