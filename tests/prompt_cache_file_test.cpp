// The on-disk prompt cache (generate/prompt_cache_file.h): entries come back bit for bit, the longest
// usable prefix wins, and nothing from a damaged, partial or foreign entry is ever handed out.
#include "generate/prompt_cache_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gguf/gguf_writer.h"
#include "kernels/fnv1a.h"

namespace gem4::generate {
namespace {

namespace fs = std::filesystem;

constexpr int kC = 16;                // tokens per chunk: small, so that the tests stay small
constexpr size_t kChunkBytes = 1000;  // not a multiple of anything, to catch offset slips

PromptCacheKey test_key() {
  PromptCacheKey k;
  k.model_id = 0x1234;
  k.layout = "f16 L4 k128 v128";
  k.chunk_tokens = kC;
  k.chunk_bytes = kChunkBytes;
  return k;
}

// Chunk i of `tokens` as the KV of a model would be: a function of the tokens up to its end (and of
// `variant`, so that two entries of the same tokens can be told apart).
std::vector<uint8_t> chunk_of(const std::vector<int32_t>& tokens, int i, uint64_t variant = 0) {
  uint64_t h = fnv1a(tokens.data(), size_t(i + 1) * kC * 4, fnv1a(&variant, sizeof variant));
  std::vector<uint8_t> out(kChunkBytes);
  for (auto& b : out) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    b = uint8_t(h >> 56);
  }
  return out;
}

std::vector<int32_t> sequence(int n, int32_t start) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = start + i * 7;
  return t;
}

bool save(PromptCacheDir& d, const std::vector<int32_t>& tokens, int n_chunks, uint64_t variant = 0,
          std::string* why = nullptr) {
  return d.save(
      tokens, n_chunks,
      [&](int i, uint8_t* dst) { std::memcpy(dst, chunk_of(tokens, i, variant).data(), kChunkBytes); }, why);
}

// What load hands out, chunk by chunk, checked to come in order 0, 1, ...
std::vector<std::vector<uint8_t>> load(PromptCacheDir& d, const std::vector<int32_t>& tokens,
                                       int max_chunks = 1 << 20, std::string* why = nullptr) {
  std::vector<std::vector<uint8_t>> got;
  const int n = d.load(
      tokens, max_chunks,
      [&](int i, const uint8_t* data) {
        EXPECT_EQ(i, int(got.size()));
        got.emplace_back(data, data + kChunkBytes);
      },
      why);
  EXPECT_EQ(n, int(got.size()));
  return got;
}

// got[i] == chunk_of(tokens, i, variant) for every chunk handed out.
void expect_chunks(const std::vector<std::vector<uint8_t>>& got, const std::vector<int32_t>& tokens,
                   uint64_t variant) {
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i], chunk_of(tokens, int(i), variant)) << "chunk " << i;
}

class PromptCache : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("gem4_prompt_cache_" + std::to_string(getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    dir_ = (root_ / "pc").string();
  }
  void TearDown() override { fs::remove_all(root_); }

  std::vector<std::string> files(const std::string& ending) const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      if (name.size() >= ending.size() &&
          name.compare(name.size() - ending.size(), ending.size(), ending) == 0) {
        out.push_back(e.path().string());
      }
    }
    return out;
  }
  std::vector<std::string> entries() const { return files(".gem4pc"); }
  // Saves the whole chunks of `tokens`; returns the path of the entry file it made ("" if none).
  std::string save_new(PromptCacheDir& d, const std::vector<int32_t>& tokens, uint64_t variant = 0) {
    const auto before = entries();
    std::string why;
    EXPECT_TRUE(save(d, tokens, int(tokens.size() / kC), variant, &why)) << why;
    for (const auto& e : entries()) {
      if (std::find(before.begin(), before.end(), e) == before.end()) return e;
    }
    return "";
  }
  std::vector<std::string> temporaries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename().string().find(".gem4pc.tmp-") != std::string::npos)
        out.push_back(e.path().string());
    }
    return out;
  }

  fs::path root_;
  std::string dir_;
};

