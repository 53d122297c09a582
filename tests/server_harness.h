// The test side of `gem4 serve`: a server process on a free loopback port and a minimal HTTP/1.1
// client over a plain socket (no client library, so what a test checks is what goes over the wire).
// Every wait is bounded; a ServerProcess always stops its server.
#pragma once
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace gem4::test {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

inline std::string tiny_model() { return test::testdata("tiny-gemma4/tiny-gemma4-f32.gguf"); }

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- the server process ------------------------------------------------------------------------

class ServerProcess {
 public:
  // Waits for `ready_line` followed by host:PORT in the log: "listening on http://" (the model is
  // loaded and requests are served) or "bound http://" (the port answers; the model may still load).
  explicit ServerProcess(std::vector<std::string> args,
                         const std::string& ready_line = "listening on http://") {
    static std::atomic<int> counter{0};
    log_path_ =
        "/tmp/gem4_server_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + ".log";
    std::vector<std::string> argv = {GEM4_BINARY, "serve", "--port", "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a crashed test
      const int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv(GEM4_BINARY, cargv.data());
      _exit(127);
    }
    // Wait (bounded) for "<ready_line>127.0.0.1:PORT".
    const auto t0 = Clock::now();
    while (seconds_since(t0) < 120) {
      const std::string log = read_file(log_path_);
      const size_t at = log.find(ready_line);
      const size_t colon = at == std::string::npos ? at : log.find(':', at + ready_line.size());
      if (colon != std::string::npos && colon + 1 < log.size() && std::isdigit(uint8_t(log[colon + 1]))) {
        port_ = std::atoi(log.c_str() + colon + 1);
        return;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        ADD_FAILURE() << "gem4 serve exited before listening:\n" << log;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "gem4 serve did not start within 120 s:\n" << read_file(log_path_);
  }
  ~ServerProcess() {
    stop();
    std::remove(log_path_.c_str());
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  bool ok() const { return port_ > 0; }
  std::string log() const { return read_file(log_path_); }

  // SIGTERM, then wait up to timeout_s (SIGKILL after that). Returns the exit status, or -1.
  int stop(double timeout_s = 30) {
    if (pid_ <= 0) return exit_status_;
    kill(pid_, SIGTERM);
    return wait_exit(timeout_s);
  }
  int wait_exit(double timeout_s) {
    if (pid_ <= 0) return exit_status_;
    const auto t0 = Clock::now();
    int status = 0;
    while (seconds_since(t0) < timeout_s) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return exit_status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "gem4 serve did not exit within " << timeout_s << " s; killing it";
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return -1;
  }

  // A field of /proc/PID/status in KiB: "VmRSS" (resident set), "RssAnon" (heap, stacks, KV cache),
  // "RssFile" (mapped model pages).
  long status_kib(const std::string& key = "VmRSS") const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int port_ = -1;
  int exit_status_ = -1;
  std::string log_path_;
};

// ---- a minimal HTTP/1.1 client over a socket -----------------------------------------------------

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
  std::vector<std::string> events;             // SSE "data:" payloads, in order
  std::vector<double> event_seconds;           // arrival time of each, since the request was sent
  std::string error;                           // transport problem, empty if none
  json js() const {
    json j = json::parse(body, nullptr, false);
    return j;
  }
};

inline int connect_loopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends raw bytes and reads the reply until the server closes the connection (Connection: close),
// the timeout passes, or on_event returns false (then the client hangs up at once).
inline HttpReply raw_request(int port, const std::string& bytes, double timeout_s = 60,
                             const std::function<bool(const std::string&)>& on_event = nullptr) {
  HttpReply r;
  const int fd = connect_loopback(port);
  if (fd < 0) {
    r.error = "connect failed";
    return r;
  }
  const auto t0 = Clock::now();
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may answer (413) and close before reading everything
    sent += size_t(n);
  }
  std::string raw;
  size_t header_end = std::string::npos, pos = 0;
  bool chunked = false, sse = false, done = false;
  std::string sse_buf;
  auto parse_more = [&]() {
    if (header_end == std::string::npos) {
      header_end = raw.find("\r\n\r\n");
      if (header_end == std::string::npos) return;
      std::istringstream hs(raw.substr(0, header_end));
      std::string line;
      std::getline(hs, line);
      if (line.size() > 12) r.status = std::atoi(line.c_str() + 9);
      while (std::getline(hs, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        const size_t c = line.find(':');
        if (c == std::string::npos) continue;
        std::string name = line.substr(0, c), value = line.substr(c + 1);
        std::transform(name.begin(), name.end(), name.begin(), ::tolower);
        value.erase(0, value.find_first_not_of(' '));
        r.headers[name] = value;
      }
      chunked = r.headers["transfer-encoding"].find("chunked") != std::string::npos;
      sse = r.headers["content-type"].find("text/event-stream") != std::string::npos;
      pos = header_end + 4;
    }
    std::string fresh;
    if (chunked) {
      for (;;) {
        const size_t eol = raw.find("\r\n", pos);
        if (eol == std::string::npos) break;
        const size_t len = std::strtoul(raw.substr(pos, eol - pos).c_str(), nullptr, 16);
        if (raw.size() < eol + 2 + len + 2) break;
        if (len == 0) {
          done = true;
          pos = eol + 4;
          break;
        }
        fresh += raw.substr(eol + 2, len);
        pos = eol + 2 + len + 2;
      }
    } else {
      fresh = raw.substr(pos);
      pos = raw.size();
    }
    r.body += fresh;
    if (sse) {
      sse_buf += fresh;
      for (size_t e; (e = sse_buf.find("\n\n")) != std::string::npos;) {
        const std::string event = sse_buf.substr(0, e);
        sse_buf.erase(0, e + 2);
        if (event.rfind("data: ", 0) != 0) continue;
        r.events.push_back(event.substr(6));
        r.event_seconds.push_back(seconds_since(t0));
        if (on_event && !on_event(r.events.back())) done = true;
      }
    }
  };
  char buf[16384];
  while (!done) {
    const double left = timeout_s - seconds_since(t0);
    if (left <= 0) {
      r.error = "timeout";
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, int(std::min(left, 0.2) * 1000) + 1) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, size_t(n));
    parse_more();
  }
  if (r.status == 0 && r.error.empty()) r.error = "no HTTP response";
  close(fd);
  return r;
}

inline HttpReply http(int port, const std::string& method, const std::string& path,
                      const std::string& body = "", const std::vector<std::string>& headers = {},
                      double timeout_s = 60,
                      const std::function<bool(const std::string&)>& on_event = nullptr) {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  if (method == "POST")
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  for (const auto& h : headers) req += h + "\r\n";
  req += "\r\n" + body;
  return raw_request(port, req, timeout_s, on_event);
}

inline HttpReply post(int port, const std::string& path, const json& body, double timeout_s = 60) {
  return http(port, "POST", path, body.dump(), {}, timeout_s);
}

// A streamed chat: the concatenated content, the finish reason and the usage chunk.
struct StreamResult {
  std::string content, reasoning;
  json tool_calls = json::array();
  std::string finish_reason;
  json usage;
  bool done = false;  // saw [DONE]
  double first_token_s = -1;
  int status = 0;
  std::string error;
};

inline StreamResult stream_chat(int port, const std::string& path, json body, double timeout_s = 60) {
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  StreamResult s;
  const bool chat = path.find("chat") != std::string::npos;
  const HttpReply r = http(port, "POST", path, body.dump(), {}, timeout_s);
  s.status = r.status;
  s.error = r.error;
  for (size_t i = 0; i < r.events.size(); ++i) {
    if (r.events[i] == "[DONE]") {
      s.done = true;
      continue;
    }
    const json c = json::parse(r.events[i], nullptr, false);
    if (c.is_discarded()) {
      s.error = "bad chunk: " + r.events[i];
      continue;
    }
    if (c.contains("error")) s.error = c.dump();
    if (c.contains("usage") && !c["usage"].is_null()) s.usage = c["usage"];
    if (!c.contains("choices") || c["choices"].empty()) continue;
    const json& ch = c["choices"][0];
    std::string text;
    if (chat) {
      const json& d = ch["delta"];
      if (d.contains("content") && d["content"].is_string()) text = d["content"];
      if (d.contains("reasoning_content")) s.reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("tool_calls"))
        for (const auto& tc : d["tool_calls"]) s.tool_calls.push_back(tc);
    } else {
      text = ch["text"];
    }
    if (!text.empty() && s.first_token_s < 0) s.first_token_s = r.event_seconds[i];
    s.content += text;
    if (!ch["finish_reason"].is_null()) s.finish_reason = ch["finish_reason"];
  }
  return s;
}

// The official OpenAI Node.js client, installed by npm once into the build tree (<build>/node-openai;
// node and npm must be on PATH). Returns the folder holding node_modules/openai, or "" with `error`
// set when the install failed.
inline std::string openai_node_dir(std::string& error) {
  const std::string bin = GEM4_BINARY;
  const std::string dir = bin.substr(0, bin.rfind("/bin/")) + "/node-openai";
  struct stat st {};
  if (stat((dir + "/node_modules/openai/package.json").c_str(), &st) == 0) return dir;
  std::system(("mkdir -p " + dir).c_str());
  const std::string cmd = "timeout 300 npm install --prefix " + dir +
                          " openai --no-audit --no-fund --loglevel=error >" + dir + ".log 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    error = "npm install failed:\n" + read_file(dir + ".log");
    return "";
  }
  return dir;
}

// Base64 text of `bytes` (for data: URIs and input_audio parts).
inline std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : bytes) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(k[(acc >> bits) & 63]);
    }
  }
  if (bits > 0) out.push_back(k[(acc << (6 - bits)) & 63]);
  while (out.size() % 4) out.push_back('=');
  return out;
}

// The messages of a one-turn chat.
inline json user_message(const std::string& content) {
  return json::array({{{"role", "user"}, {"content", content}}});
}

// The value of an unlabelled sample ("name value") of a Prometheus text body; NaN when absent.
inline double prometheus_value(const std::string& body, const std::string& name) {
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(name + " ", 0) == 0) return std::strtod(line.c_str() + name.size() + 1, nullptr);
  return std::nan("");
}

}  // namespace gem4::test
