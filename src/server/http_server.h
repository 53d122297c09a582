// The HTTP front of `gem4 serve` (cpp-httplib): routes, API-key check, body limit, SSE streaming,
// client-disconnect detection and the drain on shutdown. Generation runs in the Scheduler.
//
// Routes:
//   POST /v1/chat/completions   POST /v1/completions   (also without the /v1 prefix)
//   GET  /v1/models   GET /health   GET /metrics (Prometheus text)
//   POST /tokenize {"content", "add_special"?, "parse_special"?, "with_pieces"?} -> {"tokens"}
//   POST /detokenize {"tokens"} -> {"content"}
//   POST /apply-template (a chat body) -> {"prompt"}: the rendered prompt
// With an API key every route except /health needs "Authorization: Bearer KEY".
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
};

class HttpServer {
 public:
  HttpServer(Scheduler& scheduler, const text::Tokenizer& tokenizer, Metrics& metrics, ServedModel model,
             HttpOptions options);
  ~HttpServer();

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
