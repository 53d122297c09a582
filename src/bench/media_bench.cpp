#include "bench/media_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/args.h"
#include "cli/common.h"
#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"
#include "media/audio_encoder.h"
#include "media/audio_wav.h"
#include "media/image.h"
#include "media/mmproj_file.h"
#include "media/mmproj_synthetic.h"
#include "media/vision_encoder.h"

namespace gem4::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One row: a tower, an input, the repetitions' timings.
struct MediaRow {
  std::string tower;         // "gemma4v 16x768 F16"
  double params = 0;         // the tower's parameters (its v.*/mm.* or a.*/mm.a.* tensors)
  double bytes = 0;          // and their bytes
  std::string test;          // "image 960x672", "audio 10.0 s"
  std::string unit;          // "images/s", "audio s/s"
  int64_t tokens = 0;        // soft tokens per item
  double work = 0;           // items (1 image) or audio seconds per repetition
  std::vector<double> secs;  // per repetition
  double mean(const std::vector<double>& v) const {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / double(v.size());
  }
  double stddev(const std::vector<double>& v) const {
    if (v.size() < 2) return 0;
    const double m = mean(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / double(v.size() - 1));
  }
  std::vector<double> rates() const {
    std::vector<double> r;
    for (double s : secs) r.push_back(s > 0 ? work / s : 0);
    return r;
  }
};

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// "gemma4v 16x768 F16": the tower's shape and the type of most of its matrix parameters.
MediaRow tower_row(const media::MmprojFile& f, const std::string& kind, int n_layer, int n_embd,
                   const std::vector<std::string>& prefixes, const std::vector<std::string>& except) {
  MediaRow r;
  std::map<std::string, int64_t> by_type;
  for (const auto& t : f.gguf().tensors()) {
    const auto starts = [&](const std::string& p) { return t.name.compare(0, p.size(), p) == 0; };
    if (!std::any_of(prefixes.begin(), prefixes.end(), starts) ||
        std::any_of(except.begin(), except.end(), starts))
      continue;
    r.params += double(t.n_elements());
    r.bytes += double(t.nbytes);
    if (t.ne.size() >= 2) by_type[ggml_type_name(t.type)] += t.n_elements();
  }
  std::string type;
  int64_t most = -1;
  for (const auto& [name, n] : by_type)
    if (n > most) most = n, type = name;
  std::transform(type.begin(), type.end(), type.begin(), ::toupper);
  r.tower = kind + " " + std::to_string(n_layer) + "x" + std::to_string(n_embd) + " " + type;
  return r;
}

// A deterministic test picture: smooth gradients with some texture (the values do not change the
// work; a flat image would do as well, but this one is no special case for anything).
media::RgbImage test_image(int w, int h) {
  media::RgbImage img;
  img.width = w, img.height = h;
  img.rgb.resize(size_t(w) * h * 3);
  uint32_t s = 12345;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      s = s * 1664525u + 1013904223u;
      uint8_t* p = &img.rgb[(size_t(y) * w + x) * 3];
      p[0] = uint8_t((x * 255) / std::max(1, w - 1));
      p[1] = uint8_t((y * 255) / std::max(1, h - 1));
      p[2] = uint8_t(((x ^ y) & 0x3f) * 2 + (s >> 28));
    }
  return img;
}

// A clip of `seconds` at 16 kHz: a slow chirp (as the encoder tests use).
std::vector<float> test_clip(double seconds) {
  std::vector<float> pcm(size_t(std::llround(seconds * double(media::kMelSampleRate))));
  for (size_t i = 0; i < pcm.size(); ++i)
    pcm[i] = 0.3f * float(std::sin(0.013 * double(i) * (1 + double(i) / 5e5)));
  return pcm;
}

void parse_size(const std::string& s, int* w, int* h) {
  const size_t x = s.find('x');
  try {
    if (x == std::string::npos) throw std::invalid_argument("no x");
    size_t n1 = 0, n2 = 0;
    *w = std::stoi(s.substr(0, x), &n1);
    *h = std::stoi(s.substr(x + 1), &n2);
    if (n1 != x || n2 != s.size() - x - 1) throw std::invalid_argument("junk");
  } catch (const std::exception&) {
    throw ArgError("bench: --image-size '" + s + "' is not WIDTHxHEIGHT (e.g. 960x672)");
  }
  if (*w < 1 || *h < 1 || *w > media::kMaxImageSide || *h > media::kMaxImageSide)
    throw ArgError("bench: --image-size " + s + ": each side must be 1.." +
                   std::to_string(media::kMaxImageSide));
}

