// The packed-weight cache (model/packed_cache.h): a second load maps what the first one wrote, bit for
// bit the same copies and logits; a cache that no longer matches its GGUF file (file changed, cache
// truncated or edited, another layout) is never used; a folder that cannot be written costs nothing but
// the cache.
#include "model/packed_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "kernels/packed_matrix.h"
#include "kernels/thread_pool.h"
#include "model/forward.h"
#include "model/generator.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace gem4 {
namespace {

namespace fs = std::filesystem;

class PackedCache : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("gem4_packed_cache_" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    gguf_ = (root_ / "model.gguf").string();
    dir_ = (root_ / "cache").string();
    GeneratorSpec spec;
    spec.preset = "tiny";
    spec.type = GgmlType::Q8_0;  // Q8_0 matrices and a Q6_K embedding table: two packed layouts
    spec.seed = 7;
    ThreadPool pool(2);
    write_generated_model(spec, gguf_, &pool);
    // The writer leaves packed_cache_reserve_bytes free (1-4 GiB) and writes no cache where that does
    // not fit: say so once here, not through every expectation that a cache was written.
    const fs::space_info disk = fs::space(root_);
    const double reserve = packed_cache_reserve_bytes(double(disk.capacity));
    ASSERT_GT(double(disk.available), reserve + double(64 << 20))
        << "the packed-cache tests write caches in " << root_ << ", whose disk has " << (disk.available >> 20)
        << " MiB free: under the " << int64_t(reserve) / (1 << 20)
        << " MiB (+64) the cache writer leaves free, so it would write none; free some space";
  }
  void TearDown() override { fs::remove_all(root_); }

  std::unique_ptr<Model> load(const std::string& dir) { return Model::load(gguf_, LoadOptions{dir}); }
  std::unique_ptr<Model> load_in_memory(const std::string& dir) {
    LoadOptions o{dir};
    o.packed_in_memory = true;
    return Model::load(gguf_, o);
  }
  std::string cache_file() const { return packed_cache_path(dir_, gguf_); }

  fs::path root_;
  std::string gguf_, dir_;
};

// Every matrix of the model with its packed copy (or none), in one fixed order.
std::vector<const MatrixView*> matrices(const Model& m) {
  std::vector<const MatrixView*> out = {&m.weights.token_embd, &m.weights.ple_model_proj};
  for (const LayerWeights& l : m.weights.layers) {
    for (const MatrixView* v : {&l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output, &l.ffn_gate, &l.ffn_up,
                                &l.ffn_down, &l.ple_inp_gate, &l.ple_proj}) {
      out.push_back(v);
    }
  }
  return out;
}

// The packed copies of a and b hold the same bytes; returns how many matrices have one.
int expect_same_packed(const Model& a, const Model& b) {
  const auto ma = matrices(a), mb = matrices(b);
  int packed = 0;
  for (size_t i = 0; i < ma.size(); ++i) {
    EXPECT_EQ(ma[i]->packed == nullptr, mb[i]->packed == nullptr) << "matrix " << i;
    if (!ma[i]->packed || !mb[i]->packed) continue;
    ++packed;
    EXPECT_EQ(std::memcmp(ma[i]->packed, mb[i]->packed, packed_matrix_bytes(*ma[i])), 0) << "matrix " << i;
  }
  return packed;
}

