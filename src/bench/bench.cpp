// gem4 bench: llama-bench-style prompt-processing (pp) and generation (tg) tests, each run for every
// combination of the ablation switches given as comma lists (e.g. --prune 1,0), in one process on one
// model, so the speedup ratios it prints compare like with like.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>

#include "bench/media_bench.h"
#include "bench/report.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "generate/drafter_factory.h"
#include "generate/generate.h"
#include "gguf/huge_pages.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "kernels/packed_matrix.h"
#include "kernels/peaks.h"
#include "kernels/thread_pool.h"
#include "model/forward.h"
#include "model/generator.h"
#include "model/model.h"
#include "text/tokenizer.h"

namespace gem4::cli {

namespace {

// How much of the mapped packed-weight cache is in 4 KiB pages at the end of the run, where the kernel
// can tell (gguf/huge_pages.h): the experts' products read such a cache measurably slower (README,
// Models, 2026-12-05), so a decode figure is read with it. "" without a mapped cache.
std::string small_pages_note(const PackedStore& store) {
  int64_t small = 0;
  const std::vector<ByteSpan> maps = store.mappings();
  for (const ByteSpan& m : maps) {
    const int64_t n = bytes_in_small_pages(m.data, m.size);
    if (n < 0) return "";
    small += n;
  }
  if (maps.empty()) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, "; at the end %.1f MiB of the mapped copies in 4 KiB pages",
                double(small) / (1 << 20));
  return buf;
}

using Clock = std::chrono::steady_clock;

// "prune=1 mask_crop=1 ...": a result's switches, as the roofline and products tables name a variant.
std::string variant_label(const bench::Result& r) {
  std::string label;
  for (const auto& [k, v] : r.switches) label += (label.empty() ? "" : " ") + k + "=" + v;
  return label;
}

// --products: one markdown table of a decode run's products, slowest share first. GB/s is the
// weight bytes over the time inside those products (both threads' work, end-of-product waits
// included), comparable with the roofline's "GB/s inside them". With `plain_gbs` (--roofline), two
// more columns: the rate of a plain read of one token's weights of that kind, and the products' share
// of it, so a kind that streams slower than its own bytes can be read stands out.
std::string products_table(const std::string& title, const ProductBreakdown& b, double tokens,
                           const std::map<std::string, double>* plain_gbs) {
  std::vector<std::pair<std::string, ProductTime>> rows(b.begin(), b.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& x, const auto& y) { return x.second.seconds > y.second.seconds; });
  double total = 0;
  for (const auto& [kind, t] : rows) total += t.seconds;
  std::string out = "\ndecode products, " + title + " (" + std::to_string(int64_t(tokens)) +
                    " tokens; the first product at each barrier and how many ran there):\n"
                    "| products | per token | share of the products' time | weight MiB per token | GB/s |";
  out += plain_gbs ? " plain read of their weights GB/s | of that |\n|---|---:|---:|---:|---:|---:|---:|\n"
                   : "\n|---|---:|---:|---:|---:|\n";
  char line[256];
  for (const auto& [kind, t] : rows) {
    const double gbs = t.seconds > 0 ? t.weight_bytes / t.seconds / 1e9 : 0.0;
    std::snprintf(line, sizeof line, "| %s | %.1f | %.1f %% | %.2f | %.2f |", kind.c_str(),
                  double(t.calls) / tokens, total > 0 ? 100 * t.seconds / total : 0.0,
                  t.weight_bytes / tokens / (1 << 20), gbs);
    out += line;
    if (plain_gbs) {
      const auto plain = plain_gbs->find(kind);
      if (plain != plain_gbs->end() && plain->second > 0) {
        std::snprintf(line, sizeof line, " %.2f | %.1f %% |", plain->second, 100 * gbs / plain->second);
        out += line;
      } else {
        out += " - | - |";  // a kind too small to read apart, or one the recorded token did not run
      }
    }
    out += "\n";
  }
  return out;
}

struct TestSpec {
  int n_prompt = 0, n_gen = 0, n_depth = 0;
  std::string name() const {
    std::string s;
    if (n_prompt > 0) s = "pp" + std::to_string(n_prompt);
    if (n_gen > 0) s += (s.empty() ? "" : "+") + std::string("tg") + std::to_string(n_gen);
    if (n_depth > 0) s += " @ d" + std::to_string(n_depth);
    return s;
  }
};

struct Switch {
  std::string name;                 // JSON field and column name
  std::vector<std::string> values;  // as given ("1", "0")
};

