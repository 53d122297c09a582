// The chat page of `gem4 serve` in a real browser: headless Chromium driven through chromedriver by
// tests/server_web/chat_page_test.cjs (npm selenium-webdriver, installed into the build tree on first
// use). Chromium and chromedriver are Debian's (scripts/install-deps.sh); without them the test fails.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "server_harness.h"

namespace gem4 {
namespace {

using namespace test;

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// A folder of the build tree with node_modules/<package> installed from the npm registry.
std::string npm_package_dir(const std::string& folder, const std::string& package) {
  const std::string bin = GEM4_BINARY;
  const std::string dir = bin.substr(0, bin.rfind("/bin/")) + "/" + folder;
  if (!exists(dir + "/node_modules/" + package + "/package.json")) {
    std::system(("mkdir -p " + dir).c_str());
    const std::string cmd = "timeout 300 npm install --prefix " + dir + " " + package +
                            " --no-audit --no-fund --loglevel=error >" + dir + ".log 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << "npm install " << package << " failed:\n"
                                           << read_file(dir + ".log");
  }
  return dir;
}

TEST(ServerTest, ChatPageInHeadlessChromium) {
  ASSERT_TRUE(exists("/usr/bin/chromium") && exists("/usr/bin/chromedriver"))
      << "the chat page test needs Debian's chromium and chromium-driver: run scripts/install-deps.sh";
  const std::string dir = npm_package_dir("node-selenium", "selenium-webdriver");
  ASSERT_TRUE(exists(dir + "/node_modules/selenium-webdriver/package.json"));

  // A long context so that the reply the test stops runs for seconds, not the 0.4 s that 400 tokens
  // of the tiny model take (a slow click came after its end).
  ServerProcess srv({"-m", tiny_model(), "-t", "1", "--parallel", "2", "--ctx", "8192"});
  ASSERT_TRUE(srv.ok());
  // As in ThinkingSwitchAndReasoningContent: force "<|channel>" first and ban its end and the end
  // markers, so the tiny model writes reasoning.
  const HttpReply tok = post(srv.port(), "/tokenize", {{"content", "<|channel><channel|>"}});
  ASSERT_EQ(tok.status, 200) << tok.body;
  const json ids = tok.js()["tokens"];
  ASSERT_EQ(ids.size(), 2u) << tok.body;
  const json reasoning = {{"presence_penalty", 400},
                          {"logit_bias",
                           {{std::to_string(ids[0].get<int>()), 400},
                            {std::to_string(ids[1].get<int>()), -100},
                            {"1", -100},
                            {"6", -100},
                            {"14", -100}}}};
  const std::string out_path = "/tmp/gem4_chat_page_" + std::to_string(getpid()) + ".log";
  const std::string script = std::string(GEM4_SOURCE_DIR) + "/tests/server_web/chat_page_test.cjs";
  setenv("SELENIUM_NODE_DIR", dir.c_str(), 1);
  setenv("GEM4_BASE_URL", ("http://127.0.0.1:" + std::to_string(srv.port())).c_str(), 1);
  setenv("GEM4_REASONING", reasoning.dump().c_str(), 1);
  const int rc = std::system(("timeout 120 node " + script + " > " + out_path + " 2>&1").c_str());
  const std::string out = read_file(out_path);
  std::remove(out_path.c_str());
  EXPECT_EQ(rc, 0) << out << "\nserver log:\n" << srv.log();
  EXPECT_NE(out.find("ok: the server freed the slot"), std::string::npos) << out;
  EXPECT_EQ(srv.stop(), 0);
}

}  // namespace
}  // namespace gem4
