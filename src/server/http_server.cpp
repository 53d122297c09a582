#include "server/http_server.h"

#include <stdexcept>

#ifdef GEM4_HAVE_HTTPLIB

#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <set>
#include <thread>

#include "server/web_assets.h"
#include "text/detokenizer.h"

namespace gem4::server {

using json = nlohmann::json;

namespace {

// ---- client disconnects --------------------------------------------------------------------------
// cpp-httplib does not hand the connection's socket to handlers. We find it by its address pair
// (unique for a live TCP connection) among this process's descriptors, then poll it for a hang-up
// while the request waits on the engine, so a client that goes away frees its slot at once, even
// before the next token would have been written.

std::string address_of(const sockaddr_storage& ss, int* port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    *port = ntohs(a->sin6_port);
  } else {
    *port = -1;
  }
  return buf;
}

int find_connection_socket(const httplib::Request& req) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || fd < 0) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    if (getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    int lport = -1, pport = -1;
    const std::string laddr = address_of(local, &lport), paddr = address_of(peer, &pport);
    if (lport == req.local_port && pport == req.remote_port && paddr == req.remote_addr) {
      found = int(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

int64_t unix_now() { return int64_t(std::time(nullptr)); }

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

void send_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(dump(j), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  send_json(res, e.status, error_json(e));
}

bool is_page(const std::string& path) {
  for (const WebAsset& a : web_assets())
    if (path == a.route) return true;
  return false;
}

constexpr int kListenBacklog = 1024;  // the kernel caps it at net.core.somaxconn

const std::set<std::string> kRoutes = {"/v1/chat/completions",
                                       "/chat/completions",
                                       "/v1/completions",
                                       "/completions",
                                       "/v1/models",
                                       "/models",
                                       "/health",
                                       "/metrics",
                                       "/tokenize",
                                       "/detokenize",
                                       "/apply-template"};

// What a streaming response needs after its handler returned (the provider runs later, on the same
// connection thread).
struct StreamState {
  std::shared_ptr<Job> job;
  bool chat = true;
  bool include_usage = false;
  std::string id, model;
  int64_t created = 0;
  int fd = -1;
  bool started = false;
  bool finished = false;
  int tool_index = 0;
  std::atomic<bool> released{false};
};

}  // namespace

struct HttpServer::Impl {
  // Set once by ready(), before `loaded` turns true; read by handlers only after that.
  Scheduler* scheduler = nullptr;
  const text::Tokenizer* tokenizer = nullptr;
  ServedModel model;
  std::atomic<bool> loaded{false};
  Metrics* metrics;
  HttpOptions opt;
  httplib::Server svr;
  std::atomic<bool> draining{false};
  std::atomic<int> in_flight{0};
  std::atomic<bool> serve_returned{false};
  std::atomic<bool> stopping{false};
  int listen_fd = -1;

  Impl(Metrics& m, HttpOptions o) : metrics(&m), opt(std::move(o)) { setup(); }

  void send_error(httplib::Response& res, const ApiError& e) const {
    if (e.status == 429 || e.status == 503) res.set_header("Retry-After", std::to_string(opt.retry_after_s));
    server::send_error(res, e);
  }

  void setup() {
    const int threads = std::max(4, opt.threads);
    svr.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
    svr.set_payload_max_length(opt.max_body);
    svr.set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_fd = int(sock);
    });
    svr.set_keep_alive_timeout(2);
    svr.set_read_timeout(30);
    svr.set_write_timeout(30);

    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      // /health and the chat page's files need no key (the page asks for one and sends it itself).
      if (opt.api_key.empty() || req.path == "/health" || is_page(req.path))
        return httplib::Server::HandlerResponse::Unhandled;
      std::string key = req.get_header_value("Authorization");
      if (key.rfind("Bearer ", 0) == 0)
        key = key.substr(7);
      else if (key.empty())
        key = req.get_header_value("X-Api-Key");
      else
        key.clear();
      if (key == opt.api_key) return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, ApiError(401,
                               key.empty() ? "missing API key (send 'Authorization: Bearer KEY')"
                                           : "invalid API key",
                               "", "invalid_api_key", "authentication_error"));
      return httplib::Server::HandlerResponse::Handled;
    });
    // Errors httplib produces itself (unknown route, oversized body, malformed HTTP) get a JSON body.
    httplib::Server::HandlerWithResponse on_error = [this](const httplib::Request& req,
                                                           httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      if (res.status == 404) {
        send_error(res, ApiError(404, "no route for " + req.method + " " + req.path, "", "not_found",
                                 "not_found_error"));
      } else if (res.status == 413) {
        send_error(res, ApiError(413, "the request body exceeds " + std::to_string(opt.max_body) + " bytes",
                                 "", "request_too_large"));
      } else {
        send_error(res, ApiError(res.status, "HTTP error " + std::to_string(res.status) + " for " +
                                                 req.method + " " + req.path));
      }
      return httplib::Server::HandlerResponse::Handled;
    };
    svr.set_error_handler(on_error);
    svr.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = std::string("internal error: ") + e.what();
      } catch (...) {
      }
      send_error(res, ApiError(500, what));
    });
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics->count_request(kRoutes.count(req.path) || is_page(req.path) ? req.path : "other", res.status);
    });

    // Every route but /health and /metrics needs the model: until it is loaded they answer 503.
    auto guarded = [this](void (Impl::*fn)(const httplib::Request&, httplib::Response&)) {
      return [this, fn](const httplib::Request& req, httplib::Response& res) {
        try {
          if (!loaded && fn != &Impl::health && fn != &Impl::prometheus)
            throw ApiError(503, "the model is still loading", "", "model_loading", "unavailable_error");
          (this->*fn)(req, res);
        } catch (const ApiError& e) {
          send_error(res, e);
        } catch (const std::exception& e) {
          send_error(res, ApiError(500, std::string("internal error: ") + e.what()));
        }
      };
    };
    for (const char* p : {"/v1/chat/completions", "/chat/completions"}) svr.Post(p, guarded(&Impl::chat));
    for (const char* p : {"/v1/completions", "/completions"}) svr.Post(p, guarded(&Impl::completion));
    for (const char* p : {"/v1/models", "/models"}) svr.Get(p, guarded(&Impl::models));
    svr.Get("/health", guarded(&Impl::health));
    svr.Get("/metrics", guarded(&Impl::prometheus));
    svr.Post("/tokenize", guarded(&Impl::tokenize));
    svr.Post("/detokenize", guarded(&Impl::detokenize));
    svr.Post("/apply-template", guarded(&Impl::apply_template));
    // The chat page; it loads while the model does and waits for /v1/models.
    for (const WebAsset& a : web_assets())
      svr.Get(a.route, [a](const httplib::Request&, httplib::Response& res) {
        res.set_header("Cache-Control", "no-cache");
        res.set_content(reinterpret_cast<const char*>(a.data), a.size, a.content_type);
      });
  }

  // ---- simple routes ----

  void health(const httplib::Request&, httplib::Response& res) {
    if (!loaded) {
      res.set_header("Retry-After", std::to_string(opt.retry_after_s));
      send_json(res, 503, {{"status", "loading"}});
      return;
    }
    const SchedulerState s = scheduler->state();
    const int waiting = std::max(0, s.queued - (s.slots - s.slots_busy));
    send_json(res, draining ? 503 : 200,
              {{"status", draining ? "shutting down" : "ok"},
               {"slots_idle", s.slots - s.slots_busy},
               {"slots_processing", s.slots_busy},
               {"requests_waiting", waiting},
               {"max_queue", s.max_queue}});
  }

  void models(const httplib::Request&, httplib::Response& res) {
    send_json(res, 200,
              {{"object", "list"},
               {"data", json::array({{{"id", model.name},
                                      {"object", "model"},
                                      {"created", unix_now()},
                                      {"owned_by", "gem4"},
                                      {"meta", {{"n_ctx", model.n_ctx}, {"n_vocab", model.n_vocab}}}}})}});
  }

  void prometheus(const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    SchedulerState s;
    if (loaded)
      s = scheduler->state();
    else
      s.ready = false;
    res.set_content(metrics->prometheus(s), "text/plain; version=0.0.4; charset=utf-8");
  }

  void tokenize(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object", "", "invalid_type");
    auto flag = [&](const char* key, bool def) {
      auto it = body.find(key);
      if (it == body.end() || it->is_null()) return def;
      if (!it->is_boolean())
        throw ApiError(400, std::string("'") + key + "' must be a boolean", key, "invalid_type");
      return it->get<bool>();
    };
    auto it = body.find("content");
    if (it == body.end())
      throw ApiError(400, "'content' is required", "content", "missing_required_parameter");
    if (!it->is_string()) throw ApiError(400, "'content' must be a string", "content", "invalid_type");
    const bool add_special = flag("add_special", false), parse_special = flag("parse_special", true);
    const bool with_pieces = flag("with_pieces", false);
    const std::vector<int32_t> ids =
        tokenizer->encode(it->get<std::string>(), add_special && tokenizer->bos() >= 0, parse_special);
    json tokens = json::array();
    for (int32_t id : ids) {
      if (with_pieces)
        tokens.push_back({{"id", id}, {"piece", tokenizer->token_piece(id)}});
      else
        tokens.push_back(id);
    }
    send_json(res, 200, {{"tokens", tokens}});
  }

  void detokenize(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object", "", "invalid_type");
    auto it = body.find("tokens");
    if (it == body.end()) throw ApiError(400, "'tokens' is required", "tokens", "missing_required_parameter");
    if (!it->is_array())
      throw ApiError(400, "'tokens' must be an array of token ids", "tokens", "invalid_type");
    std::vector<int32_t> ids;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& t = (*it)[i];
      const std::string param = "tokens[" + std::to_string(i) + "]";
      if (!t.is_number_integer())
        throw ApiError(400, "'" + param + "' must be a token id", param, "invalid_type");
      const int64_t id =
          t.is_number_unsigned() && t.get<uint64_t>() > uint64_t(INT32_MAX) ? -1 : t.get<int64_t>();
      if (id < 0 || id >= model.n_vocab)
        throw ApiError(400, "token id " + t.dump() + " is outside the vocabulary", param, "invalid_value");
      ids.push_back(int32_t(id));
    }
    std::string text;
    text::append_valid_utf8(text, tokenizer->decode(ids, /*special=*/true), /*final=*/true);
    send_json(res, 200, {{"content", text}});
  }

  void apply_template(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    send_json(res, 200, {{"prompt", render_chat_prompt(body).text}});
  }

  // ---- generation ----

  void chat(const httplib::Request& req, httplib::Response& res) { generate(req, res, true); }
  void completion(const httplib::Request& req, httplib::Response& res) { generate(req, res, false); }

  void generate(const httplib::Request& req, httplib::Response& res, bool is_chat) {
    if (draining)
      throw ApiError(503, "the server is shutting down", "", "shutting_down", "unavailable_error");
    const json body = parse_body(req.body);
    const nlohmann::ordered_json ordered = parse_body_ordered(req.body);
    ApiRequest ar = is_chat ? parse_chat_request(body, ordered, *tokenizer, model)
                            : parse_completion_request(body, ordered, *tokenizer, model);
    // Reject sampling settings the sampler refuses before the request takes a slot.
    try {
      generate::Sampler check(ar.gen.sampling);
    } catch (const std::invalid_argument& e) {
      throw ApiError(400, e.what());
    }
    auto job = std::make_shared<Job>(std::move(ar.gen));
    const std::string id = new_response_id(is_chat ? "chatcmpl-" : "cmpl-");
    const int64_t created = unix_now();
    const int fd = find_connection_socket(req);
    in_flight++;
    if (!scheduler->try_submit(job)) {
      in_flight--;
      throw ApiError(429,
                     "the server is busy: " + std::to_string(scheduler->max_queue()) +
                         " requests already wait for a slot; retry later",
                     "", "rate_limit_exceeded", "requests");
    }
    if (ar.stream) {
      stream(res, job, is_chat, ar.include_usage, id, created, fd);
      return;
    }
    struct Done {
      std::atomic<int>& n;
      ~Done() { n--; }
    } done{in_flight};
    text::OutputDelta all;
    for (;;) {
      for (GenerationEvent& e : job->take(std::chrono::milliseconds(50))) {
        if (e.kind == GenerationEvent::Kind::kDelta) {
          all.reasoning += e.delta.reasoning;
          all.content += e.delta.content;
          for (auto& c : e.delta.tool_calls) all.tool_calls.push_back(std::move(c));
        } else if (e.kind == GenerationEvent::Kind::kDone) {
          if (e.finish == FinishReason::kError) throw ApiError(500, "generation failed: " + e.error);
          if (e.finish == FinishReason::kCancelled) throw ApiError(500, "generation was cancelled");
          send_json(res, 200,
                    is_chat ? chat_completion(id, created, model.name, all, e.finish, e.usage)
                            : text_completion(id, created, model.name, all.content, e.finish, e.usage));
          return;
        }
      }
      if (peer_closed(fd)) {
        job->cancel();  // nobody will read the answer
        res.status = 499;
        return;
      }
      if (stopping) {  // the drain timed out
        job->cancel();
        throw ApiError(503, "the server is shutting down", "", "shutting_down", "unavailable_error");
      }
    }
  }

  void stream(httplib::Response& res, std::shared_ptr<Job> job, bool is_chat, bool include_usage,
              const std::string& id, int64_t created, int fd) {
    // The response (status and headers) starts with the job's first event (prompt progress or the
    // first token), not when the request is queued: a replica that dies while the request waits for
    // a slot closes the connection before answering, so a proxy in front retries it elsewhere.
    while (!job->wait_for_event(std::chrono::milliseconds(50))) {
      if (peer_closed(fd) || stopping) {
        job->cancel();
        in_flight--;
        if (stopping)
          throw ApiError(503, "the server is shutting down", "", "shutting_down", "unavailable_error");
        res.status = 499;
        return;
      }
    }
    auto st = std::make_shared<StreamState>();
    st->job = std::move(job);
    st->chat = is_chat;
    st->include_usage = include_usage;
    st->id = id;
    st->model = model.name;
    st->created = created;
    st->fd = fd;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, st](size_t, httplib::DataSink& sink) {
          std::string out;
          if (!st->started) {
            st->started = true;
            if (st->chat)
              out += sse(chat_chunk(st->id, st->created, st->model, {{"role", "assistant"}, {"content", ""}},
                                    nullptr));
          }
          const auto events = st->job->take(std::chrono::milliseconds(50));
          for (const GenerationEvent& e : events) out += format_event(*st, e);
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            st->job->cancel();
            return false;
          }
          if (st->finished) {
            sink.done();
            return true;
          }
          if (events.empty() && peer_closed(st->fd)) {
            st->job->cancel();
            return false;
          }
          return true;
        },
        [this, st](bool) {
          st->job->cancel();  // no effect once it finished; frees the slot if the client went away
          if (!st->released.exchange(true)) in_flight--;
        });
  }

  std::string format_event(StreamState& st, const GenerationEvent& e) {
    const char* object = st.chat ? "chat.completion.chunk" : "text_completion";
    std::string out;
    switch (e.kind) {
      case GenerationEvent::Kind::kDelta:
        if (st.chat) {
          for (json& d : chat_deltas(e.delta, &st.tool_index))
            out += sse(chat_chunk(st.id, st.created, st.model, std::move(d), nullptr));
        } else if (!e.delta.content.empty()) {
          out += sse(text_completion_chunk(st.id, st.created, st.model, e.delta.content, nullptr));
        }
        break;
      case GenerationEvent::Kind::kProgress:
        out += sse(progress_chunk(st.id, st.created, st.model, object, e));
        break;
      case GenerationEvent::Kind::kDone:
        st.finished = true;
        if (e.finish == FinishReason::kError || e.finish == FinishReason::kCancelled) {
          out += sse(
              error_json(ApiError(500, "generation failed: " + (e.error.empty() ? "cancelled" : e.error))));
        } else {
          const char* reason = finish_reason_name(e.finish);
          out += sse(st.chat ? chat_chunk(st.id, st.created, st.model, json::object(), reason)
                             : text_completion_chunk(st.id, st.created, st.model, "", reason));
          if (st.include_usage) out += sse(usage_chunk(st.id, st.created, st.model, object, e.usage));
        }
        out += "data: [DONE]\n\n";
        break;
    }
    return out;
  }
};

