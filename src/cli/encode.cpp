// gem4 encode --mmproj FILE (--image PATH | --audio PATH) --out FILE.f32: runs one projector tower and
// writes its output embeddings (float32, row-major [n_soft_tokens, n_embd]), the rows the text model
// reads for that medium; prints {"tokens": N, "n_embd": D}. The hook the tests compare with llama.cpp.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/media_input.h"
#include "kernels/thread_pool.h"
#include "media/audio_encoder.h"
#include "media/audio_wav.h"
#include "media/image.h"
#include "media/mmproj_file.h"
#include "media/vision_encoder.h"

namespace gem4::cli {

int cmd_encode(int argc, char** argv, int first) {
  Args a("encode",
         "Runs a projector (mmproj) tower on an image or a WAV and writes the soft-token embeddings.");
  a.value("--mmproj", "FILE", "projector GGUF (gemma4v and/or gemma4a tower)");
  a.value("--image", "PATH", "PNG or JPEG image (the vision tower)");
  a.value("--audio", "PATH", "WAV file (the audio tower)");
  a.value("--out", "FILE", "where to write the embeddings: float32, row-major [tokens, n_embd]");
  a.value(media::kClampsFlag, "MODE", media::kClampsHelp, media::kClampsDefault);
  declare_thread_flag(a);
  if (!a.parse(argc, argv, first)) {
    std::printf("%s", a.help().c_str());
    return 0;
  }
  if (!a.positional().empty()) throw ArgError("encode: unexpected argument '" + a.positional()[0] + "'");
  if (!a.has("--mmproj")) throw ArgError("encode: --mmproj FILE is required");
  if (a.has("--image") == a.has("--audio"))
    throw ArgError("encode: give exactly one of --image PATH and --audio PATH");
  if (!a.has("--out")) throw ArgError("encode: --out FILE is required");

  auto file = media::MmprojFile::open(a.str("--mmproj"));
  file->set_clamp_semantics(clamp_semantics(a));
  ThreadPool pool(thread_count(a));
  std::vector<float> embd;
  int n_embd = 0;
  const auto t0 = std::chrono::steady_clock::now();
  if (a.has("--image")) {
    if (!file->has_vision())
      file->fail("holds no vision tower (clip.vision.projector_type), so it cannot encode --image");
    media::VisionEncoder enc(*file);
    embd = enc.encode(media::load_image_file(a.str("--image")), &pool);
    n_embd = enc.n_embd_out();
  } else {
    if (!file->has_audio())
      file->fail("holds no audio tower (clip.audio.projector_type), so it cannot encode --audio");
    media::AudioEncoder enc(*file);
    embd = enc.encode(media::read_wav_16k_mono(a.str("--audio")), &pool);
    n_embd = enc.n_embd_out();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string out = a.str("--out");
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  if (!f ||
      !f.write(reinterpret_cast<const char*>(embd.data()), std::streamsize(embd.size() * sizeof(float))))
    throw std::runtime_error(out + ": cannot write the embeddings");
  const nlohmann::json j = {{"tokens", n_embd ? embd.size() / size_t(n_embd) : 0}, {"n_embd", n_embd}};
  std::printf("%s\n", j.dump().c_str());
  std::fprintf(stderr, "encode: %zu soft tokens in %.3f s\n", n_embd ? embd.size() / size_t(n_embd) : 0,
               secs);
  return 0;
}

}  // namespace gem4::cli
