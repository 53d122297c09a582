// The tensor element types a GGUF file can name, with their block layouts.
// This is file-format knowledge (type ids and byte sizes), so it lives with the GGUF code; the
// arithmetic on these types (dequantize, quantize, matmul) lives in tensor/ and kernels/.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace gem4 {

// Values are the ggml type ids written in GGUF tensor infos.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

struct GgmlTypeInfo {
  const char* name;
  int64_t block_elems;  // elements per block (1 for plain types)
  size_t block_bytes;   // bytes per block
};

// Layout of every type ggml defines (so files with any type can be parsed and listed);
// nullopt for ids ggml never assigned.
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type_id);
const char* ggml_type_name(GgmlType t);
// Parses "q8_0", "Q4_K", "bf16", ... (case-insensitive); nullopt if unknown.
std::optional<GgmlType> ggml_type_from_name(const std::string& name);

// Bytes of a row of n elements; n must be a multiple of the block size.
size_t ggml_row_bytes(GgmlType t, int64_t n);
int64_t ggml_block_elems(GgmlType t);

// The `general.file_type` id (llama.cpp's llama_ftype, "mostly T") of a file whose matrices are of type
// t: not the tensor type id (Q8_0 is tensor type 8 but file type 7; file type 8 means Q5_0). K-quants
// map to their "_S" variants, the closest to a file of one K-quant. nullopt for types with no file type.
std::optional<uint32_t> llama_file_type_of(GgmlType t);
// The name llama.cpp gives file type `id` ("Q4_0", "Q4_K_M", ...); nullptr for ids it never assigned.
const char* llama_file_type_name(uint32_t id);

}  // namespace gem4