std::string markdown(const std::vector<MediaRow>& rows, const std::string& projector, int threads) {
  std::ostringstream o;
  o << "| projector | tower | size | params | threads | test | soft tokens | ms per item | rate |\n"
    << "|---|---|---:|---:|---:|---|---:|---:|---:|\n";
  for (const auto& r : rows) {
    const auto rates = r.rates();
    std::vector<double> ms;
    for (double s : r.secs) ms.push_back(s * 1e3);
    o << "| " << projector << " | " << r.tower << " | " << human_bytes(r.bytes) << " | "
      << fmt("%.1f M", r.params / 1e6) << " | " << threads << " | " << r.test << " | " << r.tokens << " | "
      << fmt("%.0f", r.mean(ms)) << " ± " << fmt("%.0f", r.stddev(ms)) << " | " << fmt("%.3f", r.mean(rates))
      << " ± " << fmt("%.3f", r.stddev(rates)) << " " << r.unit << " |\n";
  }
  return o.str();
}

std::string json(const std::vector<MediaRow>& rows, const std::string& projector, int threads) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : rows) {
    const auto rates = r.rates();
    arr.push_back({{"model_filename", projector},
                   {"model_type", r.tower},
                   {"model_size", r.bytes},
                   {"model_n_params", r.params},
                   {"n_threads", threads},
                   {"test", r.test},
                   {"n_soft_tokens", r.tokens},
                   {"unit", r.unit},
                   {"avg_rate", r.mean(rates)},
                   {"stddev_rate", r.stddev(rates)},
                   {"samples_rate", rates},
                   {"samples_s", r.secs}});
  }
  return arr.dump(2);
}

}  // namespace

void declare_media_bench_flags(Args& a) {
  a.value("--mmproj", "FILE",
          "projector rows: time this projector (mmproj) GGUF's towers instead of a text model");
  a.value("--mmproj-preset", "NAME", "projector rows without --mmproj: generate e2b | e4b | tiny in memory",
          "e2b");
  a.value("--mmproj-type", "TYPE", "matrix type of the generated projector: f16 | bf16 | f32 | q8_0", "f16");
  a.value("--image", "FILE", "projector rows: encode this PNG/JPEG (decoding is not timed)");
  a.value("--image-size", "WxH",
          "projector rows: encode a generated image of this size (960x672: 280 tokens)");
  a.value("--audio", "FILE", "projector rows: encode this WAV (reading and resampling are not timed)");
  a.value("--audio-seconds", "S", "projector rows: encode a generated clip of S seconds (default 10)");
}

bool media_bench_requested(const Args& a) {
  for (const char* f : {"--mmproj", "--mmproj-preset", "--mmproj-type", "--image", "--image-size", "--audio",
                        "--audio-seconds"})
    if (a.has(f)) return true;
  return false;
}

