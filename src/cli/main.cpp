// gem4: the command-line front end. Dispatches to one subcommand; reports errors without a crash.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**, int);
  const char* summary;
};

const Command kCommands[] = {
    {"run", gem4::cli::cmd_run, "generate text from a prompt (streaming)"},
    {"chat", gem4::cli::cmd_chat, "interactive multi-turn chat in the terminal"},
    {"serve", gem4::cli::cmd_serve, "OpenAI-compatible HTTP server"},
    {"bench", gem4::cli::cmd_bench, "prompt-processing and generation benchmark (llama-bench style)"},
    {"perplexity", gem4::cli::cmd_perplexity, "perplexity of a text, as llama-perplexity computes it"},
    {"eval", gem4::cli::cmd_eval, "logits for a list of token ids"},
    {"inspect", gem4::cli::cmd_inspect, "metadata, tensors and layer plan of a GGUF file"},
    {"make-model", gem4::cli::cmd_make_model, "write a random-weight Gemma 4 GGUF (presets tiny, e2b, e4b)"},
    {"tokenize", gem4::cli::cmd_tokenize, "tokenize JSON Lines from stdin"},
    {"template", gem4::cli::cmd_template, "render chat conversations (JSON Lines) with the Gemma 4 format"},
    {"cache", gem4::cli::cmd_cache, "list or clear a prompt-cache folder (--prompt-cache DIR)"},
    {"encode", gem4::cli::cmd_encode, "image or audio soft-token embeddings of a projector (mmproj) file"},
};

void usage() {
  std::fprintf(stderr, "gem4: a Gemma 4 inference engine for CPUs\n\nusage: gem4 COMMAND [options]   (gem4 COMMAND --help)\n\n");
  for (const auto& c : kCommands) std::fprintf(stderr, "  %-12s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    usage();
    return argc < 2 ? 1 : 0;
  }
  for (const auto& c : kCommands) {
    if (std::string(argv[1]) != c.name) continue;
    try {
      return c.fn(argc, argv, 2);
    } catch (const gem4::cli::ArgError& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "gem4: unknown command '%s'\n\n", argv[1]);
  usage();
  return 2;
}