HttpServer::HttpServer(Metrics& metrics, HttpOptions options)
    : impl_(std::make_unique<Impl>(metrics, std::move(options))) {}

void HttpServer::ready(Scheduler& scheduler, const text::Tokenizer& tokenizer, ServedModel model) {
  impl_->scheduler = &scheduler;
  impl_->tokenizer = &tokenizer;
  impl_->model = std::move(model);
  impl_->loaded = true;
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  const auto& o = impl_->opt;
  int port = o.port;
  if (o.port == 0) {
    port = impl_->svr.bind_to_any_port(o.host);
    if (port <= 0) throw std::runtime_error("serve: cannot bind " + o.host + " to a free port");
  } else if (!impl_->svr.bind_to_port(o.host, o.port)) {
    throw std::runtime_error("serve: cannot bind " + o.host + ":" + std::to_string(o.port) +
                             " (address in use, or not an address of this machine?)");
  }
  // cpp-httplib listens with a backlog of 5: a burst of clients beyond that waits a SYN retransmit
  // (1 s) before it is even accepted, which is no way to answer 429 "quickly". listen() again on the
  // bound socket only raises the backlog.
  if (impl_->listen_fd >= 0) ::listen(impl_->listen_fd, kListenBacklog);
  return port;
}

void HttpServer::serve() {
  impl_->svr.listen_after_bind();
  impl_->serve_returned = true;
}
void HttpServer::begin_drain() { impl_->draining = true; }
int HttpServer::in_flight() const { return impl_->in_flight.load(); }
void HttpServer::stop() {
  // httplib's stop() does nothing until the accept loop runs: a signal that arrives right after
  // bind() must wait for serve() to get there.
  impl_->stopping = true;
  while (!impl_->svr.is_running() && !impl_->serve_returned)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->svr.stop();
}

}  // namespace gem4::server

#else  // !GEM4_HAVE_HTTPLIB

namespace gem4::server {

struct HttpServer::Impl {};

HttpServer::HttpServer(Metrics&, HttpOptions) {}
void HttpServer::ready(Scheduler&, const text::Tokenizer&, ServedModel) {}
HttpServer::~HttpServer() = default;
int HttpServer::bind() {
  throw std::runtime_error("serve: gem4 was built without cpp-httplib (install libcpp-httplib-dev)");
}
void HttpServer::serve() {}
void HttpServer::begin_drain() {}
int HttpServer::in_flight() const { return 0; }
void HttpServer::stop() {}

}  // namespace gem4::server

#endif