void flip_bit(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << path;
  f.seekg(std::streamoff(offset));
  char c = 0;
  f.read(&c, 1);
  c ^= 0x10;
  f.seekp(std::streamoff(offset));
  f.write(&c, 1);
}

void set_mtime(const std::string& path, int64_t unix_seconds) {
  struct timespec t[2] = {{unix_seconds, 0}, {unix_seconds, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), t, 0), 0) << path;
}

TEST_F(PromptCache, RoundTripAcrossRestart) {
  const auto t = sequence(5 * kC + 3, 100);
  {
    PromptCacheDir d(dir_, test_key(), 1 << 20);
    std::string why;
    ASSERT_TRUE(save(d, t, 5, 0, &why)) << why;
  }
  ASSERT_EQ(entries().size(), 1u);
  EXPECT_TRUE(temporaries().empty());
  PromptCacheDir d(dir_, test_key(), 1 << 20);
  // Longer than the entry: the entry's 5 chunks; the same tokens: the same.
  auto longer = t;
  longer.insert(longer.end(), {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17});
  const auto got = load(d, longer);
  ASSERT_EQ(got.size(), 5u);
  expect_chunks(got, t, 0);
  EXPECT_EQ(load(d, t).size(), 5u);
  // Shorter than one chunk: nothing.
  EXPECT_EQ(load(d, std::vector<int32_t>(t.begin(), t.begin() + kC - 1)).size(), 0u);
}

TEST_F(PromptCache, LongestPrefixWins) {
  PromptCacheDir d(dir_, test_key(), 1 << 20);
  const auto t = sequence(6 * kC, 100);
  auto other = t;  // shares chunk 0 with t
  for (size_t i = kC; i < other.size(); ++i) other[i] += 1;
  auto third = t;  // shares chunks 0..2 with t
  for (size_t i = 3 * kC; i < third.size(); ++i) third[i] += 2;
  auto second = t;  // shares chunks 0..1 with t
  for (size_t i = 2 * kC; i < second.size(); ++i) second[i] += 3;
  ASSERT_TRUE(save(d, other, 6, 1));
  ASSERT_TRUE(save(d, third, 4, 3));
  ASSERT_TRUE(save(d, second, 5, 2));
  EXPECT_EQ(entries().size(), 3u);
  auto got = load(d, t);
  ASSERT_EQ(got.size(), 3u);
  expect_chunks(got, third, 3);
  got = load(d, other);
  ASSERT_EQ(got.size(), 6u);
  expect_chunks(got, other, 1);
  got = load(d, second, 4);
  ASSERT_EQ(got.size(), 4u);
  expect_chunks(got, second, 2);
}

TEST_F(PromptCache, PartialPrefixStopsAtTheFirstDifferentChunk) {
  PromptCacheDir d(dir_, test_key(), 1 << 20);
  const auto t = sequence(5 * kC, 100);
  ASSERT_TRUE(save(d, t, 5));
  auto q = t;
  q[2 * kC + 3] = 99999;  // inside chunk 2 (the third)
  auto got = load(d, q);
  ASSERT_EQ(got.size(), 2u);
  expect_chunks(got, t, 0);
  q[0] = 99999;
  EXPECT_EQ(load(d, q).size(), 0u);
}

TEST_F(PromptCache, MaxChunksIsRespected) {
  PromptCacheDir d(dir_, test_key(), 1 << 20);
  const auto t = sequence(5 * kC, 100);
  ASSERT_TRUE(save(d, t, 5));
  EXPECT_EQ(load(d, t, 2).size(), 2u);
  EXPECT_EQ(load(d, t, 0).size(), 0u);
  EXPECT_EQ(load(d, t, -1).size(), 0u);
  EXPECT_EQ(load(d, t, 9).size(), 5u);
}

