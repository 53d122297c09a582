#include "cli/common.h"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <iterator>
#include <fstream>
#include <sstream>
#include <thread>

#include "model/packed_cache.h"

namespace gem4::cli {

void declare_plan_flags(Args& a) {
  a.flag("--no-prune", "run every prompt row through the KV-shared tail (ablation)");
  a.flag("--no-mask-crop", "score every cached key and mask afterwards (ablation)");
  a.flag("--no-ple-crop", "compute the PLE projection of tail layers for all rows (ablation)");
  a.flag("--simple-cut", "prune at the input of the first shared layer instead of inside the last KV layer");
  a.flag("--exact-gelu", "exact tanh GELU instead of llama.cpp's f16 GELU table");
  a.flag("--llama-order", "F32 weights and F32 KV in llama.cpp's summation order (its exact logits; slow)");
}

PlanSwitches plan_switches(const Args& a) {
  PlanSwitches s;
  s.prune = !a.on("--no-prune");
  s.mask_crop = !a.on("--no-mask-crop");
  s.ple_crop = !a.on("--no-ple-crop");
  s.optimal_cut = !a.on("--simple-cut");
  s.exact_gelu = a.on("--exact-gelu");
  s.llama_f32_order = a.on("--llama-order");
  return s;
}

void declare_thread_flag(Args& a) { a.value("-t,--threads", "N", "threads", "all cores"); }

int thread_count(const Args& a) {
  if (!a.has("-t")) return int(std::max(1u, std::thread::hardware_concurrency()));
  const long long n = a.integer("-t");
  if (n < 1 || n > 1024) throw ArgError("flag '-t' must be between 1 and 1024");
  return int(n);
}

void declare_load_flags(Args& a) {
  a.value("--pack-cache", "DIR|off",
          "keep the weights packed for the kernels (and the tokenizer's merge table) in DIR, so later loads "
          "map them instead of repacking (off: pack at every load)",
          "$GEM4_PACK_CACHE, else $XDG_CACHE_HOME/gem4 or ~/.cache/gem4");
  a.flag("--pack-in-memory",
         "read the packed weights from the cache file into this process's memory instead of mapping it "
         "(a copy at every load; on VMs whose page cache reads slower than fresh memory, faster decoding)");
}

LoadOptions load_options(const Args& a) {
  LoadOptions o;
  o.packed_cache_dir = default_packed_cache_dir();
  if (a.has("--pack-cache")) o.packed_cache_dir = a.str("--pack-cache") == "off" ? "" : a.str("--pack-cache");
  o.packed_in_memory = a.on("--pack-in-memory");
  return o;
}

namespace {
long long status_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) {
      std::istringstream in(line.substr(std::string(key).size()));
      long long kib = 0;
      in >> kib;
      return kib;
    }
  }
  return 0;
}
}  // namespace

long long peak_rss_bytes() { return status_kib("VmHWM:") * 1024; }
long long current_rss_bytes() { return status_kib("VmRSS:") * 1024; }

double seconds_since_process_start() {
  std::ifstream f("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // Field 22 (starttime, clock ticks after boot) counts from after the ")" that ends field 2.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream in(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && in >> field; ++i) {
  }
  timespec now;
  if (field.empty() || clock_gettime(CLOCK_BOOTTIME, &now) != 0) return -1;
  const double start = std::stod(field) / double(sysconf(_SC_CLK_TCK));
  return double(now.tv_sec) + 1e-9 * double(now.tv_nsec) - start;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

}  // namespace gem4::cli
