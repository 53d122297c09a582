// Matrix-product kernel benchmarks (Google Benchmark) on Gemma 4 E2B / E4B shapes.
//   gem4_kernel_bench                                  # everything, about 1-2 minutes
//   gem4_kernel_bench --benchmark_filter='q8_0/.*rows:512'
// Counters: GMAC/s (multiply-accumulates) and GB/s (weight bytes read), both per wall-clock second.
// For rows = 1 the weights are cycled through enough copies (>= 512 MiB) that they come from DRAM,
// not the last-level cache. Threads: a 2-thread pool (the target machines have 2 cores); "threads:1"
// runs use pool == nullptr. GMAC/cpu_s divides by the process CPU time instead: throughput per core
// actually received, which stays meaningful on a shared, busy machine (it includes the pool's
// spin-waiting, so it understates short calls).
#include <benchmark/benchmark.h>
#include <time.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/packed_matrix.h"
#include "kernels/peaks.h"
#include "kernels/thread_pool.h"
#include "tensor/quant.h"

namespace gem4 {
namespace {

// Weights made from 64 distinct quantized rows tiled to the full height: realistic bytes without
// quantizing millions of rows at startup. `copies` identical matrices, to defeat the caches.
struct BenchWeights {
  GgmlType type;
  int64_t out, in;
  size_t row_bytes, matrix_bytes;
  int copies;
  std::vector<uint8_t> data;
  std::unique_ptr<PackedStore> store;   // packed copies (Q8_0, Q4_0 with AVX-512), made on first use
  std::vector<MatrixView> packed_views;
  MatrixView view(int copy) const {
    return {type, data.data() + static_cast<size_t>(copy) * matrix_bytes, in, out, row_bytes};
  }
  // The copy as the model uses it after loading: with its packed layout (load-time repacking).
  MatrixView packed_view(int copy) {
    if (!store) {
      store = std::make_unique<PackedStore>();
      for (int c = 0; c < copies; ++c) packed_views.push_back(store->add(view(c), nullptr));
    }
    return packed_views[copy];
  }
};

std::unique_ptr<BenchWeights> make_weights(GgmlType t, int64_t out, int64_t in, bool beat_cache) {
  auto w = std::make_unique<BenchWeights>();
  w->type = t;
  w->out = out;
  w->in = in;
  w->row_bytes = ggml_row_bytes(t, in);
  w->matrix_bytes = w->row_bytes * out;
  const size_t min_total = size_t{512} << 20;
  w->copies =
      beat_cache
          ? static_cast<int>(std::min<size_t>(256, (min_total + w->matrix_bytes - 1) / w->matrix_bytes))
          : 1;
  w->data.resize(w->matrix_bytes * w->copies);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(in);
  std::vector<uint8_t> distinct(64 * w->row_bytes);
  for (int i = 0; i < 64; ++i) {
    for (float& v : row) v = normal(rng) * 0.05f;
    quantize_row(t, row.data(), distinct.data() + i * w->row_bytes, in);
  }
  for (size_t o = 0; o < static_cast<size_t>(out) * w->copies; ++o) {
    std::copy_n(distinct.data() + (o % 64) * w->row_bytes, w->row_bytes, w->data.data() + o * w->row_bytes);
  }
  return w;
}

BenchWeights& weights(GgmlType t, int64_t out, int64_t in, bool beat_cache) {
  // Keep only the latest matrix: the large ones are hundreds of MB.
  static std::unique_ptr<BenchWeights> cached;
  if (cached && cached->type == t && cached->out == out && cached->in == in &&
      (cached->copies > 1 || !beat_cache)) {
    return *cached;
  }
  cached.reset();
  cached = make_weights(t, out, in, beat_cache);
  return *cached;
}

double process_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

ThreadPool& pool2() {
  static ThreadPool pool(2);
  return pool;
}

void BM_Matmul(benchmark::State& state, GgmlType type, int64_t in, int64_t out, int64_t rows, int threads,
               bool packed, Bf16Dot bf16_dot) {
  struct DotMode {
    explicit DotMode(Bf16Dot m) { set_bf16_dot(m); }
    ~DotMode() { set_bf16_dot(Bf16Dot::Auto); }
  } dot_mode(bf16_dot);
  const bool gemv = rows <= 16;  // decode and small batches: weights from DRAM
  BenchWeights& w = weights(type, out, in, gemv);
  if (packed) w.packed_view(0);
  std::vector<float> x(rows * in), y(rows * out);
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  ThreadPool* pool = threads > 1 ? &pool2() : nullptr;
  int copy = 0;
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    matmul(packed ? w.packed_views[copy] : w.view(copy), x.data(), rows, in, y.data(), out, pool);
    benchmark::DoNotOptimize(y.data());
    copy = (copy + 1) % w.copies;
  }
  const double cpu_seconds = process_cpu_seconds() - cpu0;
  const double macs = static_cast<double>(rows) * in * out;
  // On a shared machine wall time includes time other processes held our cores; CPU time does not.
  // GMAC/cpu_s is the work per second of CPU actually received (per core, summed over threads).
  state.counters["GMAC/cpu_s"] = macs * 1e-9 * static_cast<double>(state.iterations()) / cpu_seconds;
  // Weight bytes per CPU-second per core (threads x CPU-bound-wall): the decode figure of merit.
  state.counters["GB/cpu_s"] = static_cast<double>(w.matrix_bytes) * 1e-9 * static_cast<double>(state.iterations()) *
                               threads / cpu_seconds;
  state.counters["GMAC/s"] = benchmark::Counter(macs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.matrix_bytes) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(isa_name(active_isa())) + (packed && w.packed_views[0].packed ? " packed" : "") +
                 (type == GgmlType::BF16 && bf16_dot_active() ? " vdpbf16ps" : ""));
}