std::vector<int> int_list(const Args& a, const std::string& flag) {
  std::vector<int> v;
  for (const auto& s : a.list(flag)) {
    try {
      v.push_back(std::stoi(s));
    } catch (const std::exception&) {
      throw ArgError("bench: " + flag + ": '" + s + "' is not an integer");
    }
    if (v.back() < 0) throw ArgError("bench: " + flag + " values must be >= 0");
  }
  return v;
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(4 + rng() % uint64_t(std::max(1, n_vocab - 4)));
  return t;
}

// "gemma4 E2B Q4_0": the file type the file states (llama.cpp names it so too: a Q4_0 file keeps its
// embedding tables in Q6_K), else the type of most matrix parameters.
std::string describe_type(const Model& m) {
  const ModelConfig& c = m.config;
  std::string size = c.n_layer == 35 && c.d_model == 1536   ? "E2B"
                     : c.n_layer == 42 && c.d_model == 2560 ? "E4B"
                     : c.n_layer == 30 && c.d_model == 2816 ? "26B-A4B"
                     : c.n_layer == 60 && c.d_model == 5376 ? "31B"
                                                            : std::to_string(c.n_layer) + "L";
  if (const char* name = gguf::stated_file_type_name(*m.file)) return "gemma4 " + size + " " + name;
  std::map<std::string, int64_t> params;
  for (const auto& [name, r] : m.tensors) {
    if (r.ne.size() < 2) continue;
    int64_t n = 1;
    for (auto e : r.ne) n *= e;
    params[ggml_type_name(r.type)] += n;
  }
  std::string best;
  int64_t mx = -1;
  for (const auto& [t, n] : params)
    if (n > mx) mx = n, best = t;
  std::transform(best.begin(), best.end(), best.begin(), ::toupper);
  return "gemma4 " + size + " " + best;
}

}  // namespace

