// --mmproj FILE, --image PATH and --audio PATH (repeatable) for gem4 run and chat: the projector is
// loaded once, each medium encoded by its tower to soft-token embeddings (media/), ready for
// generate::expand_media.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "generate/media_prompt.h"

namespace gem4 {
class ThreadPool;
}
namespace gem4::media {
enum class ClampSemantics;
class MmprojFile;
class VisionEncoder;
class AudioEncoder;
}  // namespace gem4::media

namespace gem4::cli {

void declare_media_flags(Args& a);
// --mmproj-clamps (declared by declare_media_flags, or by a command's own flags).
media::ClampSemantics clamp_semantics(const Args& a);

// The projector's towers, built on first use.
class MediaEncoders {
 public:
  MediaEncoders(const std::string& mmproj_path, media::ClampSemantics clamps, int n_embd_text);
  ~MediaEncoders();
  generate::MediaInput image(const std::string& path, ThreadPool* pool);
  generate::MediaInput audio(const std::string& path, ThreadPool* pool);

 private:
  std::unique_ptr<media::MmprojFile> file_;
  std::unique_ptr<media::VisionEncoder> vision_;
  std::unique_ptr<media::AudioEncoder> audio_;
  int n_embd_text_;
};

// The media of the command line (images first, then audio, each in the order given); null encoders
// when no --mmproj. Throws ArgError for --image/--audio without --mmproj.
std::unique_ptr<MediaEncoders> media_encoders(const Args& a, int n_embd_text);
std::vector<generate::MediaInput> media_from_flags(const Args& a, MediaEncoders* enc, ThreadPool* pool);

}  // namespace gem4::cli