TEST_F(PromptCache, CoveredPrefixIsSkippedAndShorterEntriesReplaced) {
  PromptCacheDir d(dir_, test_key(), 1 << 20);
  const auto t = sequence(8 * kC, 100);
  std::string why;
  ASSERT_TRUE(save(d, t, 4, 0, &why)) << why;
  EXPECT_FALSE(save(d, t, 2, 0, &why));
  EXPECT_NE(why.find("already saved"), std::string::npos) << why;
  EXPECT_FALSE(save(d, t, 4, 0, &why));
  ASSERT_TRUE(save(d, t, 6, 0, &why)) << why;
  EXPECT_NE(why.find("replaced 1"), std::string::npos) << why;
  const auto list = d.list();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].n_chunks, 6);
  EXPECT_EQ(list[0].n_tokens, size_t(6 * kC));
  EXPECT_TRUE(list[0].usable) << list[0].why_not;
  // Bad requests: false with a reason, no file.
  EXPECT_FALSE(save(d, t, 0, 0, &why));
  EXPECT_FALSE(save(d, t, 9, 0, &why));
  EXPECT_NE(why.find("need"), std::string::npos) << why;
  EXPECT_EQ(entries().size(), 1u);
}

TEST_F(PromptCache, KilledWriterLeavesNoEntry) {
  const auto t = sequence(200 * kC, 100);
  {
    PromptCacheDir d(dir_, test_key(), 1ull << 30);
    ASSERT_TRUE(save(d, t, 2, 7));  // an older complete entry of the same prefix
  }
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    PromptCacheDir d(dir_, test_key(), 1ull << 30);
    d.save(t, 200, [&](int i, uint8_t* dst) {
      std::memcpy(dst, chunk_of(t, i).data(), kChunkBytes);
      if (i == 20 && ::write(ready[1], "x", 1) != 1) ::_exit(3);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
    ::_exit(0);  // too late: the parent kills this process in the middle of the save
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1) << "the child did not start writing";
  ::close(ready[0]);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child finished before it was killed";

  EXPECT_EQ(entries().size(), 1u) << "only the older complete entry";
  EXPECT_EQ(temporaries().size(), 1u) << "the killed writer's temporary";
  PromptCacheDir d(dir_, test_key(), 1ull << 30);
  EXPECT_TRUE(temporaries().empty()) << "a new PromptCacheDir removes the temporaries of dead writers";
  const auto got = load(d, t);
  ASSERT_EQ(got.size(), 2u);
  expect_chunks(got, t, 7);
}

TEST_F(PromptCache, TruncatedEntryIsDeleted) {
  const auto t = sequence(3 * kC, 100);
  for (const uint64_t cut : {1ull, 500ull, 2000ull}) {
    PromptCacheDir d(dir_, test_key(), 1 << 20);
    ASSERT_TRUE(save(d, t, 3));
    ASSERT_EQ(entries().size(), 1u);
    const std::string path = entries()[0];
    fs::resize_file(path, fs::file_size(path) - cut);
    std::string why;
    EXPECT_EQ(load(d, t, 100, &why).size(), 0u) << "cut " << cut;
    EXPECT_NE(why.find("damaged"), std::string::npos) << why;
    EXPECT_FALSE(fs::exists(path)) << "cut " << cut;
  }
  // Shorter than a header, and empty.
  for (const uint64_t size : {10ull, 0ull}) {
    PromptCacheDir d(dir_, test_key(), 1 << 20);
    ASSERT_TRUE(save(d, t, 3));
    const std::string path = entries()[0];
    fs::resize_file(path, size);
    EXPECT_EQ(load(d, t).size(), 0u);
    EXPECT_FALSE(fs::exists(path));
  }
}

TEST_F(PromptCache, FlippedBitIsNeverHandedOut) {
  const auto t = sequence(4 * kC, 100);
  auto other = t;  // shares chunk 0 with t: the next best entry
  for (size_t i = kC; i < other.size(); ++i) other[i] += 1;
  const PromptCacheKey key = test_key();
  const uint64_t tokens_at = 64 + key.layout.size();
  struct Case {
    const char* what;
    uint64_t offset;
    bool from_end;  // offset counts back from the end of the file
  };
  const Case cases[] = {
      {"magic", 0, false},
      {"version", 8, false},
      {"model id", 16, false},
      {"chunk count", 36, false},
      {"meta hash", 56, false},
      {"layout", 65, false},
      {"tokens", tokens_at + 4 * 17 + 1, false},
      {"chunk hashes", tokens_at + 4 * 4 * kC + 9, false},
      {"first chunk", 4 * kChunkBytes - 3, true},
      {"last chunk", 1, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    fs::remove_all(dir_);
    PromptCacheDir d(dir_, key, 1 << 20);
    ASSERT_TRUE(save(d, std::vector<int32_t>(other.begin(), other.begin() + 2 * kC), 2, 5));
    const std::string path = save_new(d, t);
    ASSERT_FALSE(path.empty());
    flip_bit(path, c.from_end ? fs::file_size(path) - c.offset : c.offset);
    std::string why;
    const auto got = load(d, t, 100, &why);
    // Only the next best entry's one shared chunk, never anything of the damaged one.
    ASSERT_EQ(got.size(), 1u) << why;
    expect_chunks(got, other, 5);
    EXPECT_NE(why.find("damaged"), std::string::npos) << why;
    EXPECT_FALSE(fs::exists(path));
    EXPECT_EQ(entries().size(), 1u);
  }
}

TEST_F(PromptCache, EntriesOfAnotherKeyAreNotUsed) {
  const auto t = sequence(3 * kC, 100);
  {
    PromptCacheDir d(dir_, test_key(), 1 << 20);
    ASSERT_TRUE(save(d, t, 3));
  }
  PromptCacheKey other_model = test_key(), other_layout = test_key(), other_bytes = test_key(),
                 other_tokens = test_key();
  other_model.model_id ^= 1;
  other_layout.layout = "bf16 L4 k128 v128";
  other_bytes.chunk_bytes = kChunkBytes + 8;
  other_tokens.chunk_tokens = kC / 2;
  for (const PromptCacheKey& k : {other_model, other_layout, other_bytes, other_tokens}) {
    PromptCacheDir d(dir_, k, 1 << 20);
    int calls = 0;
    EXPECT_EQ(d.load(t, 100, [&](int, const uint8_t*) { ++calls; }), 0);
    EXPECT_EQ(calls, 0);
    const auto list = d.list();
    ASSERT_EQ(list.size(), 1u);
    EXPECT_FALSE(list[0].usable);
    EXPECT_FALSE(list[0].damaged);
    EXPECT_FALSE(list[0].why_not.empty());
    EXPECT_EQ(list[0].key, test_key());
  }
  EXPECT_EQ(entries().size(), 1u) << "another key's entry is skipped, not deleted";
  PromptCacheDir d(dir_, test_key(), 1 << 20);
  EXPECT_EQ(load(d, t).size(), 3u);
}

TEST_F(PromptCache, SizeCapEvictsTheLeastRecentlyUsed) {
  const auto a = sequence(2 * kC, 1000), b = sequence(2 * kC, 2000), c = sequence(2 * kC, 3000),
             e = sequence(2 * kC, 4000);
  uint64_t entry_bytes = 0;
  {
    PromptCacheDir probe(dir_, test_key(), 1 << 20);
    ASSERT_TRUE(save(probe, a, 2));
    entry_bytes = probe.list().at(0).bytes;
    probe.clear();
  }
  PromptCacheDir d(dir_, test_key(), entry_bytes * 3 + entry_bytes / 2);
  const std::string path_a = save_new(d, a), path_b = save_new(d, b), path_c = save_new(d, c);
  ASSERT_FALSE(path_a.empty() || path_b.empty() || path_c.empty());
  // Ages set by hand: file times follow the kernel's coarse clock, too coarse for back-to-back saves.
  const int64_t now = int64_t(std::time(nullptr));
  set_mtime(path_a, now - 300);
  set_mtime(path_b, now - 200);
  set_mtime(path_c, now - 100);
  // A load is a use: a becomes the most recent.
  ASSERT_EQ(load(d, a).size(), 2u);
  const auto list = d.list();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].path, path_a) << "most recently used first";
  EXPECT_GE(list[0].last_used_unix, now - 5);
  std::string why;
  ASSERT_TRUE(save(d, e, 2, 0, &why)) << why;
  EXPECT_NE(why.find("evicted 1"), std::string::npos) << why;
  EXPECT_TRUE(fs::exists(path_a));
  EXPECT_FALSE(fs::exists(path_b)) << "b was the least recently used";
  EXPECT_TRUE(fs::exists(path_c));
  EXPECT_EQ(entries().size(), 3u);
  EXPECT_EQ(load(d, e).size(), 2u);
  // An entry larger than the whole cap is refused.
  EXPECT_FALSE(save(d, sequence(8 * kC, 5000), 8, 0, &why));
  EXPECT_NE(why.find("larger than"), std::string::npos) << why;
  EXPECT_EQ(entries().size(), 3u);
}

