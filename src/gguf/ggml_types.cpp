// Block layouts of the ggml tensor types, as fixed by ggml's block structs (ggml-common.h) and its
// type-traits table. Sizes are facts of the file format: a reader needs them to know how many bytes a
// tensor occupies, even for types we cannot compute with.
#include "gguf/ggml_types.h"

#include <cctype>
#include <stdexcept>

namespace gem4 {
namespace {

struct TypeRow {
  uint32_t id;
  GgmlTypeInfo info;
};

// QK_K = 256 for the k-quants and i-quants; 32 for the legacy block formats.
// Byte counts in the comments show where each size comes from (fp16 scale = 2 bytes).
// clang-format off
constexpr TypeRow kTypes[] = {
    {0, {"f32", 1, 4}},
    {1, {"f16", 1, 2}},
    {2, {"q4_0", 32, 18}},      // d + 16 nibble bytes
    {3, {"q4_1", 32, 20}},      // d, m + 16
    {6, {"q5_0", 32, 22}},      // d + 4 high bits + 16
    {7, {"q5_1", 32, 24}},      // d, m + 4 + 16
    {8, {"q8_0", 32, 34}},      // d + 32
    {9, {"q8_1", 32, 36}},      // d, s + 32
    {10, {"q2_K", 256, 84}},    // 16 scales + 64 quants + d, dmin
    {11, {"q3_K", 256, 110}},   // 32 hmask + 64 quants + 12 scales + d
    {12, {"q4_K", 256, 144}},   // d, dmin + 12 scales + 128 quants
    {13, {"q5_K", 256, 176}},   // d, dmin + 12 + 32 high bits + 128
    {14, {"q6_K", 256, 210}},   // 128 low + 64 high + 16 scales + d
    {15, {"q8_K", 256, 292}},   // f32 d + 256 quants + 16 int16 sums
    {16, {"iq2_xxs", 256, 66}}, // d + 32 uint16
    {17, {"iq2_xs", 256, 74}},  // d + 32 uint16 + 8 scales
    {18, {"iq3_xxs", 256, 98}}, // d + 96
    {19, {"iq1_s", 256, 50}},   // d + 32 + 8 uint16
    {20, {"iq4_nl", 32, 18}},   // d + 16
    {21, {"iq3_s", 256, 110}},  // d + 64 + 8 + 32 signs + 4 scales
    {22, {"iq2_s", 256, 82}},   // d + 64 + 8 + 8
    {23, {"iq4_xs", 256, 136}}, // d + scales_h(2) + 4 + 128
    {24, {"i8", 1, 1}},
    {25, {"i16", 1, 2}},
    {26, {"i32", 1, 4}},
    {27, {"i64", 1, 8}},
    {28, {"f64", 1, 8}},
    {29, {"iq1_m", 256, 56}},   // 32 + 16 + 8 (scale packed into the scales)
    {30, {"bf16", 1, 2}},
    // 31..33 (q4_0_4_4, ...) and 36..38 (iq4_nl_4_4, ...) were repacked layouts that ggml removed
    // from GGUF files; ggml itself rejects them, so they stay unknown here.
    {34, {"tq1_0", 256, 54}},   // 48 base-3 bytes + 4 + d
    {35, {"tq2_0", 256, 66}},   // 64 + d
    {39, {"mxfp4", 32, 17}},    // e8m0 exponent + 16 nibble bytes
};
// clang-format on

const TypeRow* find_row(uint32_t id) {
  for (const TypeRow& row : kTypes) {
    if (row.id == id) return &row;
  }
  return nullptr;
}

const GgmlTypeInfo& info_or_throw(GgmlType t) {
  const TypeRow* row = find_row(static_cast<uint32_t>(t));
  if (!row) throw std::invalid_argument("unknown ggml type id " + std::to_string(static_cast<uint32_t>(t)));
  return row->info;
}

}  // namespace

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type_id) {
  const TypeRow* row = find_row(type_id);
  if (!row) return std::nullopt;
  return row->info;
}

