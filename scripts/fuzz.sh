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

echo "fuzz.sh: fuzzing the GGUF reader for ${gguf_seconds}s"
status=0
"$build/gguf_fuzz" -max_total_time="$gguf_seconds" -max_len=1048576 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
  -timeout=20 -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" "$seeds" || status=$?
if [ $status -ne 0 ]; then
  echo "fuzz.sh: FAILED (exit $status); reproducer(s) in $artifacts:" >&2
  ls -l "$artifacts" >&2 || true
  exit 1
fi

wav_seeds="$build/wav_seeds_dir"
wav_corpus="$build/wav_corpus"
wav_artifacts="$build/wav_artifacts"
rm -rf "$wav_seeds"
mkdir -p "$wav_seeds" "$wav_corpus" "$wav_artifacts"
real_wavs=()
for f in "$testdata/mtmd-ref/inputs/"*.wav; do
  [ -f "$f" ] && real_wavs+=("$f")
done
"$build/wav_seeds" "$wav_seeds" "${real_wavs[@]}"
echo "fuzz.sh: fuzzing the WAV reader for ${wav_seconds}s"
"$build/wav_fuzz" -max_total_time="$wav_seconds" -max_len=65536 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
  -timeout=20 -print_final_stats=1 -artifact_prefix="$wav_artifacts/" "$wav_corpus" "$wav_seeds" || status=$?
if [ $status -ne 0 ]; then
  echo "fuzz.sh: FAILED (exit $status); reproducer(s) in $wav_artifacts:" >&2
  ls -l "$wav_artifacts" >&2 || true
  exit 1
fi
image_seeds="$build/image_seeds_dir"
image_corpus="$build/image_corpus"
image_artifacts="$build/image_artifacts"
rm -rf "$image_seeds"
mkdir -p "$image_seeds" "$image_corpus" "$image_artifacts"
for f in "$testdata/mtmd-ref/inputs/"*.png "$testdata/mtmd-ref/inputs/"*.jpg; do
  [ -f "$f" ] && cp "$f" "$image_seeds/"
done
echo "fuzz.sh: fuzzing the image reader for ${image_seconds}s"
"$build/image_fuzz" -max_total_time="$image_seconds" -max_len=65536 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
  -timeout=20 -print_final_stats=1 -artifact_prefix="$image_artifacts/" "$image_corpus" "$image_seeds" ||
  status=$?
if [ $status -ne 0 ]; then
  echo "fuzz.sh: FAILED (exit $status); reproducer(s) in $image_artifacts:" >&2
  ls -l "$image_artifacts" >&2 || true
  exit 1
fi
echo "fuzz.sh: no findings"