// The decode kernel's own speed: one packed 512 x 1024 matrix (288-544 KiB, inside the L2 of the
// target cores) against one activation row on one thread, so no DRAM and no pool. GB/s of weights:
// how much arithmetic headroom the GEMV has over the memory it streams in decode.
void BM_GemvInCache(benchmark::State& state, GgmlType type) {
  constexpr int64_t in = 1024, out = 512;
  auto w = make_weights(type, out, in, false);
  const MatrixView v = w->packed_view(0);
  std::vector<float> x(in, 0.25f), y(out);
  for (auto _ : state) {
    matmul(v, x.data(), 1, in, y.data(), out, nullptr);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter(double(w->matrix_bytes) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(isa_name(active_isa())) + (v.packed ? " packed" : ""));
}

// Products that share their input (k, v and q of a layer; gate and up), packed as after loading:
// one matmul_shared_input call, or one matmul call each. GMAC/s counts all the products.
void BM_SharedInput(benchmark::State& state, GgmlType type, int64_t in, std::vector<int64_t> outs, int64_t rows,
                    bool shared) {
  std::vector<std::unique_ptr<BenchWeights>> ws;
  std::vector<std::vector<float>> ys;
  std::vector<MatmulTarget> targets;
  double macs = 0;
  for (int64_t out : outs) {
    ws.push_back(make_weights(type, out, in, false));
    ys.emplace_back(rows * out);
    targets.push_back({ws.back()->packed_view(0), ys.back().data(), out});
    macs += double(rows) * double(in) * double(out);
  }
  std::vector<float> x(rows * in);
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  for (auto _ : state) {
    if (shared) {
      matmul_shared_input(targets.data(), int(targets.size()), x.data(), rows, in, &pool2());
    } else {
      for (const MatmulTarget& t : targets) matmul(t.w, x.data(), rows, in, t.y, t.ldy, &pool2());
    }
    benchmark::DoNotOptimize(ys.data());
  }
  state.counters["GMAC/s"] = benchmark::Counter(macs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(isa_name(active_isa())) + (targets[0].w.packed ? " packed" : ""));
}

// Decode of a 26B-A4B MoE layer's experts (Q4_0, packed as after loading): 8 of 128 experts per
// token, a different random 8 each iteration, gate|up (1408 x 2816) then down (2816 x 704). `how`:
// 0 = matmul_group (two barriers), 1 = one matmul call per product (sixteen), 2 = the same bytes as
// two single products of 8 x 1408 x 2816 and 8 x (2816 x 704) laid out contiguously: the streaming
// ideal. 128 experts (425 MiB) come from DRAM. GB/s: the weight bytes read per second.
void BM_MoeExperts(benchmark::State& state, int how) {
  constexpr int64_t d = 2816, fe = 704, E = 128, K = 8;
  // E copies of each matrix, packed: the experts; and the contiguous layouts, cycled through copies.
  static std::unique_ptr<BenchWeights> gu_all, down_all, wide_gu, wide_down;
  if (!gu_all) {
    auto experts = [&](int64_t out, int64_t in) {
      auto w = make_weights(GgmlType::Q4_0, out, in, false);
      const std::vector<uint8_t> one = w->data;
      w->copies = int(E);
      w->data.resize(one.size() * E);
      for (int64_t c = 0; c < E; ++c) std::copy(one.begin(), one.end(), w->data.begin() + c * one.size());
      for (int c = 0; c < int(E); ++c) w->packed_view(c);
      return w;
    };
    gu_all = experts(2 * fe, d);
    down_all = experts(d, fe);
    wide_gu = make_weights(GgmlType::Q4_0, K * 2 * fe, d, true);
    wide_gu->packed_view(0);
    wide_down = make_weights(GgmlType::Q4_0, d, K * fe, true);
    wide_down->packed_view(0);
  }
  std::vector<float> x(d, 0.5f), gu(K * 2 * fe), act(K * fe, 0.25f), y(K * d);
  std::mt19937 rng(9);
  int copy = 0;
  const double bytes = double(K) * double(gu_all->matrix_bytes + down_all->matrix_bytes);
  std::vector<MatmulJob> jobs;
  auto run = [&](int n) {
    if (how == 0) {
      matmul_group(jobs.data(), n, &pool2());
    } else {
      for (const MatmulJob& j : jobs) matmul(j.w, j.x, 1, j.ldx, j.y, j.ldy, &pool2());
    }
  };
  for (auto _ : state) {
    if (how == 2) {
      matmul(wide_gu->packed_views[copy % wide_gu->copies], x.data(), 1, d, gu.data(), K * 2 * fe, &pool2());
      matmul(wide_down->packed_views[copy % wide_down->copies], act.data(), 1, K * fe, y.data(), d, &pool2());
      copy++;
    } else {
      int picked[K];
      for (int k = 0; k < K; ++k) picked[k] = int(rng() % E);
      jobs.clear();
      for (int k = 0; k < K; ++k)
        jobs.push_back({gu_all->packed_views[picked[k]], x.data(), 1, d, gu.data() + k * 2 * fe, 2 * fe});
      run(K);
      jobs.clear();
      for (int k = 0; k < K; ++k)
        jobs.push_back({down_all->packed_views[picked[k]], act.data() + k * fe, 1, fe, y.data() + k * d, d});
      run(K);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(isa_name(active_isa())) + (gu_all->packed_views[0].packed ? " packed" : ""));
}

// One decoded token's products of E2B's 35 layers (the LM head apart: see lm_head below), packed as
// after loading, one call per barrier as the forward pass makes them: q (with k and v in the 15
// KV-writing layers; every fifth layer full attention, 512-wide heads), o, gate|up (6144 wide, 12288
// in the 20 KV-shared layers), down, and the per-layer-embedding gate and projection. The weights
// (~1 GB in Q4_0) come from DRAM every token, with nothing between the calls: what the products
// alone stream, to read against read_loop/threads:2 (on a Zen 5 VM it matched `gem4 bench --products`
// of a real E2B Q4_0 file within a few %). GB/s: weight bytes per second.
void BM_DecodeToken(benchmark::State& state, GgmlType type) {
  struct Layer {
    std::vector<std::unique_ptr<BenchWeights>> qkv, gate_up;
    std::unique_ptr<BenchWeights> o, down, ple_gate, ple_proj;
  };
  static GgmlType built_type = GgmlType::F32;
  static std::vector<Layer> layers;
  static double token_bytes = 0;
  if (layers.empty() || built_type != type) {
    layers.clear();
    token_bytes = 0;
    built_type = type;
    auto packed = [&](int64_t out, int64_t in) {
      auto w = make_weights(type, out, in, false);
      w->packed_view(0);
      token_bytes += double(packed_matrix_bytes(w->packed_views[0]));
      return w;
    };
    for (int l = 0; l < 35; ++l) {
      const bool full = l % 5 == 4, writes_kv = l < 15;
      const int64_t q = full ? 4096 : 2048, kv = full ? 512 : 256, ffn = writes_kv ? 6144 : 12288;
      Layer L;
      L.qkv.push_back(packed(q, 1536));
      if (writes_kv) L.qkv.push_back(packed(kv, 1536)), L.qkv.push_back(packed(kv, 1536));
      L.o = packed(1536, q);
      L.gate_up.push_back(packed(ffn, 1536));
      L.gate_up.push_back(packed(ffn, 1536));
      L.down = packed(1536, ffn);
      L.ple_gate = packed(256, 1536);
      L.ple_proj = packed(1536, 256);
      layers.push_back(std::move(L));
    }
  }
  std::vector<float> x(12288, 0.25f), y0(12288), y1(12288), y2(512);
  auto shared = [&](const std::vector<std::unique_ptr<BenchWeights>>& ws) {
    MatmulTarget t[3];
    float* ys[3] = {y0.data(), y1.data(), y2.data()};
    for (size_t i = 0; i < ws.size(); ++i) t[i] = {ws[i]->packed_views[0], ys[i], ws[i]->out};
    matmul_shared_input(t, int(ws.size()), x.data(), 1, 1536, &pool2());
  };
  auto single = [&](const BenchWeights& w) {
    matmul(w.packed_views[0], x.data(), 1, w.in, y0.data(), w.out, &pool2());
  };
  for (auto _ : state) {
    for (const Layer& L : layers) {
      shared(L.qkv);
      single(*L.o);
      shared(L.gate_up);
      single(*L.down);
      single(*L.ple_gate);
      single(*L.ple_proj);
    }
    benchmark::DoNotOptimize(y0.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter(token_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(isa_name(active_isa())) +
                 (layers[0].o->packed_views[0].packed ? " packed" : ""));
}

void BM_MatmulReference(benchmark::State& state) {
  const int64_t in = 256, out = 256, rows = 16;
  const BenchWeights& w = weights(GgmlType::Q8_0, out, in, false);
  std::vector<float> x(rows * in, 0.5f), y(rows * out);
  for (auto _ : state) {
    matmul_reference(w.view(0), x.data(), rows, in, y.data(), out);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(rows) * in * out * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// The read loops of `gem4 bench --roofline` (the running set's loads, plain and with page-head
// prefetches, over a buffer beyond the caches (read_buffer_bytes); the fastest loop's best of three passes),
// so that the decode GEMVs above can be read as a fraction of it measured in the same run.
void BM_ReadLoop(benchmark::State& state) {
  double sum = 0;
  int64_t n = 0;
  for (auto _ : state) sum += measure_read_bandwidth_quick(&pool2()), ++n;
  state.counters["GB/s"] = n ? sum / double(n) : 0.0;
  state.SetLabel(isa_name(active_isa()));
}

struct Shape {
  const char* name;
  int64_t in, out;
};

// E2B: hidden 1536, attention q 2048, k and v 256 (one KV head), FFN 6144 (12288 in the double-wide
// KV-shared layers). E4B: hidden 2560, FFN 10240.
constexpr Shape kShapes[] = {
    {"E2B_q", 1536, 2048},        {"E2B_kv", 1536, 256},      {"E2B_ffn_up", 1536, 6144},
    {"E2B_ffn_up_wide", 1536, 12288},
    {"E2B_ffn_down", 6144, 1536}, {"E4B_q", 2560, 2048},      {"E4B_ffn_up", 2560, 10240},
};

// Each benchmark on the GGUF layout; the types with a packed layout also on the one the model loads into
// (named "<type>_packed/..."); BF16 with the f32 kernels ("bf16/...") and, where the CPU has
// AVX512_BF16, with vdpbf16ps ("bf16_dot/...").
void register_matmul(const std::string& rest, GgmlType t, int64_t in, int64_t out, int64_t rows, int threads,
                     double min_time) {
  for (bool packed : {false, true}) {
    if (packed && !has_packed_layout(t)) continue;
    for (Bf16Dot dot : {Bf16Dot::Off, Bf16Dot::On}) {
      if (dot == Bf16Dot::On && (t != GgmlType::BF16 || !cpu_features().avx512bf16)) continue;
      const std::string name =
          std::string(ggml_type_name(t)) + (packed ? "_packed/" : dot == Bf16Dot::On ? "_dot/" : "/") + rest;
      benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, t, in, out, rows, threads, packed, dot)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(min_time);
    }
  }
}

void register_all() {
  const GgmlType types[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K,
                            GgmlType::Q6_K, GgmlType::BF16, GgmlType::F32};
  for (GgmlType t : types) {
    for (const Shape& s : kShapes) {
      for (int64_t rows : {int64_t{1}, int64_t{512}}) {
        register_matmul(std::string(s.name) + "/rows:" + std::to_string(rows) + "/threads:2", t, s.in, s.out, rows,
                        2, 0.2);
      }
    }
  }
  // Single-thread points for the headline shape.
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0}) {
    register_matmul("E2B_ffn_up/rows:512/threads:1", t, 1536, 6144, 512, 1, 0.2);
    // The down projection's 6144-wide activations outgrow L2 at 512 rows (3 MiB of quants), not at 128.
    for (int64_t rows : {int64_t{128}, int64_t{512}}) {
      register_matmul("E2B_ffn_down/rows:" + std::to_string(rows) + "/threads:1", t, 6144, 1536, rows, 1, 0.2);
    }
  }
  // Shared-input products of E2B's KV-writing layers at pp512: one call vs a call each.
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0}) {
    for (bool shared : {true, false}) {
      const std::string how = shared ? "/shared" : "/separate";
      const std::string type = ggml_type_name(t);
      benchmark::RegisterBenchmark((type + "_packed/E2B_kvq" + how + "/rows:512/threads:2").c_str(), BM_SharedInput,
                                   t, 1536, std::vector<int64_t>{256, 256, 2048}, 512, shared)
          ->MinTime(0.2)
          ->UseRealTime();
      benchmark::RegisterBenchmark((type + "_packed/E2B_gate_up" + how + "/rows:512/threads:2").c_str(),
                                   BM_SharedInput, t, 1536, std::vector<int64_t>{6144, 6144}, 512, shared)
          ->MinTime(0.2)
          ->UseRealTime();
    }
  }
  benchmark::RegisterBenchmark("read_loop/threads:2", BM_ReadLoop)->UseRealTime()->MinTime(0.3);
  for (const auto& [name, t] : std::vector<std::pair<std::string, GgmlType>>{{"q8_0", GgmlType::Q8_0},
                                                                             {"q4_0", GgmlType::Q4_0},
                                                                             {"q4_k", GgmlType::Q4_K},
                                                                             {"q6_k", GgmlType::Q6_K}}) {
    benchmark::RegisterBenchmark((name + "_packed/in_cache_512x1024/rows:1/threads:1").c_str(),
                                 BM_GemvInCache, t)
        ->MinTime(0.3);
  }
  // LM head (tied embedding, 262144 x 1536), decode only: the types llama-quantize gives it.
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q6_K}) {
    for (int threads : {1, 2}) {
      register_matmul("lm_head/rows:1/threads:" + std::to_string(threads), t, 1536, 262144, 1, threads, 0.3);
    }
  }
  // Decode single-threaded, and small batches (speculative verification).
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q6_K}) {
    for (int64_t rows : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{8}, int64_t{16}}) {
      register_matmul("E2B_ffn_up_wide/rows:" + std::to_string(rows) + "/threads:1", t, 1536, 12288, rows, 1, 0.2);
    }
  }
  // A 26B-A4B layer's experts at decode: grouped, one call each, and the same bytes contiguous.
  const char* moe_names[3] = {"q4_0_packed/moe_experts/grouped", "q4_0_packed/moe_experts/separate",
                              "q4_0_packed/moe_experts/contiguous"};
  for (int how = 0; how < 3; ++how) {
    benchmark::RegisterBenchmark((std::string(moe_names[how]) + "/rows:1/threads:2").c_str(), BM_MoeExperts,
                                 how)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(0.3);
  }
  // One token's layer products at decode (E2B), after the read loop they are read against.
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0}) {
    benchmark::RegisterBenchmark(
        (std::string(ggml_type_name(t)) + "_packed/E2B_decode_layers/rows:1/threads:2").c_str(),
        BM_DecodeToken, t)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.5);
  }
  benchmark::RegisterBenchmark("reference/Q8_0/256x256/rows:16", BM_MatmulReference)
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.2);
}

}  // namespace
}  // namespace gem4

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  gem4::register_all();
  benchmark::AddCustomContext("cpu_features", gem4::cpu_features_string());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