TEST_F(PromptCache, ListAndClear) {
  PromptCacheDir d(dir_, test_key(), 1 << 20);
  ASSERT_TRUE(save(d, sequence(2 * kC, 1000), 2));
  ASSERT_TRUE(save(d, sequence(3 * kC, 2000), 3));
  PromptCacheKey other = test_key();
  other.model_id = 99;
  {
    PromptCacheDir o(dir_, other, 1 << 20);
    ASSERT_TRUE(save(o, sequence(1 * kC, 3000), 1));
  }
  std::ofstream(dir_ + "/notes.txt") << "not an entry";
  std::ofstream(dir_ + "/0000000000000000.gem4pc") << "garbage written after the PromptCacheDir was made";
  const auto list = d.list();
  ASSERT_EQ(list.size(), 4u);
  int usable = 0, damaged = 0, foreign = 0;
  for (const auto& e : list) {
    usable += e.usable;
    damaged += e.damaged;
    foreign += !e.usable && !e.damaged;
    if (e.usable) {
      EXPECT_GT(e.bytes, 2 * kChunkBytes);
    } else if (e.damaged) {
      EXPECT_NE(e.why_not.find("damaged"), std::string::npos);
    } else {
      EXPECT_NE(e.why_not.find("other model"), std::string::npos) << e.why_not;
    }
  }
  EXPECT_EQ(usable, 2);
  EXPECT_EQ(damaged, 1);
  EXPECT_EQ(foreign, 1);
  const auto unjudged = list_prompt_cache_dir(dir_, nullptr);
  ASSERT_EQ(unjudged.size(), 4u);
  for (const auto& e : unjudged) EXPECT_FALSE(e.usable);
  d.clear();
  EXPECT_TRUE(d.list().empty());
  EXPECT_TRUE(fs::exists(dir_ + "/notes.txt")) << "only entries and temporaries are removed";
  EXPECT_EQ(load(d, sequence(2 * kC, 1000)).size(), 0u);
  EXPECT_TRUE(list_prompt_cache_dir(root_.string() + "/no-such-folder", nullptr).empty());
}