const char* ggml_type_name(GgmlType t) {
  const TypeRow* row = find_row(static_cast<uint32_t>(t));
  return row ? row->info.name : "unknown";
}

std::optional<GgmlType> ggml_type_from_name(const std::string& name) {
  for (const TypeRow& row : kTypes) {
    const char* candidate = row.info.name;
    size_t i = 0;
    for (; i < name.size() && candidate[i] != '\0'; ++i) {
      if (std::tolower(static_cast<unsigned char>(name[i])) !=
          std::tolower(static_cast<unsigned char>(candidate[i]))) {
        break;
      }
    }
    if (i == name.size() && candidate[i] == '\0') return static_cast<GgmlType>(row.id);
  }
  return std::nullopt;
}

size_t ggml_row_bytes(GgmlType t, int64_t n) {
  const GgmlTypeInfo& info = info_or_throw(t);
  if (n < 0 || n % info.block_elems != 0) {
    throw std::invalid_argument(std::string("row of ") + std::to_string(n) +
                                " elements is not a multiple of " + info.name + "'s block size " +
                                std::to_string(info.block_elems));
  }
  return static_cast<size_t>(n / info.block_elems) * info.block_bytes;
}

namespace {

// llama.cpp's file types (llama_ftype): id, name, and for the ids a file of one matrix type gets,
// that type. Ids ggml retired (4-6, 33-35) are absent.
struct FileTypeRow {
  uint32_t id;
  const char* name;
  std::optional<GgmlType> uniform;
};
constexpr FileTypeRow kFileTypes[] = {
    {0, "F32", GgmlType::F32},      {1, "F16", GgmlType::F16},       {2, "Q4_0", GgmlType::Q4_0},
    {3, "Q4_1", GgmlType::Q4_1},    {7, "Q8_0", GgmlType::Q8_0},     {8, "Q5_0", GgmlType::Q5_0},
    {9, "Q5_1", GgmlType::Q5_1},    {10, "Q2_K", GgmlType::Q2_K},    {11, "Q3_K_S", GgmlType::Q3_K},
    {12, "Q3_K_M", std::nullopt},   {13, "Q3_K_L", std::nullopt},    {14, "Q4_K_S", GgmlType::Q4_K},
    {15, "Q4_K_M", std::nullopt},   {16, "Q5_K_S", GgmlType::Q5_K},  {17, "Q5_K_M", std::nullopt},
    {18, "Q6_K", GgmlType::Q6_K},   {19, "IQ2_XXS", std::nullopt},   {20, "IQ2_XS", std::nullopt},
    {21, "Q2_K_S", std::nullopt},   {22, "IQ3_XS", std::nullopt},    {23, "IQ3_XXS", std::nullopt},
    {24, "IQ1_S", std::nullopt},    {25, "IQ4_NL", std::nullopt},    {26, "IQ3_S", std::nullopt},
    {27, "IQ3_M", std::nullopt},    {28, "IQ2_S", std::nullopt},     {29, "IQ2_M", std::nullopt},
    {30, "IQ4_XS", std::nullopt},   {31, "IQ1_M", std::nullopt},     {32, "BF16", GgmlType::BF16},
    {36, "TQ1_0", std::nullopt},    {37, "TQ2_0", std::nullopt},     {38, "MXFP4_MOE", std::nullopt},
};

}  // namespace

std::optional<uint32_t> llama_file_type_of(GgmlType t) {
  for (const FileTypeRow& row : kFileTypes)
    if (row.uniform == t) return row.id;
  return std::nullopt;
}

const char* llama_file_type_name(uint32_t id) {
  for (const FileTypeRow& row : kFileTypes)
    if (row.id == id) return row.name;
  return nullptr;
}

int64_t ggml_block_elems(GgmlType t) { return info_or_throw(t).block_elems; }

}  // namespace gem4