std::vector<float> logits(const Model& m) {
  ThreadPool pool(2);
  KvCache kv(m.config, 16, 1, 16, KvType::F32);
  Forward f(m, &pool);
  f.ubatch = 16;
  Batch b;
  for (int i = 0; i < 6; ++i) b.push_back({int32_t(2 + 3 * i), i, 0, i == 5, false});
  ForwardOutputs out;
  f.run(b, kv, out);
  return out.logits;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

TEST_F(PackedCache, SecondLoadMapsTheCopiesTheFirstWrote) {
  if (!packed_kernels_active()) {
    // Only the scalar set has no kernels for packed copies; there nothing is packed or written.
    auto m = load(dir_);
    EXPECT_EQ(m->packed.bytes(), 0u);
    EXPECT_FALSE(fs::exists(cache_file()));
    return;
  }
  auto plain = load("");
  EXPECT_EQ(plain->packed_origin, "packed at load (no cache)");
  EXPECT_FALSE(fs::exists(dir_)) << "no cache folder: nothing may be written";

  auto first = load(dir_);
  EXPECT_TRUE(starts_with(first->packed_origin, "packed at load (no cache file yet")) << first->packed_origin;
  EXPECT_NE(first->packed_origin.find("written to " + cache_file()), std::string::npos) << first->packed_origin;
  ASSERT_TRUE(fs::exists(cache_file()));
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_EQ(e.path().string(), cache_file()) << "leftover file";

  auto second = load(dir_);
  EXPECT_EQ(second->packed_origin, "mapped from " + cache_file());
  EXPECT_EQ(second->packed.bytes(), plain->packed.bytes());
  EXPECT_GT(expect_same_packed(*plain, *second), 10);
  expect_same_packed(*first, *second);
  const auto want = logits(*plain), got = logits(*second);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(want, got) << "logits from mapped copies differ from freshly packed ones";
  EXPECT_EQ(want, logits(*first)) << "logits from copies packed into the cache file differ";
}

// The path /proc/self/maps gives the mapping that holds p ("" for anonymous memory); "?" if none does.
std::string mapping_path_of(const void* p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto at = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx", &lo, &hi) != 2 || at < lo || at >= hi) continue;
    const size_t slash = line.find('/');
    return slash == std::string::npos ? "" : line.substr(slash);
  }
  return "?";
}

// With packed_in_memory the copies are read from the cache file into anonymous memory (first load: packed
// into the new cache file, then read from it), the same bytes and logits as packing in memory.
TEST_F(PackedCache, InMemoryLoadReadsTheCacheIntoItsOwnMemory) {
  if (!packed_kernels_active()) GTEST_SKIP() << "the scalar kernel set reads no packed copies";
  auto plain = load("");
  const auto want = logits(*plain);
  auto first = load_in_memory(dir_);
  EXPECT_TRUE(starts_with(first->packed_origin, "packed at load (no cache file yet")) << first->packed_origin;
  EXPECT_NE(first->packed_origin.find("written to " + cache_file() + " for later loads"), std::string::npos);
  EXPECT_NE(first->packed_origin.find("; read into memory from it"), std::string::npos)
      << first->packed_origin;
  auto second = load_in_memory(dir_);
  // Every matrix of this file has a packed copy (the F32 PLE projection too): nothing else to copy.
  EXPECT_EQ(second->packed_origin, "read into memory from " + cache_file());
  auto mapped = load(dir_);
  EXPECT_EQ(mapping_path_of(mapped->weights.layers[0].attn_q.packed), cache_file()) << "the check itself";
  EXPECT_EQ(mapping_path_of(mapped->weights.ple_model_proj.data), gguf_) << "the check itself";
  for (const Model* m : {first.get(), second.get()}) {
    EXPECT_TRUE(m->packed.mappings().empty());
    EXPECT_EQ(m->packed.bytes(), plain->packed.bytes());
    EXPECT_GT(expect_same_packed(*plain, *m), 10);
    for (const MatrixView* v : matrices(*m)) {
      if (!v->data) continue;
      // A packed matrix's GGUF data stays in the file mapping (embedding rows are looked up there).
      EXPECT_EQ(mapping_path_of(v->packed ? v->packed : v->data), "") << "a copy outside anonymous memory";
    }
    EXPECT_EQ(want, logits(*m));
  }
  // A cache that no longer matches is rewritten and then read, as without the option.
  fs::resize_file(cache_file(), fs::file_size(cache_file()) / 2);
  auto repaired = load_in_memory(dir_);
  EXPECT_NE(repaired->packed_origin.find("do not match"), std::string::npos) << repaired->packed_origin;
  EXPECT_NE(repaired->packed_origin.find("; read into memory from it"), std::string::npos)
      << repaired->packed_origin;
  expect_same_packed(*plain, *repaired);
}

