#include "cli/text_input.h"

#include <stdexcept>

namespace gem4::cli {

std::vector<int32_t> tokenize_file(const Model& model, const std::string& path, bool add_bos) {
  throw std::runtime_error("perplexity -f: the tokenizer is not wired in yet; use --ids-file (" + path + ")");
}

}  // namespace gem4::cli
