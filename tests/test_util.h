// Helpers shared by the test files: where the shared test data lives, and comparisons.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace gem4::test {

// Runs a shell command: its exit status (-1 if it did not exit normally) and its standard output.
inline std::pair<int, std::string> shell(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed: " + cmd};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

#ifdef GEM4_SOURCE_DIR
// scripts/validate_json_schema.py over a JSON-lines file of {schema, output, label} cases (Debian's
// python3-jsonschema): its exit status and report ("N/N valid").
inline std::pair<int, std::string> validate_json_cases(const std::string& cases) {
  return shell("python3 " + std::string(GEM4_SOURCE_DIR) + "/scripts/validate_json_schema.py " + cases);
}
#endif

// ../shared/testdata beside the repository. Tests that need it fail (never skip) when it is missing.
inline std::string testdata(const std::string& rel) {
  const std::string p = std::string(GEM4_SOURCE_DIR) + "/../shared/testdata/" + rel;
  std::ifstream f(p, std::ios::binary);
  if (!f)
    ADD_FAILURE() << "missing test data: " << p << " (the shared/ folder must sit beside the repository)";
  return p;
}

// A file of llama.cpp's multimodal reference data (../shared/testdata/mtmd-ref/).
inline std::string mtmd(const std::string& rel) { return testdata("mtmd-ref/" + rel); }

inline std::vector<float> read_f32(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) {
    ADD_FAILURE() << "cannot read " << path;
    return {};
  }
  const auto n = size_t(f.tellg()) / sizeof(float);
  std::vector<float> v(n);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(float)));
  return v;
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  return {std::istreambuf_iterator<char>(f), {}};
}

// Normalised mean squared error: sum((a-b)^2) / sum(b^2).
inline double nmse(const float* a, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += double(a[i] - ref[i]) * (a[i] - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return den > 0 ? num / den : num;
}

inline double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

// max |a-b| / max(|b|), a scale-aware relative difference for logit rows.
inline double max_rel_diff(const float* a, const float* b, size_t n) {
  double m = 0, s = 0;
  for (size_t i = 0; i < n; ++i) {
    m = std::max(m, double(std::fabs(a[i] - b[i])));
    s = std::max(s, double(std::fabs(b[i])));
  }
  return s > 0 ? m / s : m;
}

inline bool quick_mode() { return std::getenv("GEM4_TEST_QUICK") != nullptr; }

}  // namespace gem4::test