int cmd_bench(int argc, char** argv, int first) {
  Args a("bench", "Prompt-processing and generation throughput, llama-bench style, with ablations in one run.");
  a.value("-m,--model", "FILE", "GGUF model (default: a model generated in memory)");
  a.value("--preset", "NAME",
          "in-memory model shape: e2b | e4b | 26b-a4b | 31b | tiny | tiny-moe | tiny-dense31 | small-moe",
          "e2b");
  a.value("--type", "TYPE", "in-memory model weight type (a GGML type, or q4_k_m: llama-quantize's Q4_K/Q6_K mix)", "q8_0");
  a.flag("--pure", "in-memory model: embedding tables of --type too (default: Q6_K below Q8_0, as llama-quantize)");
  a.value("-p,--n-prompt", "LIST", "prompt lengths", "512");
  a.value("-n,--n-gen", "LIST", "generation lengths", "16");
  a.value("-pg", "PP,TG", "a prompt followed by generation, e.g. 512,128");
  a.value("-d,--n-depth", "LIST", "tokens of context before each test", "0");
  a.value("-r,--repetitions", "N", "repetitions of each test", "2");
  a.value("--ubatch,-ub,--ubatch-size", "N", "micro-batch size", "512");
  a.value("--kv-type", "TYPE", "KV cache type: f32 | f16 | bf16 | q8_0", "f16");
  a.value("--prune", "LIST", "prune rows before the KV-shared tail: 1,0 runs both", "1,0");
  a.value("--mask-crop", "LIST", "attention visits only visible keys", "1");
  a.value("--ple-crop", "LIST", "PLE projection of tail layers only for kept rows", "1");
  a.value("--optimal-cut", "LIST", "cut inside the last KV layer (1) or at the first shared layer (0)", "1");
  a.value("--repack", "LIST", "Q8_0/Q4_0/Q4_K/Q5_K/Q6_K kernels read the weights packed at load time (1) or the GGUF layout (0)", "1");
  a.value("-o,--output", "FMT", "md | json", "md");
  a.value("--svg", "FILE", "write a bar chart of t/s per test and variant");
  a.value("--seed", "N", "seed of the generated model and prompts", "42");
  a.value("--spec", "LIST", "decoding for -n tests: none, mtp, ngram, draft, or combinations (mtp+ngram); none,mtp runs both", "none");
  a.value("-md,--model-draft", "FILE", "drafter for --spec: a gemma4-assistant GGUF (mtp) or a smaller gemma4 (draft)");
  a.value("--draft-max", "N", "most drafted tokens per round", "3");
  a.flag("--draft-adaptive", "tune the draft length from acceptance and measured step costs");
  a.flag(
      "--products",
      "after the results, a table per -n test and variant of where the decode time went: the matrix "
      "products by kind (type, shape, how many at one barrier), their share of the time and GB/s (with "
      "--roofline also a plain read of each kind's weights, 64 MiB a token or more, and their share of it)");
  a.flag("--roofline",
         "measure this machine's int8/bf16/fp32 peaks and read bandwidth (a read loop over its own buffer, "
         "and the same loads over the weights one decoded token streams) with the running kernel set's "
         "instructions (GEM4_ISA); report fractions");
  declare_media_bench_flags(a);
  declare_thread_flag(a);
  declare_load_flags(a);
  if (!a.parse(argc, argv, first)) {
    std::printf("%s", a.help().c_str());
    return 0;
  }
  if (media_bench_requested(a)) return run_media_bench(a, thread_count(a));
  const int reps = int(a.integer("-r"));
  const int ubatch = int(a.integer("--ubatch"));
  if (reps < 1) throw ArgError("bench: -r must be >= 1");
  if (ubatch < 1) throw ArgError("bench: --ubatch must be >= 1");
  const std::string out_fmt = a.str("-o");
  if (out_fmt != "md" && out_fmt != "json") throw ArgError("bench: -o must be md or json");
  const KvType kv_type = kv_type_from_name(a.str("--kv-type"));
  const int n_threads = thread_count(a);
  ThreadPool pool(n_threads);

  // The tests.
  std::vector<TestSpec> tests;
  const auto depths = int_list(a, "-d");
  for (int d : depths) {
    for (int p : int_list(a, "-p"))
      if (p > 0) tests.push_back({p, 0, d});
    for (int n : int_list(a, "-n"))
      if (n > 0) tests.push_back({0, n, d});
    if (a.has("-pg")) {
      auto pg = int_list(a, "-pg");
      if (pg.size() != 2) throw ArgError("bench: -pg expects PP,TG");
      tests.push_back({pg[0], pg[1], d});
    }
  }
  if (tests.empty()) throw ArgError("bench: nothing to run (all of -p, -n are 0)");

  // The ablation switches.
  std::vector<Switch> switches = {{"prune", a.list("--prune")}, {"mask_crop", a.list("--mask-crop")},
                                  {"ple_crop", a.list("--ple-crop")}, {"optimal_cut", a.list("--optimal-cut")},
                                  {"repack", a.list("--repack")}};
  for (const auto& s : switches)
    for (const auto& v : s.values)
      if (v != "0" && v != "1") throw ArgError("bench: --" + s.name + " values must be 0 or 1, got '" + v + "'");
  const std::vector<std::string> specs = a.list("--spec");
  for (const auto& sp : specs) generate::parse_spec(sp);  // validates, naming an unknown kind
  const bool any_spec = specs.size() > 1 || (specs.size() == 1 && specs[0] != "none");
  switches.push_back({"spec", specs.empty() ? std::vector<std::string>{"none"} : specs});

  // The model.
  const auto t_load = Clock::now();
  std::unique_ptr<Model> model;
  std::string model_name;
  if (a.has("-m")) {
    model_name = a.str("-m");
    model = Model::load(model_name, load_options(a));
  } else {
    GeneratorSpec spec;
    spec.preset = a.str("--preset");
    if (!parse_generated_type(a.str("--type"), &spec))
      throw ArgError("bench: --type '" + a.str("--type") + "' is not a known type (a GGML type or q4_k_m)");
    spec.seed = uint64_t(a.integer("--seed"));
    spec.pure = a.on("--pure");
    model_name = "generated:" + spec.preset;
    std::fprintf(stderr, "bench: generating a random %s model (%s) in memory...\n", spec.preset.c_str(),
                 spec.q4_k_m ? "Q4_K_M mix" : ggml_type_name(spec.type));
    model = generate_model(spec, &pool);
  }
  std::unique_ptr<Model> draft_model;
  if (a.has("-md")) draft_model = Model::load(a.str("-md"), load_options(a));
  const ParamCount pc = count_params(model->tensors);
  const std::string model_type = describe_type(*model);
  std::fprintf(stderr, "bench: %s ready in %.1f s: %.2f B params, %s; %d threads, ISA %s\n", model_type.c_str(),
               std::chrono::duration<double>(Clock::now() - t_load).count(), pc.params / 1e9,
               human_bytes(double(pc.bytes)).c_str(), n_threads, isa_name(active_isa()));

  // The plan's switches that have nothing to act on: without KV-shared layers there is no tail to
  // prune rows before (26B-A4B, 31B), so each variant would time the same computation.
  if (model->config.n_kv_shared == 0) {
    for (Switch& s : switches)
      if ((s.name == "prune" || s.name == "optimal_cut") && s.values.size() > 1)
        s.values = {s.values.front()};
    std::fprintf(stderr,
                 "bench: plan: no KV-shared layers, so pruning does not apply (--prune, --optimal-cut change "
                 "nothing)\n");
  }
  if (model->config.n_expert > 0) {
    // Decode reads the experts the router picks: the weight bytes of a token are the rest plus K/E of
    // the experts' (what the decode bandwidth below counts, expert by expert).
    double expert_bytes = 0, other_bytes = 0;
    for (const auto& [name, r] : model->tensors) {
      if (r.ne.size() < 2 || name == "token_embd.weight" || name == "per_layer_token_embd.weight") continue;
      (name.find("_exps.weight") != std::string::npos ? expert_bytes : other_bytes) += double(r.nbytes);
    }
    const ModelConfig& c = model->config;
    const double active = other_bytes + expert_bytes * c.n_expert_used / c.n_expert;
    std::fprintf(stderr,
                 "bench: plan: MoE, %d experts of width %d per layer, %d used per token: %s of %s matrix "
                 "weights read per token (+ the LM head)\n",
                 c.n_expert, c.n_ff_exp, c.n_expert_used, human_bytes(active).c_str(),
                 human_bytes(other_bytes + expert_bytes).c_str());
  }

  MachinePeaks peaks;
  if (a.on("--roofline")) {
    std::fprintf(stderr, "bench: measuring machine peaks...\n");
    peaks = measure_peaks(&pool);
    std::fprintf(
        stderr,
        "bench: peaks (%s kernel set): int8 (%s) %.0f GMAC/s, bf16 %.0f GMAC/s, fp32 %.0f GMAC/s, read (%s) "
        "%.1f GB/s\n",
        peaks.kernel_set, peaks.int8_instr, peaks.int8_gmacs, peaks.bf16_gmacs, peaks.fp32_gflops,
        peaks.read_instr, peaks.read_gbs);
  }

  int max_ctx = 1;
  for (const auto& t : tests) max_ctx = std::max(max_ctx, t.n_depth + t.n_prompt + t.n_gen + 1);
  KvCache kv(model->config, max_ctx, 1, ubatch, kv_type);
  const int V = model->config.n_vocab > 0 ? model->config.n_vocab : int(model->weights.token_embd.out);

  // Every combination of switch values.
  std::vector<std::vector<std::string>> variants = {{}};
  for (const auto& s : switches) {
    std::vector<std::vector<std::string>> next;
    for (const auto& v : variants)
      for (const auto& val : s.values) {
        auto w = v;
        w.push_back(val);
        next.push_back(w);
      }
    variants = next;
  }

  std::vector<int32_t> spec_prompt;
  if (any_spec) {
    const bool has_merges = model->file->has("tokenizer.ggml.merges") &&
                            !model->file->find("tokenizer.ggml.merges")->elems.empty();
    if (has_merges) {
      const auto tok = text::Tokenizer::from_gguf(*model->file, model->cache_dir);
      spec_prompt = tok.encode(
          "And God said, Let there be light: and there was light. And God saw the light, that it was good: "
          "and God divided the light from the darkness. And God called the light Day, and the darkness he "
          "called Night. And the evening and the morning were the first day.",
          true, false);
    } else {
      // A repetitive prompt (a 32-token phrase four times) that prompt-lookup drafting can exploit.
      const auto phrase = random_tokens(32, V, uint64_t(a.integer("--seed")) + 3);
      spec_prompt.push_back(2);
      for (int k = 0; k < 4; ++k) spec_prompt.insert(spec_prompt.end(), phrase.begin(), phrase.end());
    }
  }

  std::vector<bench::Result> results;
  std::vector<std::string> product_tables;  // --products
  const uint64_t seed = uint64_t(a.integer("--seed"));
  const size_t total_runs = tests.size() * variants.size() * size_t(reps);
  size_t done_runs = 0;
  for (const auto& test : tests) {
    // Repetitions are interleaved across the variants (rep 1 of each, then rep 2 of each, ...), so a
    // burst of load from other processes on a shared machine hits every variant alike instead of
    // skewing the ratio between them.
    struct VariantRun {
      std::vector<std::string> variant;
      std::unique_ptr<Forward> fwd;
      bench::Result r;
      double flops = 0, tokens = 0, secs_total = 0;
      double mm_macs = 0, mm_secs = 0, gemm_macs = 0, gemm_secs = 0, gen_bytes = 0, gen_secs = 0, gen_mm_secs = 0;
      double spec_drafted = 0, spec_accepted = 0, spec_rounds = 0;
      // --roofline: each repetition's decode rate over the read bandwidth measured right before and
      // right after it (their mean), so a drift of the host between repetitions does not count.
      std::vector<double> paired_bandwidth_fracs;
      // --roofline: the weight bytes one decoded token streams (recorded in the warm-up), and the highest
      // rate a plain read of them reached, measured beside the read loop.
      std::vector<ByteSpan> token_weights;
      double token_weights_read_gbs = 0;
      bool flops_unmeasured = false;
      ProductBreakdown decode_products;  // --products: the measured repetitions' decode products
      ProductBreakdown token_products;   // --products --roofline: the warm-up's decoded token, with spans
      double decode_tokens = 0;
    };
    // --roofline: the read bandwidth at this moment, the faster of the two plain reads (the read loop over
    // its own buffer, the same loads over v's token weights): the machine reads at least that fast,
    // whichever of them sits in faster memory. Raises the run's highest and v's highest weights read.
    auto read_bandwidth_now = [&](VariantRun& v) {
      const double weights_gbs = measure_read_bandwidth_over(&pool, v.token_weights);
      v.token_weights_read_gbs = std::max(v.token_weights_read_gbs, weights_gbs);
      const double gbs = std::max(measure_read_bandwidth_quick(&pool), weights_gbs);
      peaks.read_gbs = std::max(peaks.read_gbs, gbs);
      return gbs;
    };
    std::vector<VariantRun> runs;
    for (const auto& variant : variants) {
      const std::string& spec = variant[5];
      if (spec != "none" && (test.n_gen == 0 || test.n_prompt > 0)) continue;  // drafting: -n tests only
      VariantRun v;
      v.variant = variant;
      v.fwd = std::make_unique<Forward>(*model, &pool);
      Forward& fwd = *v.fwd;
      fwd.ubatch = ubatch;
      fwd.switches.prune = variant[0] == "1";
      fwd.switches.mask_crop = variant[1] == "1";
      fwd.switches.ple_crop = variant[2] == "1";
      fwd.switches.optimal_cut = variant[3] == "1";
      bench::Result& r = v.r;
      r.model = model_name;
      r.model_type = model_type;
      r.model_size = double(pc.bytes);
      r.model_params = double(pc.params);
      r.test = test.name();
      r.n_prompt = test.n_prompt, r.n_gen = test.n_gen, r.n_depth = test.n_depth;
      r.n_threads = n_threads, r.n_ubatch = ubatch;
      for (size_t i = 0; i < switches.size(); ++i) r.switches.push_back({switches[i].name, variant[i]});
      runs.push_back(std::move(v));
    }
    for (int rep = -1; rep < reps; ++rep) {  // rep -1 is an untimed warm-up
      for (VariantRun& v : runs) {
        const std::string& spec = v.variant[5];
        Forward& fwd = *v.fwd;
        bench::Result& r = v.r;
        set_use_packed(v.variant[4] == "1");
        kv.clear_all();
        ForwardOutputs out;
        // Depth: context before the test, not timed.
        if (test.n_depth > 0) {
          const auto ctx = random_tokens(test.n_depth, V, seed + 7);
          Batch b;
          for (int i = 0; i < test.n_depth; ++i) b.push_back({ctx[i], i, 0, false, false});
          fwd.run(b, kv, out);
        }
        const bool warm = rep < 0;
        const int n_prompt = warm ? std::min(test.n_prompt, 32) : test.n_prompt;
        const int n_gen = warm ? std::min(test.n_gen, 1) : test.n_gen;
        // --roofline: the peaks again before each repetition; the fractions divide by the highest seen.
        double read_gbs_before = 0;
        if (a.on("--roofline") && !warm) {
          if (n_prompt > 0) peaks.int8_gmacs = std::max(peaks.int8_gmacs, measure_int8_peak_quick(&pool));
          if (n_gen > 0) {
            read_gbs_before = read_bandwidth_now(v);
          }
        }
        fwd.stats.reset();
        const auto t0 = Clock::now();
        int pos = test.n_depth;
        int32_t last = 2;
        double prompt_macs = 0, prompt_mm_secs = 0, prompt_gemm_macs = 0, prompt_gemm_secs = 0;
        if (n_prompt > 0) {
          const auto prompt = random_tokens(n_prompt, V, seed + 11 + uint64_t(rep + 1));
          Batch b;
          for (int i = 0; i < n_prompt; ++i) b.push_back({prompt[i], pos + i, 0, i + 1 == n_prompt, false});
          out.clear();
          fwd.run(b, kv, out);
          pos += n_prompt;
          last = prompt.back();
          prompt_macs = fwd.stats.matmul_macs;
          prompt_mm_secs = fwd.stats.matmul_seconds;
          prompt_gemm_macs = fwd.stats.int8_gemm_macs;
          prompt_gemm_secs = fwd.stats.int8_gemm_seconds;
        }
        const double gen_bytes0 = fwd.stats.weight_bytes, gen_mm_secs0 = fwd.stats.matmul_seconds;
        const auto t_gen = Clock::now();
        double spec_ts = 0;
        if (any_spec && n_gen > 0 && test.n_prompt == 0) {
          // Speculative (or plain, for spec=none) decoding through one code path, so the rows compare
          // like with like: a session over the same cache type, a prompt the drafters can work with.
          SessionOptions so;
          so.n_ctx = max_ctx + 256, so.ubatch = ubatch, so.kv_type = kv_type, so.switches = fwd.switches;
          Session session(*model, &pool, so);
          auto drafter = generate::make_drafter(spec, *model, {draft_model.get()}, &pool, so);
          generate::SpecOptions sopt;
          sopt.draft_max = int(a.integer("--draft-max"));
          sopt.adaptive = a.on("--draft-adaptive");
          session.speculate(drafter.get(), sopt);
          const auto run = generate::generate_tokens(session, spec_prompt, n_gen);
          v.spec_drafted += double(run.stats.drafted), v.spec_accepted += double(run.stats.accepted);
          v.spec_rounds += double(run.stats.draft_rounds);
          spec_ts = run.stats.decode_tokens_per_s();
          v.flops_unmeasured = true;  // the session's own passes (target and drafter) are not counted
        } else {
          if (a.on("--products") && !warm) fwd.breakdown = &v.decode_products, v.decode_tokens += n_gen;
          for (int g = 0; g < n_gen; ++g) {
            out.clear();
            // --roofline: the warm-up's decoded token records the weight bytes a token streams (with
            // --products, also kind by kind).
            const bool record = warm && g == 0 && a.on("--roofline");
            fwd.streamed = record ? &v.token_weights : nullptr;
            if (record && a.on("--products")) fwd.breakdown = &v.token_products;
            fwd.run({{last, pos, 0, true, false}}, kv, out);
            fwd.streamed = nullptr;
            if (record) fwd.breakdown = nullptr;
            const float* lg = out.logits.data();
            last = int32_t(std::max<int64_t>(0, argmax_finite(lg, out.n_vocab)));
            pos++;
          }
          fwd.breakdown = nullptr;
        }
        const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        const double gsecs = std::chrono::duration<double>(Clock::now() - t_gen).count();
        if (warm) continue;
        v.mm_macs += prompt_macs, v.mm_secs += prompt_mm_secs;
        v.gemm_macs += prompt_gemm_macs, v.gemm_secs += prompt_gemm_secs;
        if (n_gen > 0) {
          v.gen_bytes += fwd.stats.weight_bytes - gen_bytes0, v.gen_secs += gsecs;
          v.gen_mm_secs += fwd.stats.matmul_seconds - gen_mm_secs0;
          if (read_gbs_before > 0 && gsecs > 0) {
            const double read_gbs_after = read_bandwidth_now(v);
            const double gbs = (fwd.stats.weight_bytes - gen_bytes0) / gsecs / 1e9;
            v.paired_bandwidth_fracs.push_back(gbs / (0.5 * (read_gbs_before + read_gbs_after)));
          }
        }
        const double n_tok = n_prompt + n_gen;
        // Speculative rows report generation speed without the prompt (as the plain -n rows do).
        r.samples_ts.push_back(spec_ts > 0 ? spec_ts : n_tok / secs);
        v.flops += 2.0 * (fwd.stats.matmul_macs + fwd.stats.attention_macs);
        v.tokens += n_tok;
        v.secs_total += secs;
        ++done_runs;
        std::fprintf(stderr, "bench: [%zu/%zu] %s %s%s%s: %.2f t/s\n", done_runs, total_runs, r.test.c_str(),
                     fwd.switches.prune ? "prune" : "no-prune", fwd.switches.mask_crop ? "" : " no-mask-crop",
                     fwd.switches.ple_crop ? "" : " no-ple-crop", n_tok / secs);
      }
    }
    for (VariantRun& v : runs) {
      bench::Result& r = v.r;
      r.finish();
      r.flops_per_token = v.tokens > 0 ? v.flops / v.tokens : 0;
      r.gflops = v.flops_unmeasured ? -1 : v.secs_total > 0 ? v.flops / v.secs_total / 1e9 : 0;
      if (any_spec && test.n_gen > 0) {
        r.extra["spec_drafted"] = v.spec_drafted;
        r.extra["spec_acceptance"] = v.spec_drafted > 0 ? v.spec_accepted / v.spec_drafted : 0.0;
        r.extra["spec_mean_accepted"] = v.spec_rounds > 0 ? v.spec_accepted / v.spec_rounds : 0.0;
      }
      if (v.mm_secs > 0) r.extra["prompt_matmul_gmacs"] = v.mm_macs / v.mm_secs / 1e9;
      if (v.gemm_secs > 0) {
        r.extra["prompt_gemm_gmacs"] = v.gemm_macs / v.gemm_secs / 1e9;
        r.extra["prompt_gemm_mac_share"] = v.gemm_macs / v.mm_macs;
      }
      if (!v.paired_bandwidth_fracs.empty()) {
        auto& f = v.paired_bandwidth_fracs;
        std::sort(f.begin(), f.end());
        const size_t n = f.size();
        r.extra["decode_bandwidth_frac_paired"] = n % 2 ? f[n / 2] : 0.5 * (f[n / 2 - 1] + f[n / 2]);
      }
      if (v.gen_secs > 0) {
        r.extra["decode_weight_gbs"] = v.gen_bytes / v.gen_secs / 1e9;
        if (v.token_weights_read_gbs > 0) {
          r.extra["decode_plain_read_gbs"] = v.token_weights_read_gbs;
          r.extra["decode_plain_read_frac"] = v.gen_bytes / v.gen_secs / 1e9 / v.token_weights_read_gbs;
        }
        if (v.gen_mm_secs > 0) {
          r.extra["decode_matmul_time_share"] = v.gen_mm_secs / v.gen_secs;
          r.extra["decode_matmul_gbs"] = v.gen_bytes / v.gen_mm_secs / 1e9;
        }
      }
      results.push_back(r);
      if (v.decode_tokens > 0) {
        // --roofline: each kind's weights in one decoded token read plainly, right after the repetitions:
        // the best of three rounds of one pass per kind, so that between two reads of a kind the others
        // (the rest of the token's weights) push it out of the caches, as decode finds it. Kinds under
        // 64 MiB a token are left out: their reads last microseconds and came partly from the caches
        // (E2B's 7 MiB per-layer-input products "read" at 85-128 GB/s on a Zen 5 VM whose memory gave 60).
        std::map<std::string, double> plain_gbs;
        for (int round = 0; round < 3; ++round) {
          for (const auto& [kind, t] : v.token_products) {
            if (t.weight_bytes < double(64 << 20)) continue;
            plain_gbs[kind] = std::max(plain_gbs[kind], measure_read_bandwidth_over(&pool, t.spans, 1));
          }
        }
        product_tables.push_back(products_table(r.test + " " + variant_label(r), v.decode_products,
                                                v.decode_tokens,
                                                v.token_products.empty() ? nullptr : &plain_gbs));
      }
    }
  }

  if (a.on("--roofline")) {
    // Against the highest peak measured during the run (at the start, before and after each repetition): the
    // machine's speed drifts on a shared host, and a slow moment during one peak measurement must not
    // flatter the fractions.
    for (auto& r : results) {
      auto gemm = r.extra.find("prompt_gemm_gmacs");
      if (gemm != r.extra.end() && peaks.int8_gmacs > 0) {
        r.extra["prompt_gemm_int8_peak_frac"] = gemm->second / peaks.int8_gmacs;
      }
      auto decode = r.extra.find("decode_weight_gbs");
      if (decode != r.extra.end() && peaks.read_gbs > 0) r.extra["decode_bandwidth_frac"] = decode->second / peaks.read_gbs;
    }
  }

  if (any_spec) {
    for (const auto& r : results) {
      auto it = r.extra.find("spec_acceptance");
      if (it == r.extra.end()) continue;
      std::printf("spec %s %s: acceptance %.1f %% (%.0f drafted), mean accepted length %.2f, %.2f t/s\n",
                  r.switches.back().second.c_str(), r.test.c_str(), it->second * 100, r.extra.at("spec_drafted"),
                  r.extra.at("spec_mean_accepted"), r.avg_ts);
    }
  }
  if (out_fmt == "json") {
    std::printf("%s\n", bench::json_array(results).c_str());
  } else {
    std::printf("%s\n", bench::markdown_table(results).c_str());
    std::printf("%s", bench::speedup_lines(results).c_str());
    for (const auto& r : results)
      std::printf("plan: %s %s: %.3f GFLOP per token\n", r.test.c_str(),
                  r.switches.empty() ? "" : (r.switches[0].first + "=" + r.switches[0].second).c_str(), r.flops_per_token / 1e9);
    if (a.on("--roofline")) {
      std::printf(
          "\nroofline (peaks: the highest measured during the run, at the start and right before\n"
          "(and after) each repetition, with the running kernel set's instructions:\n"
          "int8 (%s: %s) %.0f GMAC/s, read (%s: %s) %.1f GB/s):\n",
          peaks.kernel_set, peaks.int8_instr, peaks.int8_gmacs, peaks.kernel_set, peaks.read_instr,
          peaks.read_gbs);
      std::printf(
          "| test | variant | prompt int8 GEMMs GMAC/s | of int8 peak | their share of prompt MACs "
          "| all prompt matmuls GMAC/s | decode weight GB/s | of read bandwidth | of it at the time "
          "| plain read of its weights GB/s | of that | decode time in matmuls | GB/s inside them |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
      for (const auto& r : results) {
        auto get = [&](const char* k) { auto it = r.extra.find(k); return it == r.extra.end() ? -1.0 : it->second; };
        const std::string variant = variant_label(r);
        auto cell = [](double v, const char* f) { char b[32]; if (v < 0) return std::string("-"); std::snprintf(b, sizeof b, f, v); return std::string(b); };
        auto pct = [&](const char* k) { return cell(get(k) < 0 ? -1.0 : get(k) * 100, "%.1f %%"); };
        std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.test.c_str(),
                    variant.c_str(), cell(get("prompt_gemm_gmacs"), "%.1f").c_str(),
                    pct("prompt_gemm_int8_peak_frac").c_str(), pct("prompt_gemm_mac_share").c_str(),
                    cell(get("prompt_matmul_gmacs"), "%.1f").c_str(),
                    cell(get("decode_weight_gbs"), "%.2f").c_str(), pct("decode_bandwidth_frac").c_str(),
                    pct("decode_bandwidth_frac_paired").c_str(),
                    cell(get("decode_plain_read_gbs"), "%.2f").c_str(), pct("decode_plain_read_frac").c_str(),
                    pct("decode_matmul_time_share").c_str(), cell(get("decode_matmul_gbs"), "%.2f").c_str());
      }
      std::printf(
          "(int8 GEMMs: matrix products of quantized weights with more than 4 rows; the rest of\n"
          " the prompt's matmuls are the F32 PLE projection and the bandwidth-bound 1-row products\n"
          " of the pruned tail and head; decode: weight bytes per token over the whole token time,\n"
          " as a share of the run's highest read bandwidth and (the median over repetitions) of the\n"
          " one measured right before and after each repetition (the read bandwidth at a moment: the\n"
          " faster of the read loop over its own buffer and the same loads over the weight bytes one\n"
          " decoded token streams, where they lie); the highest rate of the latter alone and decode's\n"
          " share of it; then the share of the token's time spent inside the matrix products and the\n"
          " bandwidth they reach while running)\n");
      // Where the weights themselves read much slower than the read loop's own (fresh) buffer, decode
      // cannot reach the bandwidth, and on a VM the likely reason is the memory under a long-held page
      // cache (model/packed_cache.h, read_packed_cache): say so, and what helps.
      double weights_gbs = 0;
      for (const auto& r : results) {
        const auto it = r.extra.find("decode_plain_read_gbs");
        if (it != r.extra.end() && it->second > 0)
          weights_gbs = weights_gbs > 0 ? std::min(weights_gbs, it->second) : it->second;
      }
      if (weights_gbs > 0 && weights_gbs < 0.9 * peaks.read_gbs && !model->packed.mappings().empty()) {
        std::printf(
            "note: the weights read at %.1f GB/s where they lie, %.0f %% of the read bandwidth:\n"
            " the memory under a page cache that has held a file for a while can be slower than\n"
            " fresh memory (seen on VMs); --pack-in-memory reads the packed weights into this\n"
            " process's memory at load instead\n",
            weights_gbs, 100 * weights_gbs / peaks.read_gbs);
      }
    }
    for (const std::string& t : product_tables) std::printf("%s", t.c_str());
    std::printf("memory: peak RSS %s, KV cache %s (%s, %d cells), weights packed %s (%s%s)\n",
                human_bytes(double(peak_rss_bytes())).c_str(), human_bytes(double(kv.bytes())).c_str(),
                kv_type_name(kv_type), max_ctx, human_bytes(double(model->packed.bytes())).c_str(),
                model->packed_origin.empty() ? "packed at load" : model->packed_origin.c_str(),
                small_pages_note(model->packed).c_str());
  }
  if (a.has("--svg")) {
    std::ofstream f(a.str("--svg"));
    if (!f) throw std::runtime_error("bench: cannot write --svg " + a.str("--svg"));
    f << bench::svg_chart(results, "gem4 bench: " + model_type + ", " + std::to_string(n_threads) + " threads");
  }
  set_use_packed(true);
  return 0;
}

}  // namespace gem4::cli
