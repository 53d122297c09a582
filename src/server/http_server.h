// The HTTP front of `gem4 serve` (cpp-httplib): routes, API-key check, body limit, SSE streaming,
// client-disconnect detection and the drain on shutdown. Generation runs in the Scheduler.
//
// Routes:
//   POST /v1/chat/completions   POST /v1/completions   (also without the /v1 prefix)
//   GET  /v1/models   GET /health   GET /metrics (Prometheus text)
//   POST /tokenize {"content", "add_special"?, "parse_special"?, "with_pieces"?} -> {"tokens"}
//   POST /detokenize {"tokens"} -> {"content"}
//   POST /apply-template (a chat body) -> {"prompt"}: the rendered prompt
//   GET  /  (and /chat.js, /chat.css): the chat page (server/web_assets.h)
// With an API key every route except /health needs "Authorization: Bearer KEY".
//
// The server answers as soon as it is bound, before the model is loaded: until ready() GET /health
// says {"status":"loading"} with 503 (so a load balancer or a Kubernetes readiness probe waits) and
// every other route answers 503. After it, /health is 200 with the slots' state, and generation
// requests beyond --max-queue waiting ones get 429 with Retry-After.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/scheduler.h"
#include "text/tokenizer.h"

namespace gem4::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (bind() says which)
  std::string api_key;
  size_t max_body = 8u << 20;  // bytes
  int threads = 32;            // connection threads (a streaming client holds one)
  int retry_after_s = 1;       // Retry-After of a 429 (queue full) or 503 (loading)
};

class HttpServer {
 public:
  HttpServer(Metrics& metrics, HttpOptions options);
  ~HttpServer();

  // The model is loaded: from now on requests go to the scheduler. Both must outlive the server.
  void ready(Scheduler& scheduler, const text::Tokenizer& tokenizer, ServedModel model);

  int bind();             // binds the listening socket; returns the port. Throws std::runtime_error.
  void serve();           // accepts connections until stop()
  void begin_drain();     // from now on generation requests get 503; running ones finish
  int in_flight() const;  // generation requests not yet answered
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gem4::server
