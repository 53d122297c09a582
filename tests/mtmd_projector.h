// The projector files of ../shared/testdata/mtmd-ref, opened as llama.cpp 3f545be read them: its
// ggml_clamp worked in place, so linears sharing an input saw each other's input clamps
// (media::ClampSemantics::kLlamaCppInPlace). Every test comparing with that data opens them so; the
// CLI and server tests pass kMtmdRefClampsFlag. gem4's default (independent clamps) is checked in
// media_mmproj_test.cpp.
#pragma once
#include <memory>
#include <string>

#include "media/mmproj_file.h"
#include "test_util.h"

namespace gem4::test {

inline constexpr const char* kMtmdRefClampsFlag = "--mmproj-clamps llamacpp-inplace";

inline std::unique_ptr<media::MmprojFile> as_mtmd_ref(std::unique_ptr<media::MmprojFile> f) {
  f->set_clamp_semantics(media::ClampSemantics::kLlamaCppInPlace);
  return f;
}

// mtmd-ref/REL, e.g. "models/gemma4-tiny-vision.gguf".
inline std::unique_ptr<media::MmprojFile> open_mtmd_projector(const std::string& rel) {
  return as_mtmd_ref(media::MmprojFile::open(mtmd(rel)));
}

}  // namespace gem4::test
