// `gem4 serve` under more load than it takes: the bounded queue (--max-queue, 429 + Retry-After),
// its metrics, and /health while the model loads and after.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server_harness.h"

namespace gem4 {
namespace {

using namespace test;

// The model path is a FIFO: opening it blocks until someone writes, so the server stays in
// "loading" as long as the test wants.
TEST(ServerTest, HealthSaysLoadingUntilReady) {
  const std::string fifo = "/tmp/gem4_loading_" + std::to_string(getpid()) + ".gguf";
  std::remove(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ServerProcess srv({"-m", fifo, "-t", "1"}, "bound http://");
  ASSERT_TRUE(srv.ok()) << srv.log();
  const HttpReply h = http(srv.port(), "GET", "/health");
  EXPECT_EQ(h.status, 503) << h.body;
  EXPECT_EQ(h.js()["status"], "loading") << h.body;
  EXPECT_EQ(h.headers.count("retry-after"), 1u);
  const HttpReply models = http(srv.port(), "GET", "/v1/models");
  EXPECT_EQ(models.status, 503);
  EXPECT_EQ(models.js()["error"]["code"], "model_loading") << models.body;
  const HttpReply chat = post(srv.port(), "/v1/chat/completions", {{"messages", user_message("Hi")}});
  EXPECT_EQ(chat.status, 503) << chat.body;
  const HttpReply m = http(srv.port(), "GET", "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(prometheus_value(m.body, "gem4_ready"), 0) << m.body;
  // A signal while loading ends the process at once and cleanly.
  const auto t0 = Clock::now();
  EXPECT_EQ(srv.stop(10), 0) << srv.log();
  EXPECT_LT(seconds_since(t0), 5);
  std::remove(fifo.c_str());
}

// The acceptance: 64 concurrent clients against --parallel 2 --max-queue 8. The excess gets
// 429 quickly, every accepted stream completes, /health stays responsive, RSS stays flat.
TEST(ServerTest, QueueFullGets429) {
  ServerProcess srv({"-m", tiny_model(), "-t", "1", "--parallel", "2", "--max-queue", "8"});
  ASSERT_TRUE(srv.ok());
  {
    const HttpReply h = http(srv.port(), "GET", "/health");
    ASSERT_EQ(h.status, 200);
    const json j = h.js();
    EXPECT_EQ(j["status"], "ok");
    EXPECT_EQ(j["slots_idle"], 2) << h.body;
    EXPECT_EQ(j["slots_processing"], 0) << h.body;
    EXPECT_EQ(j["max_queue"], 8) << h.body;
  }
  struct Outcome {
    int status = 0;
    bool complete = false;
    double seconds = 0;
    std::string error;
  };
  const int kClients = 64;
  std::mutex mu;
  HttpReply rejection;
  auto burst = [&](std::vector<Outcome>& out, std::vector<double>& health_s) {
    out.assign(kClients, {});
    std::atomic<int> running{kClients};
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i)
      clients.emplace_back([&, i] {
        const auto t0 = Clock::now();
        const json body = {{"messages", user_message("Tell me about the sea, " + std::to_string(i))},
                           {"max_tokens", 48},
                           {"temperature", 0},
                           {"stream", true}};
        const HttpReply r = http(srv.port(), "POST", "/v1/chat/completions", body.dump(), {}, 120);
        Outcome& o = out[i];
        o.status = r.status;
        o.seconds = seconds_since(t0);
        o.complete = !r.events.empty() && r.events.back() == "[DONE]" &&
                     r.body.find("\"finish_reason\":\"") != std::string::npos &&
                     r.body.find("\"error\"") == std::string::npos;
        o.error = r.error + " " + r.body.substr(0, 300);
        if (r.status == 429) {
          std::lock_guard<std::mutex> lock(mu);
          rejection = r;
        }
        running--;
      });
    while (running > 0) {  // /health answers while the burst runs
      const auto t0 = Clock::now();
      const HttpReply h = http(srv.port(), "GET", "/health", "", {}, 10);
      health_s.push_back(h.status == 200 ? seconds_since(t0) : 1e9);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (auto& t : clients) t.join();
  };
  std::vector<Outcome> first, second;
  std::vector<double> health_s;
  burst(first, health_s);
  const long rss_first = srv.status_kib("VmRSS");
  burst(second, health_s);
  const long rss_second = srv.status_kib("VmRSS");
  int accepted = 0, rejected = 0;
  for (const auto* run : {&first, &second})
    for (const Outcome& o : *run) {
      if (o.status == 200) {
        accepted++;
        EXPECT_TRUE(o.complete) << o.error;
      } else {
        EXPECT_EQ(o.status, 429) << o.error;
        EXPECT_LT(o.seconds, 2.0) << "a rejection must come quickly";
        rejected++;
      }
    }
  EXPECT_GE(accepted, 2 * (2 + 8)) << "the slots and the queue are used";
  EXPECT_GE(rejected, 2) << "64 clients exceed 2 slots + 8 waiting";
  std::sort(health_s.begin(), health_s.end());
  ASSERT_FALSE(health_s.empty());
  EXPECT_LT(health_s.back(), 2.0) << "/health must stay responsive (median " << health_s[health_s.size() / 2]
                                  << " s)";
  std::printf("[ info ] accepted %d, rejected %d, /health median %.3f s max %.3f s, RSS %ld -> %ld KiB\n",
              accepted, rejected, health_s[health_s.size() / 2], health_s.back(), rss_first, rss_second);
  EXPECT_LT(rss_second - rss_first, 32 * 1024)
      << "RSS grew from " << rss_first << " to " << rss_second << " KiB";

  // What a rejected client sees: 429, Retry-After, an OpenAI error body.
  ASSERT_FALSE(rejection.body.empty());
  EXPECT_EQ(rejection.headers["retry-after"], "1");
  const json e = rejection.js();
  EXPECT_EQ(e["error"]["code"], "rate_limit_exceeded") << rejection.body;
  EXPECT_EQ(e["error"]["type"], "requests") << rejection.body;
  EXPECT_TRUE(e["error"]["message"].is_string());

  const HttpReply m = http(srv.port(), "GET", "/metrics");
  const double rejected_metric = prometheus_value(m.body, "gem4_requests_rejected_total");
  EXPECT_EQ(rejected_metric, rejected) << m.body;
  EXPECT_GE(prometheus_value(m.body, "gem4_queue_wait_seconds_count"), accepted) << m.body;
  EXPECT_GT(prometheus_value(m.body, "gem4_queue_wait_seconds_sum"), 0) << m.body;
  EXPECT_EQ(prometheus_value(m.body, "gem4_queue_capacity"), 8);
  EXPECT_EQ(prometheus_value(m.body, "gem4_ready"), 1);
  EXPECT_EQ(srv.stop(), 0);
}

// A stream that waits for a slot gets no response until its job starts: a replica that dies while
// the request is queued closes the connection without answering, so nginx retries it elsewhere
// (deploy/nginx: proxy_next_upstream error ... non_idempotent).
TEST(ServerTest, QueuedStreamAnswersOnlyOnceItStarts) {
  ServerProcess srv({"-m", tiny_model(), "-t", "1", "--parallel", "1", "--ctx", "4096"});
  ASSERT_TRUE(srv.ok()) << srv.log();
  std::atomic<bool> a_started{false}, release_a{false};
  std::thread a([&] {
    json body = {{"messages", user_message("In the beginning")},
                 {"max_tokens", 3000},
                 {"temperature", 0},
                 {"logit_bias", {{"1", -100}, {"106", -100}}},
                 {"stream", true}};
    http(srv.port(), "POST", "/v1/chat/completions", body.dump(), {}, 120, [&](const std::string&) {
      a_started = true;
      return !release_a.load();  // hang up once released: the server cancels A and frees the slot
    });
  });
  const auto t0 = Clock::now();
  while (!a_started && seconds_since(t0) < 60) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(a_started) << srv.log();

  const int fd = connect_loopback(srv.port());
  ASSERT_GE(fd, 0);
  const std::string body = json{
      {"messages", user_message("And God said")},
      {"max_tokens", 4},
      {"temperature", 0},
      {"stream", true}}.dump();
  const std::string req =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), ssize_t(req.size()));
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 700), 0) << "a queued stream must not answer before it has a slot";

  release_a = true;
  std::string raw;
  char buf[4096];
  const auto t1 = Clock::now();
  while (seconds_since(t1) < 60) {
    pollfd q{fd, POLLIN, 0};
    if (poll(&q, 1, 200) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, size_t(n));
  }
  close(fd);
  a.join();
  EXPECT_EQ(raw.rfind("HTTP/1.1 200", 0), 0u) << raw.substr(0, 200);
  EXPECT_NE(raw.find("[DONE]"), std::string::npos) << raw;
  EXPECT_EQ(srv.stop(), 0);
}

}  // namespace
}  // namespace gem4
