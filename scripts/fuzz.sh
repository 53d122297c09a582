#!/usr/bin/env bash
# Fuzzes the GGUF reader (and the writer, via round trips), the WAV reader (with the 16 kHz
# conversion and the log-mel) and the image reader (stb_image, with the vision resize) with libFuzzer +
# ASan + UBSan; SECONDS are shared, 1/2 GGUF, 1/4 WAV, 1/4 images.
# Usage: scripts/fuzz.sh BUILD_DIR SECONDS
# Exits non-zero when a fuzzer finds a crash, leak, timeout or out-of-memory; the input that caused
# it is left in BUILD_DIR/gguf_artifacts/ (wav_artifacts/, image_artifacts/). The corpora in
# BUILD_DIR/gguf_corpus, wav_corpus and image_corpus grow across runs.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
build=$(cd "$1" && pwd)
seconds=$2
wav_seconds=$(( seconds / 4 > 0 ? seconds / 4 : 1 ))
image_seconds=$wav_seconds
gguf_seconds=$(( seconds - wav_seconds - image_seconds > 0 ? seconds - wav_seconds - image_seconds : 1 ))
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
wav_sources=(src/media/audio_wav.cpp src/media/audio_resample.cpp src/media/audio_mel.cpp)
"$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -fno-omit-frame-pointer -Isrc "${wav_sources[@]}" tests/fuzz/wav_fuzz.cpp -o "$build/wav_fuzz"
"$cxx" -std=c++20 -g -O1 tests/fuzz/wav_seeds.cpp -o "$build/wav_seeds"
"$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -fno-omit-frame-pointer -Isrc src/media/image.cpp src/media/image_preprocess.cpp tests/fuzz/image_fuzz.cpp \
  -o "$build/image_fuzz"

testdata="$root/../shared/testdata"
# seed_dir NAME: an emptied folder for NAME's seeds (the corpus and artifact folders persist).
seed_dir() {
  rm -rf "$build/$1_seeds_dir"
  mkdir -p "$build/$1_seeds_dir" "$build/$1_corpus" "$build/$1_artifacts"
  echo "$build/$1_seeds_dir"
}
# fuzz NAME WHAT SECONDS MAX_LEN: runs $build/NAME_fuzz on its corpus and seeds; stops the script on a finding.
fuzz() {
  local artifacts="$build/$1_artifacts" status=0
  echo "fuzz.sh: fuzzing the $2 for ${3}s"
  "$build/$1_fuzz" -max_total_time="$3" -max_len="$4" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=20 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$build/$1_corpus" "$build/$1_seeds_dir" || status=$?
  if [ $status -ne 0 ]; then
    echo "fuzz.sh: FAILED (exit $status); reproducer(s) in $artifacts:" >&2
    ls -l "$artifacts" >&2 || true
    exit 1
  fi
}

seeds=$(seed_dir gguf)
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
fuzz gguf "GGUF reader" "$gguf_seconds" 1048576

seeds=$(seed_dir wav)
real_wavs=()
for f in "$testdata/mtmd-ref/inputs/"*.wav; do
  [ -f "$f" ] && real_wavs+=("$f")
done
"$build/wav_seeds" "$seeds" "${real_wavs[@]}"
fuzz wav "WAV reader" "$wav_seconds" 65536

seeds=$(seed_dir image)
for f in "$testdata/mtmd-ref/inputs/"*.png "$testdata/mtmd-ref/inputs/"*.jpg; do
  [ -f "$f" ] && cp "$f" "$seeds/"
done
fuzz image "image reader" "$image_seconds" 65536
echo "fuzz.sh: no findings"
