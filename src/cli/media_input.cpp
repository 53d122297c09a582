#include "cli/media_input.h"

#include <chrono>
#include <cstdio>

#include "media/audio_encoder.h"
#include "media/audio_wav.h"
#include "media/image.h"
#include "media/mmproj_file.h"
#include "media/vision_encoder.h"

namespace gem4::cli {

void declare_media_flags(Args& a) {
  a.value("--mmproj", "FILE", "projector (mmproj) GGUF for --image / --audio");
  a.value("--image", "PATH", "a PNG or JPEG image for the prompt (repeatable)");
  a.value("--audio", "PATH", "a WAV file for the prompt (repeatable)");
  a.value(media::kClampsFlag, "MODE", media::kClampsHelp, media::kClampsDefault);
}

MediaEncoders::MediaEncoders(const std::string& mmproj_path, media::ClampSemantics clamps, int n_embd_text)
    : file_(media::MmprojFile::open(mmproj_path)), n_embd_text_(n_embd_text) {
  file_->set_clamp_semantics(clamps);
}

MediaEncoders::~MediaEncoders() = default;

namespace {

generate::MediaInput finish(bool image, std::vector<float> embd, int n_embd, int n_embd_text,
                            const media::MmprojFile& f) {
  if (n_embd != n_embd_text)
    f.fail("projects to " + std::to_string(n_embd) + " values per soft token but the model's width is " +
           std::to_string(n_embd_text) + " (a projector for another model?)");
  return generate::make_media_input(image, std::move(embd), n_embd);
}

}  // namespace

generate::MediaInput MediaEncoders::image(const std::string& path, ThreadPool* pool) {
  if (!vision_) {
    if (!file_->has_vision()) file_->fail("holds no vision tower, so it cannot read --image");
    vision_ = std::make_unique<media::VisionEncoder>(*file_);
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto m = finish(true, vision_->encode(media::load_image_file(path), pool), vision_->n_embd_out(),
                  n_embd_text_, *file_);
  std::fprintf(stderr, "image %s: %d soft tokens in %.3f s\n", path.c_str(), m.rows,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return m;
}

generate::MediaInput MediaEncoders::audio(const std::string& path, ThreadPool* pool) {
  if (!audio_) {
    if (!file_->has_audio()) file_->fail("holds no audio tower, so it cannot read --audio");
    audio_ = std::make_unique<media::AudioEncoder>(*file_);
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto m = finish(false, audio_->encode(media::read_wav_16k_mono(path), pool), audio_->n_embd_out(),
                  n_embd_text_, *file_);
  std::fprintf(stderr, "audio %s: %d soft tokens in %.3f s\n", path.c_str(), m.rows,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return m;
}

media::ClampSemantics clamp_semantics(const Args& a) {
  try {
    return media::parse_clamp_semantics(a.str(media::kClampsFlag));
  } catch (const std::invalid_argument& e) {
    throw ArgError(std::string(media::kClampsFlag) + ": " + e.what());
  }
}

std::unique_ptr<MediaEncoders> media_encoders(const Args& a, int n_embd_text) {
  if (!a.has("--mmproj")) {
    if (a.has("--image") || a.has("--audio")) throw ArgError("--image and --audio need --mmproj FILE");
    return nullptr;
  }
  return std::make_unique<MediaEncoders>(a.str("--mmproj"), clamp_semantics(a), n_embd_text);
}

std::vector<generate::MediaInput> media_from_flags(const Args& a, MediaEncoders* enc, ThreadPool* pool) {
  std::vector<generate::MediaInput> out;
  if (!enc) return out;
  for (const std::string& p : a.all("--image")) out.push_back(enc->image(p, pool));
  for (const std::string& p : a.all("--audio")) out.push_back(enc->audio(p, pool));
  return out;
}

}  // namespace gem4::cli
