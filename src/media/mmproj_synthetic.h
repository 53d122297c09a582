// Random-weight projector (mmproj) files with both towers, as real Gemma 4 E2B/E4B mmproj files hold
// them (clip.has_vision_encoder and clip.has_audio_encoder, gemma4v + gemma4a), in the layout of
// llama.cpp's converter: what `gem4 make-model --preset e2b-mmproj` writes and `gem4 bench` measures
// when it is given no --mmproj. Presets: "e2b" and "e4b" (the real dimensions: vision 16 x 768, audio
// 12 x 1024; the text width 1536 / 2560), "tiny" (2-block towers of width 64 for fast tests).
#pragma once
#include <memory>
#include <string>

#include "media/audio_synthetic.h"
#include "media/vision_synthetic.h"

namespace gem4::gguf {
class GgufWriter;
}

namespace gem4::media {

class MmprojFile;

struct SyntheticMmproj {
  std::string name;  // general.name
  bool vision = true, audio = true;
  SyntheticVisionTower v;
  SyntheticAudioTower a;
};

// The preset's towers with matrices of `type` (F32, F16, BF16 or Q8_0: the types llama.cpp's converter
// writes projectors in) and `seed`. Throws std::invalid_argument naming an unknown preset or type.
SyntheticMmproj synthetic_mmproj_preset(const std::string& preset, GgmlType type, uint64_t seed);

// The metadata and tensors of the file (general.* and both towers' keys), bytes produced on write.
void add_synthetic_mmproj(gguf::GgufWriter& w, const SyntheticMmproj& m);
// Writes the file (streaming). Throws gguf::GgufError naming the path.
void write_synthetic_mmproj(const SyntheticMmproj& m, const std::string& path);
// The file built in memory and opened, as MmprojFile::open would open it from disk.
std::unique_ptr<MmprojFile> synthetic_mmproj_in_memory(const SyntheticMmproj& m);

}  // namespace gem4::media