// Files a hostile or confused writer could leave under an entry's name: rejected without a crash, a
// hang or a large allocation, and deleted (but for what is not a regular file).
TEST_F(PromptCache, HostileFilesAreRejected) {
  fs::create_directories(dir_);
  auto write = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream(dir_ + "/" + name, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  };
  std::vector<uint8_t> header(64, 0);
  std::memcpy(header.data(), "GEM4PCE", 8);
  auto put = [&](size_t at, uint64_t v, size_t n) { std::memcpy(header.data() + at, &v, n); };
  put(8, 1, 4);  // version
  put(32, kC, 4);
  put(24, kChunkBytes, 8);
  put(36, 0xffffffffu, 4);                 // n_chunks
  put(40, uint64_t(0xffffffffu) * kC, 8);  // n_tokens
  put(48, ~0ull, 8);                       // file_size
  write("a000000000000000.gem4pc", header);
  put(36, 1, 4), put(40, kC, 8), put(12, 0xffffffffu, 4);  // a layout of 4 GiB
  write("b000000000000000.gem4pc", header);
  put(12, 0, 4), put(24, ~0ull / 2, 8);  // sizes that overflow
  write("c000000000000000.gem4pc", header);
  write("d000000000000000.gem4pc", std::vector<uint8_t>(1000, 0xab));
  ASSERT_EQ(::mkfifo((dir_ + "/e000000000000000.gem4pc").c_str(), 0644), 0);
  fs::create_directories(dir_ + "/f000000000000000.gem4pc");

  EXPECT_EQ(list_prompt_cache_dir(dir_, nullptr).size(), 4u) << "the FIFO and the folder are not entries";
  for (const auto& e : list_prompt_cache_dir(dir_, nullptr)) EXPECT_TRUE(e.damaged) << e.path;
  PromptCacheDir d(dir_, test_key(), 1 << 20);
  const auto t = sequence(2 * kC, 100);
  EXPECT_EQ(load(d, t).size(), 0u);
  ASSERT_TRUE(save(d, t, 2));
  EXPECT_EQ(load(d, t).size(), 2u);
  EXPECT_EQ(entries().size(), 3u) << "the damaged files are gone; the FIFO and folder stay";
  EXPECT_TRUE(fs::exists(dir_ + "/e000000000000000.gem4pc"));
  EXPECT_TRUE(fs::is_directory(dir_ + "/f000000000000000.gem4pc"));
}

