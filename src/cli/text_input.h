// Reading and tokenizing text for the front ends.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"

namespace gem4::cli {

// Tokenizes a whole file with the model's own tokenizer. Throws naming the file.
std::vector<int32_t> tokenize_file(const Model& model, const std::string& path, bool add_bos);

}  // namespace gem4::cli
