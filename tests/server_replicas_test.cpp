// Two `gem4 serve` replicas behind Debian's nginx, started by scripts/replicas.sh with the config
// of deploy/nginx/: streams pass through, a conversation's `user` keeps it on one replica (whose
// prefix cache then serves its history), and a killed replica's requests go to the other.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "server_harness.h"

namespace gem4 {
namespace {

using namespace test;

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// scripts/replicas.sh in the background; stopped (SIGTERM: it stops nginx and the replicas) at the end.
class Replicas {
 public:
  Replicas(int n, const std::string& policy) : port_(free_port()) {
    log_ = "/tmp/gem4_replicas_test_" + std::to_string(getpid()) + ".log";
    const std::vector<std::string> args = {
        "bash",       std::string(GEM4_SOURCE_DIR) + "/scripts/replicas.sh",
        "--gem4",     GEM4_BINARY,
        "--model",    tiny_model(),
        "--replicas", std::to_string(n),
        "--port",     std::to_string(port_),
        "--policy",   policy,
        "--",         "-t",
        "1"};
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> argv;
      for (auto& a : const_cast<std::vector<std::string>&>(args)) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("bash", argv.data());
      _exit(127);
    }
    const auto t0 = Clock::now();
    while (seconds_since(t0) < 60) {
      const std::string log = read_file(log_);
      if (log.find("replicas: ready on") != std::string::npos) {
        ready_ = true;
        break;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    // "replicas: replica I pid PID on http://127.0.0.1:PORT"
    const std::string log = read_file(log_);
    const std::regex line(R"(replica \d+ pid (\d+) on http://127\.0\.0\.1:(\d+))");
    for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it)
      replica_pids_["127.0.0.1:" + (*it)[2].str()] = std::stoi((*it)[1].str());
  }
  ~Replicas() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      for (int i = 0; i < 300 && waitpid(pid_, &status, WNOHANG) != pid_; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::remove(log_.c_str());
  }
  bool ready() const { return ready_ && replica_pids_.size() >= 2; }
  int port() const { return port_; }
  std::string log() const { return read_file(log_); }
  const std::map<std::string, int>& replica_pids() const { return replica_pids_; }

 private:
  int port_;
  pid_t pid_ = -1;
  bool ready_ = false;
  std::string log_;
  std::map<std::string, int> replica_pids_;  // "127.0.0.1:PORT" -> pid
};

json chat(const std::string& user, const json& messages, bool stream) {
  return {{"user", user}, {"messages", messages}, {"max_tokens", 8}, {"temperature", 0}, {"stream", stream}};
}

TEST(ServerTest, ReplicasBehindNginx) {
  Replicas reps(2, "affinity");
  ASSERT_TRUE(reps.ready()) << reps.log();

  // A stream passes through nginx unbuffered and complete.
  const StreamResult s = stream_chat(reps.port(), "/v1/chat/completions",
                                     chat("stream-user", user_message("Blessed are the"), true));
  EXPECT_EQ(s.status, 200) << s.error;
  EXPECT_TRUE(s.done);
  EXPECT_FALSE(s.finish_reason.empty());

  // Each user's two turns land on one replica; the second reuses the first turn's prefix there.
  // The ring depends on the replicas' ports (random here), so 10 users may all hash to one replica
  // (a few in a thousand runs): more users are tried until both are seen, 40 at most.
  std::map<std::string, std::string> home;  // user -> upstream
  std::set<std::string> used;
  for (int u = 0; u < 40 && (u < 10 || used.size() < 2); ++u) {
    const std::string name = "user-" + std::to_string(u);
    json messages = json::array({{{"role", "system"}, {"content", "Conversation " + std::to_string(u)}},
                                 {{"role", "user"}, {"content", "In the beginning God created"}}});
    const HttpReply first = post(reps.port(), "/v1/chat/completions", chat(name, messages, false));
    ASSERT_EQ(first.status, 200) << first.body;
    messages.push_back({{"role", "assistant"}, {"content", first.js()["choices"][0]["message"]["content"]}});
    messages.push_back({{"role", "user"}, {"content", "And then?"}});
    const HttpReply second = post(reps.port(), "/v1/chat/completions", chat(name, messages, false));
    ASSERT_EQ(second.status, 200) << second.body;
    const std::string a = first.headers.at("x-gem4-upstream"), b = second.headers.at("x-gem4-upstream");
    EXPECT_EQ(a, b) << name << " moved between replicas";
    EXPECT_GT(second.js()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << second.body;
    home[name] = a;
    used.insert(a);
  }
  EXPECT_EQ(used.size(), 2u) << home.size() << " users should spread over both replicas\n" << reps.log();

  // Failover: kill one replica; its users' requests go to the other.
  const std::string victim = home["user-0"];
  ASSERT_TRUE(reps.replica_pids().count(victim)) << victim << "\n" << reps.log();
  kill(reps.replica_pids().at(victim), SIGKILL);
  for (const auto& [name, upstream] : home) {
    const HttpReply r =
        post(reps.port(), "/v1/chat/completions", chat(name, user_message("Blessed are the"), false));
    EXPECT_EQ(r.status, 200) << name << ": " << r.body;
    const std::string via = r.headers.count("x-gem4-upstream") ? r.headers.at("x-gem4-upstream") : "";
    EXPECT_NE(via.substr(via.rfind(' ') + 1), victim) << name;  // "dead, alive" when it was retried
  }
  const StreamResult after =
      stream_chat(reps.port(), "/v1/chat/completions", chat("user-0", user_message("Blessed are the"), true));
  EXPECT_TRUE(after.done) << after.error;
}

// scripts/load_test.sh: wrk for 2 s against one replica, then against two behind nginx.
TEST(ServerTest, LoadTestWithWrk) {
  const std::string out_path = "/tmp/gem4_load_test_" + std::to_string(getpid()) + ".log";
  const std::string cmd = "timeout 120 bash " + std::string(GEM4_SOURCE_DIR) +
                          "/scripts/load_test.sh --gem4 " + GEM4_BINARY + " --model " + tiny_model() +
                          " --duration 2 --connections 4 >" + out_path + " 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string out = read_file(out_path);
  std::remove(out_path.c_str());
  ASSERT_EQ(rc, 0) << out;
  int phases = 0;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("load: ", 0) != 0) continue;
    const json j = json::parse(line.substr(line.find('{')), nullptr, false);
    ASSERT_TRUE(j.is_object()) << line;
    EXPECT_GT(j["requests"].get<int>(), 0) << line;
    for (const char* k : {"connect_errors", "read_errors", "write_errors", "timeouts", "non_2xx"})
      EXPECT_EQ(j[k], 0) << k << ": " << line;
    phases++;
  }
  EXPECT_EQ(phases, 2) << out;
}

}  // namespace
}  // namespace gem4