TEST_F(PromptCache, FolderThatCannotBeMadeThrowsNamingIt) {
  std::ofstream(root_ / "file") << "x";
  const std::string bad = (root_ / "file" / "pc").string();
  try {
    PromptCacheDir d(bad, test_key(), 1 << 20);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
  PromptCacheKey no_chunk = test_key();
  no_chunk.chunk_bytes = 0;
  EXPECT_THROW(PromptCacheDir(dir_, no_chunk, 1 << 20), std::invalid_argument);
}

// A small GGUF file: a little metadata and `tensor_bytes` of F32 tensor data.
void write_small_gguf(const std::string& path, size_t tensor_bytes, const std::string& name = "tiny") {
  gguf::GgufWriter w;
  w.set_string("general.architecture", "test");
  w.set_string("general.name", name);
  std::vector<uint8_t> data(tensor_bytes);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 31 + 7);
  w.add_tensor("w", {int64_t(tensor_bytes / 4)}, GgmlType::F32, std::move(data));
  w.write(path);
}

TEST_F(PromptCache, ModelFileIdentityFollowsContentsNotPaths) {
  for (const size_t tensor_bytes : {size_t(4096), size_t(4 << 20)}) {  // all hashed; sampled
    SCOPED_TRACE(tensor_bytes);
    const std::string a = (root_ / "a.gguf").string(), copy = (root_ / "copy.gguf").string(),
                      renamed = (root_ / "other-name.gguf").string();
    write_small_gguf(a, tensor_bytes);
    fs::copy_file(a, copy, fs::copy_options::overwrite_existing);
    const uint64_t id = model_file_identity(a);
    EXPECT_EQ(model_file_identity(copy), id);
    fs::rename(copy, renamed);
    EXPECT_EQ(model_file_identity(renamed), id);
    // One byte of tensor data (the last byte: in the last sampled block of a large file).
    flip_bit(renamed, fs::file_size(renamed) - 1);
    EXPECT_NE(model_file_identity(renamed), id);
    // Other metadata, same tensor data.
    write_small_gguf(renamed, tensor_bytes, "tiny2");
    EXPECT_NE(model_file_identity(renamed), id);
    fs::remove(renamed);
  }
  const std::string missing = (root_ / "missing.gguf").string();
  try {
    model_file_identity(missing);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
}

// ---- gem4 cache list|clear, through the binary ----

struct CommandResult {
  int rc = -1;
  std::string out, err;
};

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

CommandResult gem4(const std::string& args, const std::string& scratch) {
  const std::string cmd =
      std::string("'") + GEM4_BINARY + "' " + args + " > '" + scratch + ".out' 2> '" + scratch + ".err'";
  CommandResult r;
  const int status = std::system(cmd.c_str());
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_all(scratch + ".out");
  r.err = read_all(scratch + ".err");
  return r;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

int count_containing(const std::vector<std::string>& lines, const std::string& s) {
  int n = 0;
  for (const auto& l : lines) n += l.find(s) != std::string::npos;
  return n;
}

TEST_F(PromptCache, CliListsAndClears) {
  const std::string model = (root_ / "model.gguf").string();
  write_small_gguf(model, 4096);
  PromptCacheKey key = test_key();
  key.model_id = model_file_identity(model);
  {
    PromptCacheDir d(dir_, key, 1 << 20);
    ASSERT_TRUE(save(d, sequence(3 * kC, 100), 3));
    PromptCacheKey other = key;
    other.model_id ^= 1;
    PromptCacheDir o(dir_, other, 1 << 20);
    ASSERT_TRUE(save(o, sequence(2 * kC, 200), 2));
  }
  std::ofstream(dir_ + "/1111111111111111.gem4pc") << "garbage";
  const std::string scratch = (root_ / "cmd").string();
  const std::string pc = " --prompt-cache '" + dir_ + "'";

  CommandResult r = gem4("cache list" + pc, scratch);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(count_containing(lines, "unknown"), 2) << r.out;
  EXPECT_EQ(count_containing(lines, "damaged"), 1) << r.out;
  EXPECT_EQ(count_containing(lines, "48 tokens      3 chunks"), 1) << r.out;
  EXPECT_EQ(count_containing(lines, "layout \"f16 L4 k128 v128\""), 2) << r.out;
  char id[17];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(key.model_id));
  EXPECT_EQ(count_containing(lines, std::string("model ") + id), 1) << r.out;
  EXPECT_NE(r.err.find("3 entries"), std::string::npos) << r.err;

  r = gem4("cache list -m '" + model + "'" + pc, scratch);
  ASSERT_EQ(r.rc, 0) << r.err;
  lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(count_containing(lines, "  usable  "), 1) << r.out;
  EXPECT_EQ(count_containing(lines, "other model"), 1) << r.out;
  EXPECT_EQ(count_containing(lines, "48 tokens      3 chunks"), 1) << r.out;
  EXPECT_EQ(count_containing(lines, "  usable  "), count_containing(lines, "48 tokens")) << r.out;

  r = gem4("cache clear" + pc, scratch);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("removed 3 entries"), std::string::npos) << r.err;
  EXPECT_TRUE(entries().empty());
  r = gem4("cache list" + pc, scratch);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "");

  EXPECT_EQ(gem4("cache list", scratch).rc, 2) << "no --prompt-cache";
  EXPECT_EQ(gem4("cache bogus" + pc, scratch).rc, 2);
  r = gem4("cache --help", scratch);
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("unknown"), std::string::npos) << r.out;
  EXPECT_EQ(gem4("cache list -m '" + (root_ / "missing.gguf").string() + "'" + pc, scratch).rc, 1);
}

}  // namespace
}  // namespace gem4::generate
