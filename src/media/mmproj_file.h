// A multimodal projector ("mmproj") GGUF as llama.cpp's converter writes it for Gemma 4:
// general.architecture "clip", one or both towers (clip.vision.projector_type "gemma4v",
// clip.audio.projector_type "gemma4a"; real E2B/E4B files hold both). This class only opens the file,
// says which towers it holds and hands out checked tensors; the towers (vision_encoder.h, the audio
// side) read their own hyper-parameters and weights through it. Every error is an MmprojError whose
// message starts with the file's path and names the key or tensor.
#pragma once
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/matmul.h"

namespace gem4::media {

// How the input clamps of linears that read the same tensor combine (clamped_linear.h). kIndependent:
// each linear clamps its own copy, as Gemma 4's ClippableLinear does in transformers and as llama.cpp
// does since its ggml_clamp stopped working in place (checked against de3ff81, 2026-09-28).
// kLlamaCppInPlace: the input is clamped in place, so a linear sees the input clamps of every linear
// run before it on that tensor, as in llama.cpp 3f545be (2026-08-22), which made
// ../shared/testdata/mtmd-ref. The two differ only where the clamps of such linears differ and bite.
enum class ClampSemantics { kIndependent, kLlamaCppInPlace };
// "independent" | "llamacpp-inplace"; throws std::invalid_argument naming the accepted values.
ClampSemantics parse_clamp_semantics(const std::string& s);
// The front ends' --mmproj-clamps flag: its name, default and help text.
inline constexpr const char* kClampsFlag = "--mmproj-clamps";
inline constexpr const char* kClampsDefault = "independent";
inline constexpr const char* kClampsHelp =
    "how the projector's input clamps combine: independent (transformers, llama.cpp since ~2026-09) | "
    "llamacpp-inplace (llama.cpp 3f545be's in-place ggml_clamp, as ../shared/testdata/mtmd-ref)";

class MmprojError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class MmprojFile {
 public:
  // Opens and validates the header (architecture, tower keys, projector types). Throws MmprojError.
  static std::unique_ptr<MmprojFile> open(const std::string& path);
  // The same over an already parsed GGUF (tests, fuzzing).
  static std::unique_ptr<MmprojFile> from_gguf(std::unique_ptr<gguf::GgufFile> file);

  const std::string& path() const { return file_->path(); }
  const gguf::GgufFile& gguf() const { return *file_; }

  bool has_vision() const { return !vision_type_.empty(); }
  bool has_audio() const { return !audio_type_.empty(); }
  const std::string& vision_projector() const { return vision_type_; }  // "gemma4v" or ""
  const std::string& audio_projector() const { return audio_type_; }    // "gemma4a" or ""

  // Metadata with errors naming the file and key.
  int64_t get_int(const std::string& key) const;
  int64_t get_int_or(const std::string& key, int64_t fallback) const;
  double get_float_or(const std::string& key, double fallback) const;
  std::vector<float> get_float_array_or(const std::string& key, std::vector<float> fallback) const;

  // Tensors. `ne` is the expected shape in ggml order (ne[0] contiguous; trailing 1s are ignored).
  // Each lookup marks the tensor used (check_all_used).
  const gguf::TensorInfo* find_tensor(const std::string& name) const;  // no use mark, may be null
  const gguf::TensorInfo& require(const std::string& name, const std::vector<int64_t>& ne) const;
  // A 2-D weight with `in` columns and `out` rows, of a type the kernels compute with.
  MatrixView matrix(const std::string& name, int64_t in, int64_t out) const;
  // Any shape, converted to f32 (F32, F16, BF16 or a quantized type), in file order.
  std::vector<float> floats(const std::string& name, const std::vector<int64_t>& ne) const;
  // A 1-element tensor (the clamp scalars).
  float scalar(const std::string& name) const;

  // Throws naming every tensor whose name starts with one of `prefixes` (but none of `except`) that no
  // lookup has used: a tower layout gem4 does not know must not load and give wrong embeddings.
  void check_all_used(const std::vector<std::string>& prefixes,
                      const std::vector<std::string>& except = {}) const;

  // Read by the towers when they load their linears: set it before building an encoder.
  ClampSemantics clamp_semantics() const { return clamps_; }
  void set_clamp_semantics(ClampSemantics c) { clamps_ = c; }

  [[noreturn]] void fail(const std::string& what) const;  // MmprojError("PATH: what")
  [[noreturn]] void fail_tensor(const std::string& name, const std::string& what) const;

 private:
  explicit MmprojFile(std::unique_ptr<gguf::GgufFile> f);
  void validate();
  std::unique_ptr<gguf::GgufFile> file_;
  std::string vision_type_, audio_type_;
  mutable std::set<std::string> used_;
  ClampSemantics clamps_ = ClampSemantics::kIndependent;
};

// "[16, 16, 3, 64]"
std::string shape_string(const std::vector<int64_t>& ne);

}  // namespace gem4::media
