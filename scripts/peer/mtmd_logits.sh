#!/usr/bin/env bash
# Writes tests/data/mtmd-upstream/<llama.cpp commit>/<case>.tail.f32: the text model's logits for
# the text after the media in each prompt of ../shared/testdata/mtmd-ref, computed by a llama.cpp
# tree (built outside this repo with its libmtmd) from the reference data's own media rows.
#
#   scripts/peer/mtmd_logits.sh LLAMA_CPP_TREE   (built: cmake --build build --target mtmd llama)
#
# Why: the reference data was made by llama.cpp 3f545be with a local patch; upstream releases before
# and after it (b10361 of 2026-08-11, de3ff81 of 2026-09-28) agree with each other bit for bit on these
# prompts and differ from that data by up to 3e-3, so the tests check gem4 against them too.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
tree="$(cd "${1:?usage: mtmd_logits.sh LLAMA_CPP_TREE}" && pwd)"
ref="$here/../shared/testdata/mtmd-ref"
[ -d "$ref" ] || { echo "mtmd_logits: no $ref" >&2; exit 2; }
commit="$(git -C "$tree" log -1 --format=%h)"
[ -f "$tree/build/bin/libmtmd.so" ] || { echo "mtmd_logits: build $tree first (--target mtmd llama)" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
opt=""
grep -q mtmd_helper_init_opt "$tree/tools/mtmd/mtmd-helper.h" && opt="-DMTMD_HELPER_INIT_OPT"
g++ -O2 -std=c++17 $opt "$here/scripts/peer/mtmd_logits.cpp" -I"$tree/include" -I"$tree/ggml/include" \
  -I"$tree/tools/mtmd" -L"$tree/build/bin" -lmtmd -lllama -lggml -lggml-base -Wl,-rpath,"$tree/build/bin" \
  -o "$work/mtmd_logits"
out="$here/tests/data/mtmd-upstream/$commit"
mkdir -p "$out"
image=$'<|turn>user\n<__media__>Describe this image.<turn|>\n<|turn>model\n'
audio=$'<|turn>user\n<__media__>Transcribe this audio.<turn|>\n<|turn>model\n'
for c in vision__img1-rgba-320x240:img1-rgba-320x240.png vision__img2-photo-200x300:img2-photo-200x300.jpg \
         audio__aud1-speech-16k-mono:aud1-speech-16k-mono.wav audio__aud2-tones-44k1-stereo:aud2-tones-44k1-stereo.wav; do
  id="${c%%:*}" input="${c#*:}"
  case "$id" in vision*) mmproj=vision prompt="$image" ;; *) mmproj=audio prompt="$audio" ;; esac
  "$work/mtmd_logits" "$ref/models/gemma4-tiny-mmvocab-f32.gguf" "$ref/models/gemma4-tiny-$mmproj.gguf" \
    "$ref/inputs/$input" "$prompt" "$ref/dumps/$id/embd.f32" "$out/$id.tail.f32" 2>"$work/$id.log" ||
    { cat "$work/$id.log" >&2; exit 1; }
done
echo "mtmd_logits: wrote $out ($(git -C "$tree" log -1 --format='%h %cd' --date=short))"
