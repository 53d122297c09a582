// gem4 cache list|clear --prompt-cache DIR: what a prompt-cache folder holds, and emptying it
// (generate/prompt_cache_file.h).
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "generate/prompt_cache_file.h"

namespace gem4::cli {

namespace {

std::string local_time(int64_t unix_seconds) {
  const std::time_t t = std::time_t(unix_seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// The entry's state for the model given (-m), or "unknown" without one: the KV layout depends on the
// options of the run (cache type, ...), so only the model part of the key can be checked here.
std::string status_of(const generate::PromptCacheEntryInfo& e, bool have_model, uint64_t model_id) {
  if (e.damaged) return e.why_not + " (load deletes it)";
  if (!have_model) return "unknown";
  return e.key.model_id == model_id ? "usable" : "other model";
}

}  // namespace

int cmd_cache(int argc, char** argv, int first) {
  Args a("cache",
         "gem4 cache list|clear --prompt-cache DIR [-m MODEL]\n"
         "list: one line per entry of the prompt cache in DIR, most recently used first: tokens, chunks,\n"
         "  size, last use, the model id and KV layout it was saved with, and its state. The state is\n"
         "  'damaged: ...' for an entry whose header, sizes or checksum are wrong (the next load deletes\n"
         "  it), else 'unknown' without -m; with -m MODEL, 'usable' when the entry was saved from a file\n"
         "  with that model's contents (any copy of it) and 'other model' otherwise. Whether the layout\n"
         "  suits a run depends on that run's KV options; the layout is shown to compare. Chunk data is\n"
         "  checked when an entry is loaded, not here.\n"
         "clear: removes every entry (of any model) and temporary file in DIR; other files stay.");
  a.value("--prompt-cache", "DIR", "the prompt-cache folder");
  a.value("-m,--model", "FILE", "GGUF model to judge the entries against (list; only its identity is read)");
  if (!a.parse(argc, argv, first)) {
    std::printf("%s", a.help().c_str());
    return 0;
  }
  if (a.positional().size() != 1 || (a.positional()[0] != "list" && a.positional()[0] != "clear")) {
    throw ArgError("cache: expected 'list' or 'clear'");
  }
  if (!a.has("--prompt-cache") || a.str("--prompt-cache").empty())
    throw ArgError("cache: --prompt-cache DIR is required");
  const std::string dir = a.str("--prompt-cache");
  std::error_code ec;
  const bool exists = std::filesystem::is_directory(dir, ec);

  if (a.positional()[0] == "clear") {
    if (a.has("-m")) throw ArgError("cache clear: -m is not used (clear removes the entries of every model)");
    const int removed = exists ? generate::clear_prompt_cache_dir(dir) : 0;
    std::fprintf(stderr, "removed %d entries from %s\n", removed, dir.c_str());
    return 0;
  }
  const bool have_model = a.has("-m");
  const uint64_t model_id = have_model ? generate::model_file_identity(a.str("-m")) : 0;
  if (!exists) {
    std::fprintf(stderr, "%s: no such folder: no entries\n", dir.c_str());
    return 0;
  }
  uint64_t total = 0;
  const auto entries = generate::list_prompt_cache_dir(dir, nullptr);
  for (const auto& e : entries) {
    total += e.bytes;
    const std::string name = std::filesystem::path(e.path).filename().string();
    if (e.damaged) {
      std::printf("%8s tokens %6s chunks %11s  last used %s  %s  %s\n", "?", "?",
                  human_bytes(double(e.bytes)).c_str(), local_time(e.last_used_unix).c_str(),
                  status_of(e, have_model, model_id).c_str(), name.c_str());
      continue;
    }
    std::printf("%8zu tokens %6d chunks %11s  last used %s  model %016llx  layout \"%s\"  %s  %s\n",
                e.n_tokens, e.n_chunks, human_bytes(double(e.bytes)).c_str(),
                local_time(e.last_used_unix).c_str(), static_cast<unsigned long long>(e.key.model_id),
                e.key.layout.c_str(), status_of(e, have_model, model_id).c_str(), name.c_str());
  }
  if (have_model)
    std::fprintf(stderr, "model %s: id %016llx\n", a.str("-m").c_str(),
                 static_cast<unsigned long long>(model_id));
  std::fprintf(stderr, "%zu entries, %s in %s\n", entries.size(), human_bytes(double(total)).c_str(),
               dir.c_str());
  return 0;
}

}  // namespace gem4::cli