// Matrices of a type with no packed layout (F16) are copied out of the file mapping into memory too,
// beside the packed copies read from the cache (here the F32 PLE projection's): same logits.
TEST_F(PackedCache, InMemoryLoadCopiesTheMatricesWithoutPackedCopies) {
  if (!packed_kernels_active()) GTEST_SKIP() << "the scalar kernel set reads no packed copies";
  GeneratorSpec spec;
  spec.preset = "tiny";
  spec.type = GgmlType::F16;
  spec.seed = 11;
  ThreadPool pool(2);
  write_generated_model(spec, gguf_, &pool);
  auto plain = load("");
  const auto want = logits(*plain);
  load_in_memory(dir_);
  auto m = load_in_memory(dir_);
  EXPECT_TRUE(starts_with(m->packed_origin, "read into memory from " + cache_file() + "; "))
      << m->packed_origin;
  EXPECT_NE(m->packed_origin.find(" matrices without packed copies ("), std::string::npos)
      << m->packed_origin;
  EXPECT_TRUE(m->packed.mappings().empty());
  int packed = 0, copied = 0;
  for (const MatrixView* v : matrices(*m)) {
    if (!v->data) continue;
    (v->packed ? packed : copied)++;
    EXPECT_EQ(mapping_path_of(v->packed ? v->packed : v->data), "") << "a copy outside anonymous memory";
  }
  EXPECT_EQ(packed, 1) << "the F32 PLE projection";
  EXPECT_GT(copied, 10);
  EXPECT_EQ(want, logits(*m));
}

TEST_F(PackedCache, ChangedModelFileIsRepacked) {
  if (!packed_kernels_active()) GTEST_SKIP() << "the scalar kernel set reads no packed copies";
  load(dir_);
  ASSERT_TRUE(fs::exists(cache_file()));
  // Same bytes, newer modification time: the cache cannot know the file is unchanged.
  fs::last_write_time(gguf_, fs::last_write_time(gguf_) + std::chrono::seconds(5));
  auto m = load(dir_);
  EXPECT_NE(m->packed_origin.find("made from another version of " + gguf_), std::string::npos) << m->packed_origin;
  EXPECT_NE(m->packed_origin.find("written to"), std::string::npos) << m->packed_origin;
  EXPECT_EQ(load(dir_)->packed_origin, "mapped from " + cache_file());
}

TEST_F(PackedCache, DamagedCacheFileIsNeverUsed) {
  if (!packed_kernels_active()) GTEST_SKIP() << "the scalar kernel set reads no packed copies";
  auto plain = load("");
  load(dir_);
  const auto size = fs::file_size(cache_file());
  struct Damage {
    const char* what;
    std::function<void(const std::string&)> apply;
    const char* reason;
  };
  const std::vector<Damage> damages = {
      {"truncated", [&](const std::string& p) { fs::resize_file(p, size / 2); }, "do not match"},
      {"empty", [&](const std::string& p) { fs::resize_file(p, 0); }, "cannot read its header"},
      {"bad magic", [](const std::string& p) {
         std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
         f.write("GGUF", 4);
       }, "not a gem4 packed-weight cache"},
      {"other layout", [](const std::string& p) {
         std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(16);  // layout_fingerprint
         f.write("\x01\x02\x03\x04", 4);
       }, "other packed layouts"},
      {"edited matrix table", [](const std::string& p) {
         std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(80 + 8);  // first entry's type (the header is 80 bytes)
         f.write("\x7f", 1);
       }, "matrix table does not match"},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.what);
    d.apply(cache_file());
    auto m = load(dir_);
    EXPECT_NE(m->packed_origin.find(d.reason), std::string::npos) << m->packed_origin;
    EXPECT_NE(m->packed_origin.find("written to"), std::string::npos) << m->packed_origin;
    expect_same_packed(*plain, *m);
    EXPECT_EQ(fs::file_size(cache_file()), size) << "the rewritten cache is whole again";
    EXPECT_EQ(load(dir_)->packed_origin, "mapped from " + cache_file());
  }
}

TEST_F(PackedCache, WriterRemovesTemporariesOfDeadWriters) {
  if (!packed_kernels_active()) GTEST_SKIP() << "the scalar kernel set reads no packed copies";
  fs::create_directories(dir_);
  const std::string dead = cache_file() + ".tmp-2147483000";  // above any pid_max: no such process
  const std::string alive = cache_file() + ".tmp-" + std::to_string(getpid());
  const std::string other = (fs::path(dir_) / "other.gguf-0123.gem4pack.tmp-2147483000").string();
  for (const std::string& p : {dead, alive, other}) std::ofstream(p) << "partial";
  load(dir_);
  EXPECT_FALSE(fs::exists(dead)) << "a dead writer's temporary is removed";
  EXPECT_TRUE(fs::exists(other)) << "another model's temporaries are left alone";
  EXPECT_TRUE(fs::exists(cache_file()));
  // This process's own temporary was the one just written and renamed.
  EXPECT_FALSE(fs::exists(alive));
}

