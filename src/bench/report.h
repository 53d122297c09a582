// Results of `gem4 bench` and their presentations: a llama-bench-style markdown table, a JSON array
// with llama-bench's field names, speedup lines per ablation, and a small SVG bar chart.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace gem4::bench {

struct Result {
  std::string model;       // model description (preset or file name)
  std::string model_type;  // e.g. "gemma4 E2B Q8_0"
  double model_size = 0;   // bytes
  double model_params = 0;
  std::string test;        // "pp512", "tg128", "pp512+tg128", with "@ d4096" for depth
  int n_prompt = 0, n_gen = 0, n_depth = 0, n_threads = 0, n_ubatch = 0;
  std::vector<std::pair<std::string, std::string>> switches;  // ablation name -> value ("1"/"0"/"ngram")
  std::vector<double> samples_ts;  // tokens/s of each repetition
  double avg_ts = 0, stddev_ts = 0;
  double flops_per_token = 0;      // of the plan that ran
  double gflops = 0;               // achieved; -1 when not measured (speculative rows)
  std::map<std::string, double> extra;  // e.g. roofline fractions, acceptance rate
  void finish();                   // compute avg/stddev from samples
};

std::string markdown_table(const std::vector<Result>& rs);
std::string json_array(const std::vector<Result>& rs);
// One line per ablation switch and test: "prune: pp512 1 vs 0 = 3.02x".
std::string speedup_lines(const std::vector<Result>& rs);
std::string svg_chart(const std::vector<Result>& rs, const std::string& title);

}  // namespace gem4::bench
