// gem4 serve: the OpenAI-compatible HTTP server. Loads the model, starts the engine (Scheduler) and
// the HTTP front (HttpServer), and on SIGTERM/SIGINT drains: new generation requests get 503, the
// running ones finish (up to --drain-timeout seconds), then it exits with status 0. A second signal
// stops at once. The port is bound before the model loads, so /health can say "loading" meanwhile;
// "listening on http://..." is printed once requests are served.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <stdexcept>
#include <thread>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "generate/media_prompt.h"
#include "media/audio_encoder.h"
#include "media/image.h"
#include "media/mmproj_file.h"
#include "media/vision_encoder.h"
#include "model/model.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "text/tokenizer.h"

namespace gem4::cli {

namespace {

std::string model_name_of(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0) name.resize(name.size() - 5);
  return name;
}

// Waits for SIGINT/SIGTERM (blocked in every thread, so only sigtimedwait sees them), then drains.
// A signal while the model still loads ends the process at once: nothing is in flight.
void watch_signals(server::HttpServer& http, std::atomic<bool>& quit, const std::atomic<bool>& loaded,
                   double drain_timeout_s) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  const timespec tick{0, 100 * 1000 * 1000};
  while (!quit.load()) {
    if (sigtimedwait(&set, nullptr, &tick) < 0) continue;
    if (!loaded.load()) {
      std::fprintf(stderr, "gem4 serve: signal while loading the model; exiting\n");
      std::fflush(stderr);
      _exit(0);
    }
    std::fprintf(stderr, "gem4 serve: shutting down; waiting for %d request(s) to finish\n",
                 http.in_flight());
    http.begin_drain();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(drain_timeout_s);
    while (http.in_flight() > 0 && std::chrono::steady_clock::now() < deadline && !quit.load()) {
      if (sigtimedwait(&set, nullptr, &tick) >= 0) {
        std::fprintf(stderr, "gem4 serve: second signal, stopping now\n");
        break;
      }
    }
    http.stop();
    return;
  }
}

}  // namespace

