#!/usr/bin/env bash
# Reference outputs of an upstream llama.cpp tree (built outside this repo with its libmtmd) for
# tests/media_upstream_test.cpp, written to tests/data/mtmd-upstream/<commit>/:
#   <case>.tail.f32   the text model's logits for the text after the media in each prompt of
#                     ../shared/testdata/mtmd-ref, from the reference data's own media rows;
#   embd/<projector>__<input>.f32   the projector rows for projectors `gem4 make-model` generates in
#                     other shapes and types (both towers in one file, F16/BF16 matrices, E2B widths),
#                     for the reference's resized images (no resize runs) and its WAVs.
#
#   scripts/peer/mtmd_ref.sh LLAMA_CPP_TREE   (built: cmake --build build --target mtmd llama)
#
# Why: the reference data was made by llama.cpp 3f545be with a local patch; upstream releases before
# and after it (b10361 of 2026-08-11, de3ff81 of 2026-09-28) agree with each other bit for bit on its
# prompts and differ from that data by up to 6e-3, so the tests check gem4 against upstream too.
# Needs gem4 built (build/bin/gem4) and ~4 GB in /tmp for an E2B-width text model (mtmd wants one).
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
tree="$(cd "${1:?usage: mtmd_ref.sh LLAMA_CPP_TREE}" && pwd)"
ref="$here/../shared/testdata/mtmd-ref"
gem4="$here/build/bin/gem4"
[ -d "$ref" ] || { echo "mtmd_ref: no $ref" >&2; exit 2; }
[ -x "$gem4" ] || { echo "mtmd_ref: build gem4 first (make build)" >&2; exit 2; }
[ -f "$tree/build/bin/libmtmd.so" ] || { echo "mtmd_ref: build $tree first (--target mtmd llama)" >&2; exit 2; }
commit="$(git -C "$tree" log -1 --format=%h)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
opt=""
grep -q mtmd_helper_init_opt "$tree/tools/mtmd/mtmd-helper.h" && opt="-DMTMD_HELPER_INIT_OPT"
g++ -O2 -std=c++17 $opt "$here/scripts/peer/mtmd_ref.cpp" -I"$tree/include" -I"$tree/ggml/include" \
  -I"$tree/tools/mtmd" -L"$tree/build/bin" -lmtmd -lllama -lggml -lggml-base -Wl,-rpath,"$tree/build/bin" \
  -o "$work/mtmd_ref"
run() { "$work/mtmd_ref" "$@" 2>"$work/log" || { cat "$work/log" >&2; exit 1; }; }
out="$here/tests/data/mtmd-upstream/$commit"
mkdir -p "$out/embd"
text="$ref/models/gemma4-tiny-mmvocab-f32.gguf"

image=$'<|turn>user\n<__media__>Describe this image.<turn|>\n<|turn>model\n'
audio=$'<|turn>user\n<__media__>Transcribe this audio.<turn|>\n<|turn>model\n'
for c in vision__img1-rgba-320x240:img1-rgba-320x240.png vision__img2-photo-200x300:img2-photo-200x300.jpg \
         audio__aud1-speech-16k-mono:aud1-speech-16k-mono.wav audio__aud2-tones-44k1-stereo:aud2-tones-44k1-stereo.wav; do
  id="${c%%:*}" input="${c#*:}"
  case "$id" in vision*) mmproj=vision prompt="$image" ;; *) mmproj=audio prompt="$audio" ;; esac
  run logits "$text" "$ref/models/gemma4-tiny-$mmproj.gguf" "$ref/inputs/$input" "$prompt" \
    "$ref/dumps/$id/embd.f32" "$out/$id.tail.f32"
done

# Projectors of other shapes: name preset type blocks, then the inputs (img1/img2: the reference's
# resized pixels, 384x288 and 288x384; aud1/aud2: its WAVs). Keep in step with the test's table.
"$gem4" make-model --preset e2b --type q4_0 -o "$work/e2b-text.gguf" 2>/dev/null
while read -r name preset type blocks inputs; do
  "$gem4" make-model --preset "$preset-mmproj" --type "$type" --blocks "$blocks" -o "$work/$name.gguf" 2>/dev/null
  case "$preset" in tiny) t="$text" ;; *) t="$work/e2b-text.gguf" ;; esac
  for i in $inputs; do
    case "$i" in
      img1) run embd "$t" "$work/$name.gguf" rgb 384 288 "$ref/dumps/vision__img1-rgba-320x240/resized.u8" "$out/embd/${name}__$i.f32" ;;
      img2) run embd "$t" "$work/$name.gguf" rgb 288 384 "$ref/dumps/vision__img2-photo-200x300/resized.u8" "$out/embd/${name}__$i.f32" ;;
      aud1) run embd "$t" "$work/$name.gguf" audio "$ref/inputs/aud1-speech-16k-mono.wav" "$out/embd/${name}__$i.f32" ;;
      aud2) run embd "$t" "$work/$name.gguf" audio "$ref/inputs/aud2-tones-44k1-stereo.wav" "$out/embd/${name}__$i.f32" ;;
    esac
  done
done <<'LIST'
tiny-f32 tiny f32 2 img1 aud1
tiny-f16 tiny f16 2 img1 img2 aud1 aud2
tiny-bf16 tiny bf16 2 img1 aud1
e2b-2blocks-f16 e2b f16 2 img1 aud2
LIST
echo "mtmd_ref: wrote $out ($(git -C "$tree" log -1 --format='%h %cd' --date=short))"