TEST_F(PackedCache, CachesOfVanishedModelFilesAreRemoved) {
  if (!packed_kernels_active()) GTEST_SKIP() << "the scalar kernel set reads no packed copies";
  const std::string moved = (root_ / "moved.gguf").string();
  fs::copy_file(gguf_, moved);
  Model::load(moved, LoadOptions{dir_});
  const std::string moved_cache = packed_cache_path(dir_, moved);
  ASSERT_TRUE(fs::exists(moved_cache));
  const std::string foreign = (fs::path(dir_) / "foreign.gem4pack").string();
  std::ofstream(foreign) << "not a cache of ours";
  load(dir_);  // writes this model's cache; moved.gguf still exists, so its cache stays
  EXPECT_TRUE(fs::exists(moved_cache));
  fs::remove(moved);
  fs::last_write_time(gguf_, fs::last_write_time(gguf_) + std::chrono::seconds(5));  // force a rewrite
  auto m = load(dir_);
  EXPECT_NE(m->packed_origin.find("written to"), std::string::npos) << m->packed_origin;
  EXPECT_FALSE(fs::exists(moved_cache)) << "the cache of a deleted model file is removed by the next writer";
  EXPECT_TRUE(fs::exists(foreign)) << "files that are not our caches are left alone";
  EXPECT_TRUE(fs::exists(cache_file()));
}

TEST_F(PackedCache, UnwritableFolderOnlyCostsTheCache) {
  if (!packed_kernels_active()) GTEST_SKIP() << "the scalar kernel set reads no packed copies";
  const std::string blocker = (root_ / "a-file").string();
  std::ofstream(blocker) << "not a folder";
  auto m = load(blocker + "/cache");
  EXPECT_NE(m->packed_origin.find("cache not written: cannot create " + blocker + "/cache"), std::string::npos)
      << m->packed_origin;
  EXPECT_GT(m->packed.bytes(), 0u);
  EXPECT_FALSE(logits(*m).empty());
}

// The free space a cache file leaves: 5 % of the filesystem, within [1, 4] GiB.
TEST(PackedCacheReserve, FivePercentWithinOneToFourGiB) {
  constexpr double kGiB = double(1ull << 30);
  EXPECT_EQ(packed_cache_reserve_bytes(8 * kGiB), 1 * kGiB);
  EXPECT_EQ(packed_cache_reserve_bytes(40 * kGiB), 2 * kGiB);
  EXPECT_EQ(packed_cache_reserve_bytes(252e9), 4 * kGiB);
  EXPECT_EQ(packed_cache_reserve_bytes(0), 1 * kGiB);
}

TEST(PackedCacheDir, DefaultFollowsTheEnvironment) {
  struct Saved {
    const char* name;
    std::optional<std::string> value;
  };
  std::vector<Saved> saved;
  for (const char* n : {"GEM4_PACK_CACHE", "XDG_CACHE_HOME", "HOME"}) {
    const char* v = std::getenv(n);
    saved.push_back({n, v ? std::optional<std::string>(v) : std::nullopt});
  }
  setenv("GEM4_PACK_CACHE", "off", 1);
  EXPECT_EQ(default_packed_cache_dir(), "");
  setenv("GEM4_PACK_CACHE", "/x/y", 1);
  EXPECT_EQ(default_packed_cache_dir(), "/x/y");
  unsetenv("GEM4_PACK_CACHE");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(default_packed_cache_dir(), "/xdg/gem4");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(default_packed_cache_dir(), "/home/u/.cache/gem4");
  unsetenv("HOME");
  EXPECT_EQ(default_packed_cache_dir(), "");
  for (const Saved& s : saved) {
    if (s.value) setenv(s.name, s.value->c_str(), 1);
    else unsetenv(s.name);
  }
  // Two paths, two cache files; the same path spelled two ways, one.
  EXPECT_NE(packed_cache_path("/c", "/m/a.gguf"), packed_cache_path("/c", "/m/b.gguf"));
  EXPECT_EQ(packed_cache_path("/c", "/m/a.gguf"), packed_cache_path("/c", "/m/./x/../a.gguf"));
}

TEST(PackedLayout, FingerprintIsStable) {
  EXPECT_EQ(packed_layout_fingerprint(), packed_layout_fingerprint());
  EXPECT_NE(packed_layout_fingerprint(), 0u);
}

}  // namespace
}  // namespace gem4