int cmd_serve(int argc, char** argv, int first) {
  Args a("serve",
         "OpenAI-compatible HTTP server (chat completions, completions, streaming, continuous batching).");
  a.value("-m,--model", "FILE", "GGUF model");
  a.value("--host", "ADDR", "address to listen on", "127.0.0.1");
  a.value("--port", "N", "TCP port (0: any free port; the chosen one is printed)", "8080");
  a.value("--parallel,-np", "N", "slots: requests generated at the same time (sequences of the KV cache)", "1");
  a.value("--ctx,-c,--ctx-size", "N", "context length of each slot (default: the model's, at most 4096)");
  a.value("--api-key", "KEY", "require 'Authorization: Bearer KEY' on every route except /health");
  a.value("--ubatch,-ub,--ubatch-size", "N", "rows per engine step: decode tokens plus one prompt chunk", "512");
  a.value("--max-body", "BYTES", "largest request body accepted", "8388608");
  a.value("--kv-type", "TYPE", "KV cache type: f32 | f16 | bf16 | q8_0", "f16");
  a.value("--max-queue", "N",
          "requests that may wait for a slot; more get 429 with Retry-After (0: no bound)", "0");
  a.value("--alias", "NAME", "model id reported to clients (default: the file name)");
  a.value("--mmproj", "FILE", "projector (mmproj) GGUF: accept image_url content parts (data: URIs)");
  a.value(media::kClampsFlag, "MODE", media::kClampsHelp, media::kClampsDefault);
  a.value("--http-threads", "N",
          "connection threads; each open connection holds one (default: 16 + 2 x --parallel)");
  a.value("--drain-timeout", "SECONDS", "on SIGTERM/SIGINT, how long running requests may take to finish",
          "30");
  a.value("--spec", "KINDS",
          "speculative decoding per slot: none, mtp, ngram, draft or a combination (mtp+ngram)", "none");
  a.value("-md,--model-draft", "FILE", "drafter: a gemma4-assistant GGUF (mtp) or a smaller gemma4 (draft)");
  a.value("--draft-max", "N", "most drafted tokens per round", "3");
  a.flag("--draft-adaptive", "tune each slot's draft length from measured acceptance and step costs");
  a.value("--cache-ram", "MIB", "memory for K/V snapshots of past prefixes (0: off)", "256");
  a.value("--prompt-cache", "DIR", "keep prompt prefixes' K/V on disk in DIR, across restarts");
  a.value("--prompt-cache-mib", "MIB", "size cap of the --prompt-cache folder", "4096");
  declare_thread_flag(a);
  declare_load_flags(a);
  declare_plan_flags(a);
  if (!a.parse(argc, argv, first)) {
    std::printf("%s", a.help().c_str());
    return 0;
  }
#ifndef GEM4_HAVE_HTTPLIB
  throw std::runtime_error(
      "serve: gem4 was built without cpp-httplib (install libcpp-httplib-dev and rebuild)");
#endif
  if (!a.has("-m")) throw ArgError("serve: -m FILE is required");
  auto int_flag = [&](const char* name, long long lo, long long hi) {
    const long long v = a.integer(name);
    if (v < lo || v > hi)
      throw ArgError("serve: " + std::string(name) + " must be between " + std::to_string(lo) + " and " +
                     std::to_string(hi));
    return v;
  };
  server::SchedulerOptions so;
  so.slots = int(int_flag("--parallel", 1, 256));
  so.ubatch = int(int_flag("--ubatch", 1, 8192));
  so.kv_type = kv_type_from_name(a.str("--kv-type"));
  so.switches = plan_switches(a);
  so.threads = thread_count(a);
  so.spec = a.str("--spec");
  so.spec_opt.draft_max = int(int_flag("--draft-max", 0, 64));
  so.spec_opt.adaptive = a.on("--draft-adaptive");
  so.prefix_store_bytes = size_t(int_flag("--cache-ram", 0, 1 << 20)) << 20;
  if (a.has("--prompt-cache")) {
    so.prompt_cache_dir = a.str("--prompt-cache");
    if (so.prompt_cache_dir.empty()) throw ArgError("serve: --prompt-cache must name a folder");
  }
  so.prompt_cache_bytes = uint64_t(int_flag("--prompt-cache-mib", 1, 1 << 24)) << 20;
  so.max_queue = int(int_flag("--max-queue", 0, 1 << 20));
  server::HttpOptions ho;
  ho.host = a.str("--host");
  ho.port = int(int_flag("--port", 0, 65535));
  ho.api_key = a.str("--api-key");
  if (a.has("--api-key") && ho.api_key.empty()) throw ArgError("serve: --api-key must not be empty");
  ho.max_body = size_t(int_flag("--max-body", 1024, 1ll << 34));
  // Streaming clients hold a thread each, but only --parallel of them generate at a time; the rest
  // wait either way. Every thread that ever served a request keeps its stack pages, so the pool is
  // sized to the slots plus room for probes and queued clients rather than made huge.
  ho.threads = a.has("--http-threads") ? int(int_flag("--http-threads", 4, 4096)) : 16 + 2 * so.slots;
  const double drain_timeout = a.number("--drain-timeout");
  if (!(drain_timeout >= 0)) throw ArgError("serve: --drain-timeout must be >= 0");

  // glibc gives every thread that allocates its own malloc arena; with one connection thread per
  // client the heap would grow with the number of threads that ever served a request. Two arenas
  // are plenty: the engine thread allocates little per step, connection threads only JSON.
  mallopt(M_ARENA_MAX, 2);

  // Signals are handled by one thread with sigtimedwait: block them before any thread starts.
  signal(SIGPIPE, SIG_IGN);  // a client that disconnects must not kill the server
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  // Bind and answer /health ("loading") before the model loads.
  server::Metrics metrics;
  server::HttpServer http(metrics, ho);
  const int port = http.bind();
  std::fprintf(stderr, "gem4 serve: bound http://%s:%d; loading %s (GET /health answers 503 until ready)\n",
               ho.host.c_str(), port, a.str("-m").c_str());
  std::fflush(stderr);
  std::atomic<bool> quit{false}, loaded{false};
  std::thread signals([&] { watch_signals(http, quit, loaded, drain_timeout); });
  std::thread front([&] { http.serve(); });
  struct Join {  // a load error must not leave the threads running
    server::HttpServer& http;
    std::atomic<bool>& quit;
    std::thread &signals, &front;
    ~Join() {
      quit = true;
      if (front.joinable()) http.stop(), front.join();
      if (signals.joinable()) signals.join();
    }
  } join{http, quit, signals, front};

  auto model = Model::load(a.str("-m"), load_options(a));
  std::fprintf(stderr, "gem4 serve: weights %s\n", model->packed_origin.c_str());
  const text::Tokenizer tokenizer = text::Tokenizer::from_gguf(*model->file, model->cache_dir);
  const int n_ctx_train = model->config.n_ctx_train > 0 ? model->config.n_ctx_train : 4096;
  so.n_ctx = a.has("--ctx") ? int(int_flag("--ctx", 2, 1 << 24)) : std::min(n_ctx_train, 4096);
  if (so.n_ctx > n_ctx_train)
    std::fprintf(stderr, "gem4 serve: warning: --ctx %d exceeds the model's training context %d\n", so.n_ctx,
                 n_ctx_train);

  server::ServedModel served;
  served.name = a.has("--alias") ? a.str("--alias") : model_name_of(a.str("-m"));
  served.n_ctx = so.n_ctx;
  served.n_vocab = int(model->weights.token_embd.out);
  // Images: each request's image_url parts are encoded in its HTTP thread (one core each), before the
  // request is queued; the encoder only reads the projector's weights, so requests may share it.
  std::unique_ptr<media::MmprojFile> mmproj;
  std::unique_ptr<media::VisionEncoder> vision;
  std::unique_ptr<media::AudioEncoder> audio;  // input_audio parts (WAV), encoded the same way
  if (a.has("--mmproj")) {
    mmproj = media::MmprojFile::open(a.str("--mmproj"));
    try {
      mmproj->set_clamp_semantics(media::parse_clamp_semantics(a.str(media::kClampsFlag)));
    } catch (const std::invalid_argument& e) {
      throw ArgError("serve: " + std::string(media::kClampsFlag) + ": " + e.what());
    }
    if (!mmproj->has_vision() && !mmproj->has_audio())
      mmproj->fail(
          "holds neither a vision nor an audio tower (gem4 serve reads image_url / input_audio with them)");
    if (mmproj->has_vision()) {
      vision = std::make_unique<media::VisionEncoder>(*mmproj);
      if (vision->n_embd_out() != model->config.d_model)
        mmproj->fail("projects to " + std::to_string(vision->n_embd_out()) +
                     " values but the model's width is " + std::to_string(model->config.d_model));
      served.encode_image = [enc = vision.get()](const std::string& bytes, const std::string& where) {
        const auto img =
            media::decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), where);
        return generate::make_media_input(true, enc->encode(img, nullptr), enc->n_embd_out());
      };
    }
    if (mmproj->has_audio()) {
      audio = std::make_unique<media::AudioEncoder>(*mmproj);
      if (audio->n_embd_out() != model->config.d_model)
        mmproj->fail("audio tower projects to " + std::to_string(audio->n_embd_out()) +
                     " values but the model's width is " + std::to_string(model->config.d_model));
      served.encode_audio = [enc = audio.get()](const std::string& bytes, const std::string& where) {
        const auto pcm =
            media::wav_to_16k_mono(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), where);
        return generate::make_media_input(false, enc->encode(pcm, nullptr), enc->n_embd_out());
      };
    }
  }

  std::unique_ptr<Model> draft_model;
  if (a.has("-md")) draft_model = Model::load(a.str("-md"), load_options(a));
  so.draft_models = {draft_model.get()};

  server::Scheduler scheduler(*model, tokenizer, so, &metrics);
  http.ready(scheduler, tokenizer, served);
  loaded = true;
  std::fprintf(stderr,
               "gem4 serve: listening on http://%s:%d (model %s, %d slot(s) x %d tokens, ubatch %d, %d "
               "compute threads, "
               "%d connection threads, speculation %s, max queue %d)\n",
               ho.host.c_str(), port, served.name.c_str(), so.slots, so.n_ctx, so.ubatch, so.threads,
               ho.threads, so.spec.c_str(), so.max_queue);
  std::fflush(stderr);

  front.join();  // until a signal stops the server
  quit = true;
  signals.join();
  scheduler.stop();
  std::fprintf(stderr, "gem4 serve: stopped\n");
  return 0;
}

}  // namespace gem4::cli
