// gem4 tokenize and gem4 template: JSON Lines filters over stdin, one output line per input line, in
// order. A line that cannot be handled gives {"error": "..."} and the next line is processed.
// Both need only the vocabulary: the GGUF is opened for its tokenizer keys and no weights are loaded,
// so a vocab-only file works.
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "gguf/gguf.h"
#include "model/packed_cache.h"
#include "text/chat_format.h"
#include "text/tokenizer.h"

namespace gem4::cli {

namespace {

using nlohmann::json;
using Reply = nlohmann::ordered_json;  // keys in the order written: "ids" before "decoded"

void print_line(const Reply& j) {
  // Decoded text of arbitrary ids can be broken UTF-8: write U+FFFD rather than fail.
  const std::string s = j.dump(-1, ' ', false, Reply::error_handler_t::replace);
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);  // one answer per line, so a client can talk to us over a pipe
}

// A field of the request: `fallback` when absent or null; std::invalid_argument naming it when it has
// the wrong type.
bool bool_field(const json& req, const char* name, bool fallback) {
  const auto it = req.find(name);
  if (it == req.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw std::invalid_argument(std::string("field '") + name + "' must be a boolean");
  return it->get<bool>();
}

// Reads stdin line by line and answers each with handle(request) or {"error": ...}.
template <class Handle>
int json_lines_filter(Handle handle) {
  std::string line;
  long long line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    Reply out;
    try {
      if (line.find_first_not_of(" \t") == std::string::npos) throw std::invalid_argument("empty line");
      const json req = json::parse(line);
      if (!req.is_object()) throw std::invalid_argument("the line is not a JSON object");
      out = handle(req);
    } catch (const std::exception& e) {
      out = Reply{{"error", "line " + std::to_string(line_no) + ": " + e.what()}};
    }
    print_line(out);
  }
  return 0;
}

text::Tokenizer open_tokenizer(const Args& a, const char* command) {
  if (!a.has("-m")) throw ArgError(std::string(command) + ": -m FILE is required");
  const auto file = gguf::GgufFile::open(a.str("-m"));
  return text::Tokenizer::from_gguf(*file, default_packed_cache_dir());
}

}  // namespace

int cmd_tokenize(int argc, char** argv, int first) {
  Args a("tokenize",
         "Tokenize JSON Lines from stdin: {\"text\": STRING, \"parse_special\": BOOL (default false)} ->\n"
         "{\"ids\": [...], \"decoded\": STRING} (the ids' pieces concatenated, special tokens written out).\n"
         "BOS is prepended when the vocabulary asks for it (tokenizer.ggml.add_bos_token) unless --no-bos.\n"
         "A malformed line gives {\"error\": STRING}. A vocab-only GGUF is enough.");
  a.value("-m,--model", "FILE", "GGUF file (model or vocab-only)");
  a.flag("--no-bos", "do not prepend BOS");
  if (!a.parse(argc, argv, first)) {
    std::printf("%s", a.help().c_str());
    return 0;
  }
  const text::Tokenizer tokenizer = open_tokenizer(a, "tokenize");
  const bool add_bos = !a.on("--no-bos") && tokenizer.add_bos_default();
  return json_lines_filter([&](const json& req) {
    const auto text = req.find("text");
    if (text == req.end()) throw std::invalid_argument("field 'text' is missing");
    if (!text->is_string()) throw std::invalid_argument("field 'text' must be a string");
    const bool parse_special = bool_field(req, "parse_special", false);
    const auto ids = tokenizer.encode(text->get_ref<const std::string&>(), add_bos, parse_special);
    return Reply{{"ids", ids}, {"decoded", tokenizer.decode(ids, /*special=*/true)}};
  });
}

int cmd_template(int argc, char** argv, int first) {
  Args a("template",
         "Render conversations with the Gemma 4 chat format. JSON Lines on stdin:\n"
         "{\"messages\": [...], \"tools\": [...] | null, \"add_generation_prompt\": BOOL, \"enable_thinking\": BOOL,\n"
         " \"bos_token\": STRING (default: the vocabulary's BOS text)} -> {\"rendered\": STRING}\n"
         "(with --ids also \"ids\": the rendered text tokenized with special tokens and no extra BOS).\n"
         "A malformed line gives {\"error\": STRING}. A vocab-only GGUF is enough.");
  a.value("-m,--model", "FILE", "GGUF file (model or vocab-only)");
  a.flag("--ids", "also output the token ids of the rendered text");
  if (!a.parse(argc, argv, first)) {
    std::printf("%s", a.help().c_str());
    return 0;
  }
  const text::Tokenizer tokenizer = open_tokenizer(a, "template");
  const std::string default_bos = tokenizer.bos() >= 0 ? std::string(tokenizer.token_text(tokenizer.bos())) : "";
  const bool with_ids = a.on("--ids");
  return json_lines_filter([&](const json& req) {
    const auto messages = req.find("messages");
    if (messages == req.end()) throw std::invalid_argument("field 'messages' is missing");
    const json tools = req.value("tools", json());
    std::string bos = default_bos;
    if (const auto b = req.find("bos_token"); b != req.end() && !b->is_null()) {
      if (!b->is_string()) throw std::invalid_argument("field 'bos_token' must be a string");
      bos = b->get<std::string>();
    }
    const std::string rendered = text::render_chat(*messages, tools, bool_field(req, "add_generation_prompt", false),
                                                   bool_field(req, "enable_thinking", false), bos);
    Reply out{{"rendered", rendered}};
    if (with_ids) out["ids"] = tokenizer.encode(rendered, /*add_bos=*/false, /*parse_special=*/true);
    return out;
  });
}

}  // namespace gem4::cli
