#include "bench/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace gem4::bench {

void Result::finish() {
  if (samples_ts.empty()) return;
  double s = 0;
  for (double x : samples_ts) s += x;
  avg_ts = s / samples_ts.size();
  double v = 0;
  for (double x : samples_ts) v += (x - avg_ts) * (x - avg_ts);
  stddev_ts = samples_ts.size() > 1 ? std::sqrt(v / (samples_ts.size() - 1)) : 0.0;
}

namespace {
std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
// Only the switches whose value differs between results name a variant (keeps chart labels short).
std::string variant_label(const Result& r, const std::vector<Result>& all) {
  std::string s;
  for (size_t i = 0; i < r.switches.size(); ++i) {
    bool varies = false;
    for (const auto& o : all) varies |= o.switches.size() > i && o.switches[i].second != r.switches[i].second;
    if (varies) s += (s.empty() ? "" : " ") + r.switches[i].first + "=" + r.switches[i].second;
  }
  return s;
}
}  // namespace

std::string markdown_table(const std::vector<Result>& rs) {
  std::ostringstream o;
  if (rs.empty()) return "";
  o << "| model | size | params | threads | n_ubatch |";
  for (const auto& [k, v] : rs[0].switches) o << " " << k << " |";
  o << " test | t/s | GFLOP/s |\n|---|---:|---:|---:|---:|";
  for (size_t i = 0; i < rs[0].switches.size(); ++i) o << "---:|";
  o << "---:|---:|---:|\n";
  for (const auto& r : rs) {
    o << "| " << r.model_type << " | " << fmt("%.2f GiB", r.model_size / (1024.0 * 1024 * 1024)) << " | "
      << fmt("%.2f B", r.model_params / 1e9) << " | " << r.n_threads << " | " << r.n_ubatch << " |";
    for (const auto& [k, v] : r.switches) o << " " << v << " |";
    o << " " << r.test << " | " << fmt("%.2f", r.avg_ts) << " ± " << fmt("%.2f", r.stddev_ts) << " | "
      << (r.gflops < 0 ? std::string("-") : fmt("%.1f", r.gflops)) << " |\n";
  }
  return o.str();
}

std::string json_array(const std::vector<Result>& rs) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : rs) {
    nlohmann::json j = {{"model_filename", r.model}, {"model_type", r.model_type}, {"model_size", r.model_size},
                        {"model_n_params", r.model_params}, {"n_prompt", r.n_prompt}, {"n_gen", r.n_gen},
                        {"n_depth", r.n_depth}, {"n_threads", r.n_threads}, {"n_ubatch", r.n_ubatch},
                        {"test", r.test}, {"avg_ts", r.avg_ts}, {"stddev_ts", r.stddev_ts},
                        {"samples_ts", r.samples_ts}, {"flops_per_token", r.flops_per_token},
                        {"gflops", r.gflops < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.gflops)}};
    for (const auto& [k, v] : r.switches) {
      if (v == "1" || v == "0") j[k] = (v == "1");
      else j[k] = v;
    }
    for (const auto& [k, v] : r.extra) j[k] = v;
    arr.push_back(j);
  }
  return arr.dump(2);
}

std::string speedup_lines(const std::vector<Result>& rs) {
  std::ostringstream o;
  if (rs.empty()) return "";
  // For each switch with several values: compare results that differ only in that switch.
  for (size_t si = 0; si < rs[0].switches.size(); ++si) {
    const std::string name = rs[0].switches[si].first;
    std::vector<std::string> values;
    for (const auto& r : rs)
      if (std::find(values.begin(), values.end(), r.switches[si].second) == values.end()) values.push_back(r.switches[si].second);
    if (values.size() < 2) continue;
    for (const auto& a : rs) {
      if (a.switches[si].second != values[0]) continue;
      for (const auto& b : rs) {
        if (&a == &b || b.test != a.test || b.switches[si].second == values[0]) continue;
        bool same_rest = true;
        for (size_t k = 0; k < a.switches.size(); ++k)
          if (k != si && a.switches[k].second != b.switches[k].second) same_rest = false;
        if (!same_rest || b.avg_ts <= 0 || a.avg_ts <= 0) continue;
        if (name == "spec") {  // a drafter against plain decoding (listed first)
          o << "speedup spec: " << a.test << " spec=" << b.switches[si].second << " vs spec=" << values[0] << ": "
            << fmt("%.2fx", b.avg_ts / a.avg_ts);
        } else {
          o << "speedup " << name << ": " << a.test << " " << name << "=" << values[0] << " vs " << name << "="
            << b.switches[si].second << ": " << fmt("%.2fx", a.avg_ts / b.avg_ts);
        }
        std::string rest;
        for (size_t k = 0; k < a.switches.size(); ++k)
          if (k != si) rest += (rest.empty() ? "" : ", ") + a.switches[k].first + "=" + a.switches[k].second;
        if (!rest.empty()) o << " (" << rest << ")";
        o << "\n";
      }
    }
  }
  return o.str();
}

std::string svg_chart(const std::vector<Result>& rs, const std::string& title) {
  // One horizontal bar per result, scaled to the fastest; plain SVG, no dependency.
  const int bar_h = 22, gap = 8, left = 260, width = 760, top = 40;
  double mx = 0;
  for (const auto& r : rs) mx = std::max(mx, r.avg_ts);
  if (mx <= 0) mx = 1;
  const int height = top + int(rs.size()) * (bar_h + gap) + 20;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">" << title << "</text>\n";
  const char* colors[] = {"#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#c53030", "#319795"};
  std::vector<std::string> labels;
  for (size_t i = 0; i < rs.size(); ++i) {
    const auto& r = rs[i];
    const std::string v = variant_label(r, rs);
    auto it = std::find(labels.begin(), labels.end(), v);
    const size_t ci = it == labels.end() ? (labels.push_back(v), labels.size() - 1) : size_t(it - labels.begin());
    const int y = top + int(i) * (bar_h + gap);
    const int w = std::max(1, int((width - left - 90) * r.avg_ts / mx));
    o << "<text x=\"" << left - 8 << "\" y=\"" << y + 15 << "\" text-anchor=\"end\">" << r.test << (v.empty() ? "" : "  " + v)
      << "</text>\n";
    o << "<rect x=\"" << left << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << bar_h << "\" fill=\""
      << colors[ci % 6] << "\"/>\n";
    o << "<text x=\"" << left + w + 6 << "\" y=\"" << y + 15 << "\">" << fmt("%.1f t/s", r.avg_ts) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace gem4::bench
