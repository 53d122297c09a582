#include "cli/text_input.h"

#include <fstream>
#include <iterator>
#include <stdexcept>

#include "text/tokenizer.h"

namespace gem4::cli {

std::vector<int32_t> tokenize_file(const Model& model, const std::string& path, bool add_bos) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read text file " + path);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw std::runtime_error("error reading text file " + path);
  // Plain text: special-token spellings in the file stay text (llama-perplexity's parse_special=false).
  return text::Tokenizer::from_gguf(*model.file, model.cache_dir)
      .encode(text, add_bos, /*parse_special=*/false);
}

}  // namespace gem4::cli