int run_media_bench(const Args& a, int n_threads) {
  const int reps = int(a.integer("-r"));
  if (reps < 1) throw ArgError("bench: -r must be >= 1");
  const std::string out_fmt = a.str("-o");
  if (out_fmt != "md" && out_fmt != "json") throw ArgError("bench: -o must be md or json");
  if (a.has("--image") && a.has("--image-size"))
    throw ArgError("bench: give --image or --image-size, not both");
  if (a.has("--audio") && a.has("--audio-seconds"))
    throw ArgError("bench: give --audio or --audio-seconds, not both");
  // Which towers: the ones an input is given for, or (none given) every tower the projector has.
  const bool any_input =
      a.has("--image") || a.has("--image-size") || a.has("--audio") || a.has("--audio-seconds");
  const bool want_image = !any_input || a.has("--image") || a.has("--image-size");
  const bool want_audio = !any_input || a.has("--audio") || a.has("--audio-seconds");
  double audio_seconds = 10.0;
  if (a.has("--audio-seconds")) {
    audio_seconds = a.number("--audio-seconds");
    if (!(audio_seconds >= 0.05 && audio_seconds <= media::kWavMaxSeconds))
      throw ArgError("bench: --audio-seconds must be between 0.05 and 3600");
  }
  int img_w = 960, img_h = 672;
  if (a.has("--image-size")) parse_size(a.str("--image-size"), &img_w, &img_h);
  // The inputs first: a bad path fails before a projector is generated.
  media::RgbImage image;
  std::string image_test;
  if (want_image) {
    image = a.has("--image") ? media::load_image_file(a.str("--image")) : test_image(img_w, img_h);
    image_test = "image " + std::to_string(image.width) + "x" + std::to_string(image.height);
  }
  std::vector<float> clip;
  if (want_audio)
    clip = a.has("--audio") ? media::read_wav_16k_mono(a.str("--audio")) : test_clip(audio_seconds);

  ThreadPool pool(n_threads);
  const auto t_load = Clock::now();
  std::unique_ptr<media::MmprojFile> file;
  std::string projector;
  if (a.has("--mmproj")) {
    projector = a.str("--mmproj");
    file = media::MmprojFile::open(projector);
  } else {
    const auto type = ggml_type_from_name(a.str("--mmproj-type"));
    if (!type) throw ArgError("bench: --mmproj-type '" + a.str("--mmproj-type") + "' is not a GGML type");
    media::SyntheticMmproj spec;
    try {
      spec = media::synthetic_mmproj_preset(a.str("--mmproj-preset"), *type, uint64_t(a.integer("--seed")));
    } catch (const std::invalid_argument& e) {
      throw ArgError(std::string("bench: ") + e.what());
    }
    projector = "generated:" + a.str("--mmproj-preset") + "-mmproj";
    std::fprintf(stderr, "bench: generating a random %s projector (vision + audio, %s) in memory...\n",
                 a.str("--mmproj-preset").c_str(), ggml_type_name(*type));
    file = media::synthetic_mmproj_in_memory(spec);
  }
  if (want_image && !file->has_vision()) {
    if (a.has("--image") || a.has("--image-size"))
      file->fail("holds no vision tower, so bench cannot encode an image");
  }
  if (want_audio && !file->has_audio()) {
    if (a.has("--audio") || a.has("--audio-seconds"))
      file->fail("holds no audio tower, so bench cannot encode audio");
  }
  std::unique_ptr<media::VisionEncoder> vision;
  std::unique_ptr<media::AudioEncoder> audio;
  if (want_image && file->has_vision()) vision = std::make_unique<media::VisionEncoder>(*file);
  if (want_audio && file->has_audio()) audio = std::make_unique<media::AudioEncoder>(*file);
  std::fprintf(stderr, "bench: projector %s ready in %.1f s; %d threads, ISA %s\n", projector.c_str(),
               seconds_since(t_load), n_threads, isa_name(active_isa()));

  std::vector<MediaRow> rows;
  if (vision) {
    const auto& hp = vision->hparams();
    MediaRow r = tower_row(*file, "gemma4v", hp.n_layer, hp.n_embd, {"v.", "mm."}, {"mm.a."});
    r.test = image_test, r.unit = "images/s", r.work = 1;
    r.tokens = vision->n_tokens(image.width, image.height);
    const media::ImageSize t = vision->target_size(image.width, image.height);
    if (t.width != image.width || t.height != image.height)
      r.test += " -> " + std::to_string(t.width) + "x" + std::to_string(t.height);
    // Untimed warm-up: the smallest image (the minimum token count) touches every weight once.
    vision->encode(test_image(hp.align(), hp.align()), &pool);
    for (int rep = 0; rep < reps; ++rep) {
      const auto t0 = Clock::now();
      const std::vector<float> embd = vision->encode(image, &pool);
      r.secs.push_back(seconds_since(t0));
      if (int64_t(embd.size()) != r.tokens * vision->n_embd_out())
        throw std::runtime_error("bench: the vision tower gave an unexpected number of rows");
      std::fprintf(stderr, "bench: [%d/%d] %s: %.0f ms (%zu soft tokens)\n", rep + 1, reps, r.test.c_str(),
                   r.secs.back() * 1e3, size_t(r.tokens));
    }
    rows.push_back(r);
  }
  if (audio) {
    const auto& hp = audio->hparams();
    MediaRow r = tower_row(*file, "gemma4a", hp.n_layer, hp.n_embd, {"a.", "mm.a."}, {});
    r.work = double(clip.size()) / double(media::kMelSampleRate);
    r.test = "audio " + fmt("%.1f", r.work) + " s", r.unit = "audio s/s";
    r.tokens = audio->n_tokens(clip);
    audio->encode(test_clip(1.0), &pool);  // untimed warm-up
    for (int rep = 0; rep < reps; ++rep) {
      const auto t0 = Clock::now();
      const std::vector<float> embd = audio->encode(clip, &pool);
      r.secs.push_back(seconds_since(t0));
      if (int64_t(embd.size()) != r.tokens * audio->n_embd_out())
        throw std::runtime_error("bench: the audio tower gave an unexpected number of rows");
      std::fprintf(stderr, "bench: [%d/%d] %s: %.0f ms (%zu soft tokens)\n", rep + 1, reps, r.test.c_str(),
                   r.secs.back() * 1e3, size_t(r.tokens));
    }
    rows.push_back(r);
  }
  if (rows.empty()) file->fail("has no tower for the inputs given");
  if (out_fmt == "json")
    std::printf("%s\n", json(rows, projector, n_threads).c_str());
  else
    std::printf("%s", markdown(rows, projector, n_threads).c_str());
  return 0;
}

}  // namespace gem4::cli
