// Tests of the GGUF layer: the ggml type table, writer -> reader round trips, real files written by
// llama.cpp's converter, and robustness against truncated, corrupted and hand-made hostile files.
#include "gguf/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "gguf/ggml_types.h"
#include "gguf/gguf_writer.h"
#include "test_util.h"

namespace gem4::gguf {
namespace {

const std::string kTestData = std::string(GEM4_SOURCE_DIR) + "/../shared/testdata/";

// A fresh scratch directory per test process, removed at the end of each test that uses it.
struct ScratchDir {
  std::filesystem::path dir;
  ScratchDir() {
    dir = std::filesystem::temp_directory_path() /
          ("gem4_gguf_test_" + std::to_string(getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir);
  }
  ~ScratchDir() { std::filesystem::remove_all(dir); }
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Runs `fn`, expects a GgufError, and returns its message.
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const GgufError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a GgufError";
  return "";
}

// ---------------------------------------------------------------------------------------------
// ggml type table

struct ExpectedLayout {
  GgmlType type;
  const char* name;
  int64_t block_elems;
  size_t block_bytes;
};

// From ggml's type traits (ggml.c) and block structs (ggml-common.h).
// clang-format off
const ExpectedLayout kExpectedLayouts[] = {
    {GgmlType::F32, "f32", 1, 4},          {GgmlType::F16, "f16", 1, 2},
    {GgmlType::Q4_0, "q4_0", 32, 18},      {GgmlType::Q4_1, "q4_1", 32, 20},
    {GgmlType::Q5_0, "q5_0", 32, 22},      {GgmlType::Q5_1, "q5_1", 32, 24},
    {GgmlType::Q8_0, "q8_0", 32, 34},      {GgmlType::Q8_1, "q8_1", 32, 36},
    {GgmlType::Q2_K, "q2_K", 256, 84},     {GgmlType::Q3_K, "q3_K", 256, 110},
    {GgmlType::Q4_K, "q4_K", 256, 144},    {GgmlType::Q5_K, "q5_K", 256, 176},
    {GgmlType::Q6_K, "q6_K", 256, 210},    {GgmlType::Q8_K, "q8_K", 256, 292},
    {GgmlType::IQ2_XXS, "iq2_xxs", 256, 66}, {GgmlType::IQ2_XS, "iq2_xs", 256, 74},
    {GgmlType::IQ3_XXS, "iq3_xxs", 256, 98}, {GgmlType::IQ1_S, "iq1_s", 256, 50},
    {GgmlType::IQ4_NL, "iq4_nl", 32, 18},  {GgmlType::IQ3_S, "iq3_s", 256, 110},
    {GgmlType::IQ2_S, "iq2_s", 256, 82},   {GgmlType::IQ4_XS, "iq4_xs", 256, 136},
    {GgmlType::I8, "i8", 1, 1},            {GgmlType::I16, "i16", 1, 2},
    {GgmlType::I32, "i32", 1, 4},          {GgmlType::I64, "i64", 1, 8},
    {GgmlType::F64, "f64", 1, 8},          {GgmlType::IQ1_M, "iq1_m", 256, 56},
    {GgmlType::BF16, "bf16", 1, 2},        {GgmlType::TQ1_0, "tq1_0", 256, 54},
    {GgmlType::TQ2_0, "tq2_0", 256, 66},   {GgmlType::MXFP4, "mxfp4", 32, 17},
};
// clang-format on

TEST(GgmlTypes, LayoutsMatchGgml) {
  for (const ExpectedLayout& e : kExpectedLayouts) {
    SCOPED_TRACE(e.name);
    std::optional<GgmlTypeInfo> info = ggml_type_info(static_cast<uint32_t>(e.type));
    ASSERT_TRUE(info.has_value());
    EXPECT_STREQ(info->name, e.name);
    EXPECT_EQ(info->block_elems, e.block_elems);
    EXPECT_EQ(info->block_bytes, e.block_bytes);
    EXPECT_STREQ(ggml_type_name(e.type), e.name);
    EXPECT_EQ(ggml_block_elems(e.type), e.block_elems);
    EXPECT_EQ(ggml_row_bytes(e.type, e.block_elems * 3), e.block_bytes * 3);
  }
}

TEST(GgmlTypes, UnassignedIdsAreUnknown) {
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 1000u, 0xffffffffu}) {
    EXPECT_FALSE(ggml_type_info(id).has_value()) << id;
  }
}

TEST(GgmlTypes, ParsesNamesCaseInsensitively) {
  EXPECT_EQ(ggml_type_from_name("q8_0"), GgmlType::Q8_0);
  EXPECT_EQ(ggml_type_from_name("Q8_0"), GgmlType::Q8_0);
  EXPECT_EQ(ggml_type_from_name("Q4_K"), GgmlType::Q4_K);
  EXPECT_EQ(ggml_type_from_name("q4_k"), GgmlType::Q4_K);
  EXPECT_EQ(ggml_type_from_name("BF16"), GgmlType::BF16);
  EXPECT_EQ(ggml_type_from_name("iq2_xxs"), GgmlType::IQ2_XXS);
  EXPECT_EQ(ggml_type_from_name("MXFP4"), GgmlType::MXFP4);
  EXPECT_FALSE(ggml_type_from_name("q8").has_value());
  EXPECT_FALSE(ggml_type_from_name("q8_00").has_value());
  EXPECT_FALSE(ggml_type_from_name("").has_value());
  for (const ExpectedLayout& e : kExpectedLayouts) EXPECT_EQ(ggml_type_from_name(e.name), e.type);
}

TEST(GgmlTypes, RowBytesRejectsPartialBlocks) {
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q8_0, 64), 68u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::F32, 7), 28u);
  EXPECT_ANY_THROW(ggml_row_bytes(GgmlType::Q8_0, 33));
  EXPECT_ANY_THROW(ggml_row_bytes(GgmlType::Q4_K, 32));
}

// ---------------------------------------------------------------------------------------------
// writer -> reader round trips

Value make_scalar(ValueType t, uint64_t u, int64_t i, double f) {
  Value v;
  v.type = t;
  v.u = u;
  v.i = i;
  v.f = f;
  return v;
}

Value make_string(const std::string& s) {
  Value v;
  v.type = ValueType::STRING;
  v.s = s;
  return v;
}

Value make_array(ValueType elem_type, std::vector<Value> elems) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = elem_type;
  v.elems = std::move(elems);
  return v;
}

// A writer that uses every value type, including nested arrays.
GgufWriter writer_with_every_value_type() {
  GgufWriter w;
  w.set_string("general.architecture", "gemma4");
  w.set_u32("t.u32", 4000000000u);
  w.set_i32("t.i32", -123456);
  w.set_u64("t.u64", 0xfedcba9876543210ull);
  w.set_f32("t.f32", 1.5e-6f);
  w.set_bool("t.bool", true);
  w.set_string("t.string", std::string("with\0nul and \xe2\x96\x81 utf8", 21));
  w.set_string("t.empty_string", "");
  w.set_u32_array("t.u32_array", {1, 2, 4000000000u});
  w.set_i32_array("t.i32_array", {-1, 0, 1});
  w.set_f32_array("t.f32_array", {0.5f, -2.25f, 1e30f});
  w.set_bool_array("t.bool_array", {true, false, true});
  w.set_string_array("t.string_array", {"<pad>", "", "\xe2\x96\x81the"});
  w.set_string_array("t.empty_array", {});
  w.set_value("t.u8", make_scalar(ValueType::UINT8, 255, 0, 0));
  w.set_value("t.i8", make_scalar(ValueType::INT8, 0, -128, 0));
  w.set_value("t.u16", make_scalar(ValueType::UINT16, 65535, 0, 0));
  w.set_value("t.i16", make_scalar(ValueType::INT16, 0, -32768, 0));
  w.set_value("t.i64", make_scalar(ValueType::INT64, 0, INT64_MIN, 0));
  w.set_value("t.f64", make_scalar(ValueType::FLOAT64, 0, 0, 3.141592653589793));
  w.set_value(
      "t.nested_int",
      make_array(ValueType::ARRAY, {make_array(ValueType::INT16, {make_scalar(ValueType::INT16, 0, -7, 0)}),
                                    make_array(ValueType::UINT8, {})}));
  w.set_value(
      "t.nested_string",
      make_array(ValueType::ARRAY,
                 {make_array(ValueType::ARRAY, {make_array(ValueType::STRING, {make_string("deep")})})}));
  return w;
}

void expect_every_value_type(const GgufFile& f) {
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 22u);
  EXPECT_EQ(f.metadata()[0].first, "general.architecture");  // file order is kept
  EXPECT_EQ(f.get_string("general.architecture"), "gemma4");
  EXPECT_EQ(f.find("t.u32")->type, ValueType::UINT32);
  EXPECT_EQ(f.get_int("t.u32"), 4000000000);
  EXPECT_EQ(f.get_int("t.i32"), -123456);
  EXPECT_EQ(f.find("t.u64")->u, 0xfedcba9876543210ull);
  EXPECT_EQ(f.find("t.f32")->type, ValueType::FLOAT32);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("t.f32")), 1.5e-6f);
  EXPECT_TRUE(f.get_bool("t.bool"));
  EXPECT_EQ(f.get_string("t.string"), std::string("with\0nul and \xe2\x96\x81 utf8", 21));
  EXPECT_EQ(f.get_string("t.empty_string"), "");
  EXPECT_EQ(f.get_int_array("t.u32_array"), (std::vector<int64_t>{1, 2, 4000000000}));
  EXPECT_EQ(f.get_int_array("t.i32_array"), (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(f.get_float_array("t.f32_array"), (std::vector<float>{0.5f, -2.25f, 1e30f}));
  EXPECT_EQ(f.get_int_array("t.bool_array"), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(f.find("t.bool_array")->elem_type, ValueType::BOOL);
  EXPECT_EQ(f.get_string_array("t.string_array"), (std::vector<std::string>{"<pad>", "", "\xe2\x96\x81the"}));
  EXPECT_TRUE(f.get_string_array("t.empty_array").empty());
  EXPECT_EQ(f.find("t.u8")->type, ValueType::UINT8);
  EXPECT_EQ(f.get_int("t.u8"), 255);
  EXPECT_EQ(f.find("t.i8")->type, ValueType::INT8);
  EXPECT_EQ(f.get_int("t.i8"), -128);
  EXPECT_EQ(f.get_int("t.u16"), 65535);
  EXPECT_EQ(f.get_int("t.i16"), -32768);
  EXPECT_EQ(f.get_int("t.i64"), INT64_MIN);
  EXPECT_EQ(f.find("t.f64")->type, ValueType::FLOAT64);
  EXPECT_DOUBLE_EQ(f.get_float("t.f64"), 3.141592653589793);
  EXPECT_DOUBLE_EQ(f.get_float("t.u32"), 4e9);  // get_float takes any number

  const Value* nested = f.find("t.nested_int");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->elem_type, ValueType::ARRAY);
  ASSERT_EQ(nested->elems.size(), 2u);
  EXPECT_EQ(nested->elems[0].elem_type, ValueType::INT16);
  ASSERT_EQ(nested->elems[0].elems.size(), 1u);
  EXPECT_EQ(nested->elems[0].elems[0].as_int(), -7);
  EXPECT_EQ(nested->elems[1].elem_type, ValueType::UINT8);
  EXPECT_TRUE(nested->elems[1].elems.empty());
  EXPECT_EQ(f.find("t.nested_string")->to_string(), "[[[\"deep\"]]]");
}

TEST(GgufRoundTrip, EveryValueTypeInMemory) {
  std::vector<uint8_t> bytes = writer_with_every_value_type().to_bytes();
  auto f = GgufFile::from_memory(bytes.data(), bytes.size(), "values.gguf");
  expect_every_value_type(*f);
  EXPECT_TRUE(f->tensors().empty());
}

// Arrays of one scalar or string type are packed; a nested or mixed element turns the array back
// into Values. Either way every element reads back as the Value that went in, in order.
TEST(GgufValueArray, PackedAndGenericArraysReadBackTheirElements) {
  auto str = make_string;
  auto num = make_scalar;
  ValueArray strings;
  EXPECT_TRUE(strings.empty());
  EXPECT_FALSE(strings.holds_strings());
  strings.push_string("<pad>");
  strings.push_back(str(""));
  strings.push_string(std::string("a\0b", 3));
  ASSERT_EQ(strings.size(), 3u);
  EXPECT_TRUE(strings.holds_strings());
  EXPECT_EQ(strings.string_at(0), "<pad>");
  EXPECT_EQ(strings.string_at(1), "");
  EXPECT_EQ(strings.string_at(2), std::string_view("a\0b", 3));
  EXPECT_EQ(strings[2].type, ValueType::STRING);
  EXPECT_EQ(strings[2].s, std::string("a\0b", 3));
  EXPECT_THROW(strings.string_at(3), std::out_of_range);
  EXPECT_THROW(strings[3], std::out_of_range);

  ValueArray numbers;
  numbers.push_back(num(ValueType::INT32, 7, -3, 0.25));
  numbers.push_back(num(ValueType::INT32, 1, 2, 3));
  EXPECT_FALSE(numbers.holds_strings());
  EXPECT_THROW(numbers.string_at(0), std::out_of_range);
  std::vector<Value> seen(numbers.begin(), numbers.end());
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].type, ValueType::INT32);
  EXPECT_EQ(seen[0].u, 7u);
  EXPECT_EQ(seen[0].i, -3);
  EXPECT_EQ(seen[0].f, 0.25);
  EXPECT_EQ(seen[1].i, 2);

  // A string after numbers, then a nested array: the earlier elements survive the change of form.
  numbers.push_back(str("x"));
  numbers.push_back(make_array(ValueType::UINT8, {num(ValueType::UINT8, 9, 9, 9)}));
  ASSERT_EQ(numbers.size(), 4u);
  EXPECT_FALSE(numbers.holds_strings());
  EXPECT_EQ(numbers[0].i, -3);
  EXPECT_EQ(numbers[1].u, 1u);
  EXPECT_EQ(numbers[2].s, "x");
  EXPECT_EQ(numbers.string_at(2), "x");
  ASSERT_EQ(numbers[3].elems.size(), 1u);
  EXPECT_EQ(numbers[3].elems[0].u, 9u);

  numbers = std::vector<Value>{str("a"), str("bc")};
  EXPECT_TRUE(numbers.holds_strings());
  EXPECT_EQ(numbers.string_at(1), "bc");
  numbers.clear();
  EXPECT_TRUE(numbers.empty());
}

// strings_hash (a cache key, text/vocab_cache.cpp) tells string arrays apart by their bytes and where
// they split: the same strings hash alike however they were pushed, a different split or order does not.
TEST(GgufValueArray, StringsHashSeesBytesSplitAndOrder) {
  auto strings = [](std::vector<std::string> v) {
    ValueArray a;
    for (const std::string& s : v) a.push_string(s);
    return a;
  };
  ValueArray built;
  built = std::vector<Value>{make_string("ab"), make_string("c")};
  EXPECT_EQ(strings({"ab", "c"}).strings_hash(), built.strings_hash());
  EXPECT_NE(strings({"ab", "c"}).strings_hash(), strings({"a", "bc"}).strings_hash());
  EXPECT_NE(strings({"ab", "c"}).strings_hash(), strings({"c", "ab"}).strings_hash());
  EXPECT_NE(strings({"ab", "c"}).strings_hash(), strings({"ab", "c", ""}).strings_hash());
  EXPECT_NE(strings({"ab", "c"}).strings_hash(), strings({"ab", "d"}).strings_hash());
  EXPECT_EQ(ValueArray().strings_hash(), strings({}).strings_hash());
  ValueArray mixed;
  mixed.push_back(make_scalar(ValueType::INT32, 1, 1, 1));
  mixed.push_string("x");
  EXPECT_THROW(mixed.strings_hash(), std::out_of_range);
}

// Arrays of scalars keep the file's bytes (one to eight per element, not a Value each) and give back
// each element's three fields as a scalar read alone gives them: integers mirrored into u, i and f,
// floats in f, a bool as 0 or 1. Extremes of every type, through a file; then in code, where a value
// whose fields do not mirror each other is kept as it came.
TEST(GgufValueArray, ScalarArraysOfEveryTypeGiveBackTheirFields) {
  const auto u = [](ValueType t, uint64_t x) { return make_scalar(t, x, int64_t(x), double(x)); };
  const auto i = [](ValueType t, int64_t x) { return make_scalar(t, uint64_t(x), x, double(x)); };
  const auto f = [](ValueType t, double x) { return make_scalar(t, 0, 0, x); };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<std::string, Value>> arrays = {
      {"a.u8", make_array(ValueType::UINT8, {u(ValueType::UINT8, 0), u(ValueType::UINT8, 255)})},
      {"a.i8", make_array(ValueType::INT8, {i(ValueType::INT8, -128), i(ValueType::INT8, 127)})},
      {"a.u16", make_array(ValueType::UINT16, {u(ValueType::UINT16, 65535), u(ValueType::UINT16, 1)})},
      {"a.i16", make_array(ValueType::INT16, {i(ValueType::INT16, -32768), i(ValueType::INT16, -1)})},
      {"a.u32", make_array(ValueType::UINT32, {u(ValueType::UINT32, 4294967295u), u(ValueType::UINT32, 7)})},
      {"a.i32",
       make_array(ValueType::INT32, {i(ValueType::INT32, INT32_MIN), i(ValueType::INT32, INT32_MAX)})},
      {"a.u64", make_array(ValueType::UINT64, {u(ValueType::UINT64, UINT64_MAX), u(ValueType::UINT64, 0)})},
      {"a.i64",
       make_array(ValueType::INT64, {i(ValueType::INT64, INT64_MIN), i(ValueType::INT64, INT64_MAX)})},
      {"a.f32", make_array(ValueType::FLOAT32,
                           {f(ValueType::FLOAT32, -0.0),
                            f(ValueType::FLOAT32, double(std::numeric_limits<float>::denorm_min())),
                            f(ValueType::FLOAT32, -inf), f(ValueType::FLOAT32, 3.25)})},
      {"a.f64", make_array(ValueType::FLOAT64,
                           {f(ValueType::FLOAT64, 3.141592653589793), f(ValueType::FLOAT64, -4.9e-324)})},
      {"a.bool", make_array(ValueType::BOOL, {u(ValueType::BOOL, 1), u(ValueType::BOOL, 0)})},
  };
  GgufWriter w;
  w.set_string("general.architecture", "gemma4");
  for (const auto& [key, v] : arrays) w.set_value(key, v);
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto file = GgufFile::from_memory(bytes.data(), bytes.size(), "arrays.gguf");
  for (const auto& [key, want] : arrays) {
    SCOPED_TRACE(key);
    const Value* got = file->find(key);
    ASSERT_NE(got, nullptr);
    ASSERT_EQ(got->elem_type, want.elem_type);
    ASSERT_EQ(got->elems.size(), want.elems.size());
    for (size_t k = 0; k < want.elems.size(); ++k) {
      const Value g = got->elems[k], e = want.elems[k];
      EXPECT_EQ(g.type, e.type);
      EXPECT_EQ(g.u, e.u);
      EXPECT_EQ(g.i, e.i);
      EXPECT_EQ(std::memcmp(&g.f, &e.f, sizeof g.f), 0)
          << g.f << " vs " << e.f;  // -0.0 and the smallest denormal too
    }
  }

  // In code: consistent values pushed one by one, then one whose fields disagree.
  ValueArray a;
  a.push_back(i(ValueType::INT16, -5));
  a.push_scalar(ValueType::INT16, uint64_t(int64_t(300)), 300, 300.0);
  a.push_back(make_scalar(ValueType::INT16, 1, 2, 3.5));
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].i, -5);
  EXPECT_EQ(a[0].u, uint64_t(int64_t(-5)));
  EXPECT_EQ(a[1].f, 300.0);
  EXPECT_EQ(a[2].u, 1u);
  EXPECT_EQ(a[2].i, 2);
  EXPECT_EQ(a[2].f, 3.5);
}

TEST(GgufRoundTrip, EveryValueTypeThroughAFile) {
  ScratchDir tmp;
  std::string path = tmp.file("values.gguf");
  writer_with_every_value_type().write(path);
  auto f = GgufFile::open(path);
  expect_every_value_type(*f);
  EXPECT_EQ(f->path(), path);
  // write() and to_bytes() produce the same image.
  EXPECT_EQ(test::read_bytes(path), writer_with_every_value_type().to_bytes());
}

TEST(GgufRoundTrip, ValueToString) {
  std::vector<uint8_t> bytes = writer_with_every_value_type().to_bytes();
  auto f = GgufFile::from_memory(bytes.data(), bytes.size(), "values.gguf");
  EXPECT_EQ(f->find("t.u32_array")->to_string(2), "[1, 2, ... 1 more]");
  EXPECT_EQ(f->find("t.bool")->to_string(), "true");
  EXPECT_EQ(f->find("t.i32")->to_string(), "-123456");
  EXPECT_EQ(f->find("t.string_array")->to_string(1), "[\"<pad>\", ... 2 more]");
  EXPECT_EQ(make_string("a\"b\n").to_string(), "\"a\\\"b\\n\"");
}

std::vector<uint8_t> pattern_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(GgufRoundTrip, TensorsOfEveryTypeKeepShapeSizeAndBytes) {
  GgufWriter w;
  w.set_string("general.architecture", "test");
  std::vector<std::vector<uint8_t>> payloads;
  uint32_t seed = 1;
  for (const ExpectedLayout& e : kExpectedLayouts) {
    size_t nbytes = e.block_bytes * 2 * 3;  // ne = [2 blocks, 3 rows]
    payloads.push_back(pattern_bytes(nbytes, seed++));
    w.add_tensor(std::string("t.") + e.name, {e.block_elems * 2, 3}, e.type, payloads.back());
  }
  w.add_tensor("t.4d", {4, 3, 2, 1}, GgmlType::F32, pattern_bytes(96, 99));
  w.add_tensor("t.empty", {0, 5}, GgmlType::Q8_0, {});
  std::vector<uint8_t> bytes = w.to_bytes();
  auto f = GgufFile::from_memory(bytes.data(), bytes.size(), "types.gguf");

  ASSERT_EQ(f->tensors().size(), std::size(kExpectedLayouts) + 2);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->data_offset() % 32, 0u);
  for (size_t k = 0; k < std::size(kExpectedLayouts); ++k) {
    const ExpectedLayout& e = kExpectedLayouts[k];
    SCOPED_TRACE(e.name);
    const TensorInfo* t = f->find_tensor(std::string("t.") + e.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t, &f->tensors()[k]);  // file order kept
    EXPECT_EQ(t->type, e.type);
    EXPECT_EQ(t->ne, (std::vector<int64_t>{e.block_elems * 2, 3}));
    EXPECT_EQ(t->n_elements(), e.block_elems * 6);
    EXPECT_EQ(t->nbytes, e.block_bytes * 6);
    EXPECT_EQ(t->offset % 32, 0u);
    const uint8_t* data = f->tensor_data(*t);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % 32, 0u);
    EXPECT_EQ(std::memcmp(data, payloads[k].data(), payloads[k].size()), 0);
  }
  const TensorInfo* t4 = f->find_tensor("t.4d");
  ASSERT_NE(t4, nullptr);
  EXPECT_EQ(t4->ne, (std::vector<int64_t>{4, 3, 2, 1}));
  EXPECT_EQ(t4->nbytes, 96u);
  EXPECT_EQ(f->find_tensor("t.empty")->nbytes, 0u);
  EXPECT_EQ(f->find_tensor("t.empty")->n_elements(), 0);
  EXPECT_EQ(f->find_tensor("nope"), nullptr);
}

TEST(GgufRoundTrip, CustomAlignmentAndLazyTensorsWrittenToDisk) {
  ScratchDir tmp;
  std::string path = tmp.file("lazy.gguf");
  GgufWriter w;
  w.set_u32("general.alignment", 256);
  std::vector<uint8_t> eager = pattern_bytes(40, 7);
  w.add_tensor("eager", {10}, GgmlType::F32, eager);
  int fills = 0;
  // 3 MiB: larger than a page and starting at a non-page-aligned offset.
  w.add_tensor_lazy("lazy", {1024, 768}, GgmlType::F32, [&](uint8_t* dst, size_t n) {
    ++fills;
    for (size_t k = 0; k < n; ++k) dst[k] = static_cast<uint8_t>(k * 7 + 1);
  });
  w.add_tensor_lazy("lazy_q", {64, 2}, GgmlType::Q8_0, [&](uint8_t* dst, size_t n) {
    ++fills;
    std::memset(dst, 0xab, n);
  });
  w.write(path);
  EXPECT_EQ(fills, 2);

  auto f = GgufFile::open(path);
  EXPECT_EQ(f->alignment(), 256u);
  EXPECT_EQ(f->data_offset() % 256, 0u);
  ASSERT_EQ(f->tensors().size(), 3u);
  for (const TensorInfo& t : f->tensors()) EXPECT_EQ(t.offset % 256, 0u) << t.name;
  const TensorInfo& lazy = *f->find_tensor("lazy");
  EXPECT_EQ(lazy.nbytes, 1024u * 768 * 4);
  const uint8_t* p = f->tensor_data(lazy);
  bool ok = true;
  for (size_t k = 0; k < lazy.nbytes; ++k) ok = ok && p[k] == static_cast<uint8_t>(k * 7 + 1);
  EXPECT_TRUE(ok);
  const TensorInfo& q = *f->find_tensor("lazy_q");
  EXPECT_EQ(q.nbytes, 136u);
  EXPECT_EQ(f->tensor_data(q)[0], 0xab);
  EXPECT_EQ(f->tensor_data(q)[135], 0xab);
  EXPECT_EQ(std::memcmp(f->tensor_data(*f->find_tensor("eager")), eager.data(), 40), 0);

  // to_bytes() runs the fill callbacks too and yields the same image.
  EXPECT_EQ(w.to_bytes(), test::read_bytes(path));
}

TEST(GgufWriter, RejectsBadInput) {
  GgufWriter w;
  EXPECT_THROW(w.add_tensor("x", {33}, GgmlType::Q8_0, std::vector<uint8_t>(34)), GgufError);
  EXPECT_THROW(w.add_tensor("x", {32}, GgmlType::Q8_0, std::vector<uint8_t>(33)), GgufError);
  EXPECT_THROW(w.add_tensor("x", {1, 1, 1, 1, 1}, GgmlType::F32, std::vector<uint8_t>(4)), GgufError);
  EXPECT_THROW(w.add_tensor("x", {}, GgmlType::F32, {}), GgufError);
  EXPECT_THROW(w.add_tensor("x", {4}, static_cast<GgmlType>(31), std::vector<uint8_t>(16)), GgufError);
  w.add_tensor("x", {1}, GgmlType::F32, std::vector<uint8_t>(4));
  std::string msg = error_of([&] { w.add_tensor("x", {1}, GgmlType::F32, std::vector<uint8_t>(4)); });
  EXPECT_TRUE(contains(msg, "'x'")) << msg;
  EXPECT_THROW(w.set_u32("general.alignment", 48), GgufError);
  EXPECT_THROW(w.set_u32("general.alignment", 0), GgufError);
  EXPECT_THROW(w.set_value("k", make_scalar(ValueType::UINT8, 256, 0, 0)), GgufError);
  EXPECT_THROW(w.set_value("k", make_array(ValueType::UINT32, {make_string("x")})), GgufError);
  // Setting a key twice replaces it.
  w.set_u32("k", 1);
  w.set_u32("k", 2);
  std::vector<uint8_t> bytes = w.to_bytes();
  auto f = GgufFile::from_memory(bytes.data(), bytes.size(), "w.gguf");
  EXPECT_EQ(f->metadata().size(), 1u);
  EXPECT_EQ(f->get_int("k"), 2);
  EXPECT_THROW(w.write("/nonexistent-dir/x.gguf"), GgufError);
}

TEST(GgufGetters, ErrorsNameKeyAndFile) {
  std::vector<uint8_t> bytes = writer_with_every_value_type().to_bytes();
  auto f = GgufFile::from_memory(bytes.data(), bytes.size(), "getters.gguf");
  for (const std::string& msg : {
           error_of([&] { f->get_int("t.string"); }),
           error_of([&] { f->get_int("missing.key"); }),
           error_of([&] { f->get_float("t.string"); }),
           error_of([&] { f->get_bool("t.u32"); }),
           error_of([&] { f->get_string("t.u32"); }),
           error_of([&] { f->get_int("t.u64"); }),  // > INT64_MAX
           error_of([&] { f->get_int_array("t.string_array"); }),
           error_of([&] { f->get_int_array("t.u32"); }),
           error_of([&] { f->get_float_array("t.bool_array"); }),
           error_of([&] { f->get_string_array("t.i32_array"); }),
       }) {
    EXPECT_TRUE(contains(msg, "getters.gguf")) << msg;
    EXPECT_TRUE(contains(msg, "'t.") || contains(msg, "'missing.key'")) << msg;
  }
  EXPECT_EQ(f->get_int_or("missing", 7), 7);
  EXPECT_EQ(f->get_int_or("t.i32", 7), -123456);
  EXPECT_DOUBLE_EQ(f->get_float_or("missing", 0.25), 0.25);
  EXPECT_TRUE(f->get_bool_or("missing", true));
  EXPECT_EQ(f->get_string_or("missing", "dflt"), "dflt");
  EXPECT_EQ(f->get_string_or("general.architecture", "dflt"), "gemma4");
  EXPECT_THROW(f->get_int_or("t.string", 1), GgufError);  // present but of the wrong type
  EXPECT_EQ(f->get_float_array("t.i32_array"), (std::vector<float>{-1, 0, 1}));
  EXPECT_TRUE(f->has("t.u8"));
  EXPECT_FALSE(f->has("t.u9"));
}

// ---------------------------------------------------------------------------------------------
// real files (written by llama.cpp's converter / the test-data tools, not by us)

TEST(GgufRealFiles, TinyGemma4) {
  std::string path = kTestData + "tiny-gemma4/tiny-gemma4-f32.gguf";
  ASSERT_TRUE(std::filesystem::exists(path)) << "missing test data: " << path;
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->get_string("general.architecture"), "gemma4");
  EXPECT_EQ(f->tensors().size(), 133u);
  EXPECT_EQ(f->get_int("gemma4.block_count"), 8);
  EXPECT_EQ(f->get_int_array("gemma4.attention.sliding_window_pattern").size(), 8u);
  EXPECT_EQ(f->get_int("tokenizer.ggml.bos_token_id"), 2);
  const TensorInfo* embd = f->find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, GgmlType::F32);
  EXPECT_EQ(embd->ne[0], f->get_int("gemma4.embedding_length"));
  EXPECT_EQ(embd->ne[1], static_cast<int64_t>(f->get_string_array("tokenizer.ggml.tokens").size()));
  EXPECT_EQ(embd->nbytes, static_cast<uint64_t>(embd->n_elements()) * 4);
  // Every tensor lies inside the file, aligned, and the last one ends at the (padded) end of the file.
  uint64_t end = 0;
  for (const TensorInfo& t : f->tensors()) {
    EXPECT_EQ(t.offset % f->alignment(), 0u) << t.name;
    end = std::max(end, f->data_offset() + t.offset + t.nbytes);
  }
  EXPECT_LE(end, f->file_size());
  EXPECT_GT(end + f->alignment(), f->file_size());
  // rope_freqs holds finite positive divisors (a check that the data pointer is right).
  const TensorInfo* rope = f->find_tensor("rope_freqs.weight");
  ASSERT_NE(rope, nullptr);
  const float* rf = reinterpret_cast<const float*>(f->tensor_data(*rope));
  for (int64_t k = 0; k < rope->n_elements(); ++k)
    EXPECT_TRUE(rf[k] >= 1.0f && std::isfinite(rf[k])) << k << " " << rf[k];
}

TEST(GgufRealFiles, TinyGemma4Q8) {
  std::string path = kTestData + "tiny-gemma4/tiny-gemma4-q8_0.gguf";
  ASSERT_TRUE(std::filesystem::exists(path)) << "missing test data: " << path;
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->tensors().size(), 133u);
  const TensorInfo* q = f->find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, GgmlType::Q8_0);
  EXPECT_EQ(q->nbytes, static_cast<uint64_t>(q->n_elements()) / 32 * 34);
}

TEST(GgufRealFiles, Gemma4Vocabulary) {
  std::string path = kTestData + "tokenizer/gemma4-vocab.gguf";
  ASSERT_TRUE(std::filesystem::exists(path)) << "missing test data: " << path;
  auto f = GgufFile::open(path);
  std::vector<std::string> tokens = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 262144u);
  EXPECT_EQ(tokens[2], "<bos>");  // spec 4.3 special ids
  EXPECT_EQ(tokens[106], "<turn|>");
  EXPECT_EQ(tokens[107], "\n");
  EXPECT_EQ(tokens[236743], "\xe2\x96\x81");
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.merges").size(), 514906u);
  EXPECT_EQ(f->get_float_array("tokenizer.ggml.scores").size(), 262144u);
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type").size(), 262144u);
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gemma4");
  EXPECT_TRUE(f->tensors().empty());
}

// ---------------------------------------------------------------------------------------------
// robustness: truncated and corrupted real files

// Parses `bytes`; passes when it parses or fails with a GgufError naming `name`. Touches every
// parsed value so that a bad parse would show up under the sanitizers.
void expect_parse_or_named_error(const std::vector<uint8_t>& bytes, const std::string& name,
                                 const std::string& what) {
  try {
    auto f = GgufFile::from_memory(bytes.data(), bytes.size(), name);
    size_t sink = 0;
    for (const auto& [key, v] : f->metadata()) sink += key.size() + v.to_string(3).size();
    for (const TensorInfo& t : f->tensors()) {
      const uint8_t* p = f->tensor_data(t);
      if (t.nbytes) sink += p[0] + p[t.nbytes - 1];
    }
    (void)sink;
  } catch (const GgufError& e) {
    EXPECT_TRUE(contains(e.what(), name)) << what << ": " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": not a GgufError: " << e.what();
  }
}

TEST(GgufRobustness, TruncatedFilesFailCleanly) {
  const std::string name = "gemma4-tiny-assistant-f32.gguf";
  std::vector<uint8_t> full = test::read_bytes(kTestData + "llamacpp-ref/" + name);
  ASSERT_GT(full.size(), 100000u);
  auto f = GgufFile::from_memory(full.data(), full.size(), name);
  uint64_t data_end = 0;  // a cut anywhere before this loses part of some tensor
  for (const TensorInfo& t : f->tensors())
    data_end = std::max(data_end, f->data_offset() + t.offset + t.nbytes);
  std::mt19937 rng(1234);
  for (int k = 0; k < 20; ++k) {
    // Half the cuts inside the header, where the parser does its work; half anywhere in the file.
    size_t limit = k % 2 ? data_end : f->data_offset();
    size_t cut = std::uniform_int_distribution<size_t>(0, limit - 1)(rng);
    std::vector<uint8_t> part(full.begin(), full.begin() + cut);
    std::string msg = error_of([&] { GgufFile::from_memory(part.data(), part.size(), name); });
    EXPECT_TRUE(contains(msg, name)) << "cut at " << cut << ": " << msg;
  }
  // Through open() too (the mmap path).
  ScratchDir tmp;
  std::string path = tmp.file("cut.gguf");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(full.data()), static_cast<std::streamsize>(full.size() - 1000));
  }
  std::string msg = error_of([&] { GgufFile::open(path); });
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "extends past end of file")) << msg;
}

TEST(GgufRobustness, ByteFlipsInHeaderParseOrFailCleanly) {
  const std::string name = "gemma4-tiny-assistant-f32.gguf";
  std::vector<uint8_t> full = test::read_bytes(kTestData + "llamacpp-ref/" + name);
  ASSERT_GT(full.size(), 100000u);
  size_t header_end = GgufFile::from_memory(full.data(), full.size(), name)->data_offset();
  std::mt19937 rng(5678);
  std::vector<uint8_t> copy = full;
  for (int k = 0; k < 200; ++k) {
    size_t at = std::uniform_int_distribution<size_t>(0, header_end - 1)(rng);
    uint8_t flip = static_cast<uint8_t>(std::uniform_int_distribution<int>(1, 255)(rng));
    copy[at] ^= flip;
    expect_parse_or_named_error(copy, name, "flip at " + std::to_string(at));
    copy[at] = full[at];
  }
}

// ---------------------------------------------------------------------------------------------
// hand-made hostile files (built byte by byte, independent of our writer)

struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  Bytes& put(T v) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    return put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  }
  Bytes& kv_u32(const std::string& key, uint32_t v) { return str(key).put<uint32_t>(4).put<uint32_t>(v); }
  Bytes& tensor(const std::string& name, std::vector<int64_t> ne, uint32_t type, uint64_t offset) {
    str(name).put<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) put<int64_t>(d);
    return put<uint32_t>(type).put<uint64_t>(offset);
  }
  Bytes& pad_to(size_t alignment) {
    b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
  Bytes& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
};

std::string parse_error(const Bytes& bytes) {
  return error_of([&] { GgufFile::from_memory(bytes.b.data(), bytes.b.size(), "hostile.gguf"); });
}

void expect_message(const std::string& msg, std::initializer_list<const char*> parts) {
  EXPECT_TRUE(contains(msg, "hostile.gguf")) << msg;
  for (const char* p : parts) EXPECT_TRUE(contains(msg, p)) << "missing '" << p << "' in: " << msg;
}

TEST(GgufHostile, HandMadeValidFileParses) {
  Bytes b;
  b.header(2, 1).kv_u32("general.alignment", 64);
  b.tensor("a", {2, 2}, 0, 0).tensor("b.iq2", {256}, 16, 64).pad_to(64).zeros(64 + 66);
  auto f = GgufFile::from_memory(b.b.data(), b.b.size(), "ok.gguf");
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->find_tensor("b.iq2")->type, GgmlType::IQ2_XXS);  // unknown-to-us but valid ggml type
  EXPECT_EQ(f->find_tensor("b.iq2")->nbytes, 66u);
  // Version 2 has the same layout.
  Bytes v2;
  v2.header(0, 1, 2).kv_u32("x", 5);
  EXPECT_EQ(GgufFile::from_memory(v2.b.data(), v2.b.size(), "v2.gguf")->get_int("x"), 5);
}

TEST(GgufHostile, BadMagicAndVersions) {
  Bytes magic;
  magic.b = {'G', 'G', 'M', 'L', 3, 0, 0, 0};
  magic.zeros(16);
  expect_message(parse_error(magic), {"magic", "offset 0"});
  Bytes v1;
  v1.header(0, 0, 1);
  expect_message(parse_error(v1), {"version 1", "offset 4"});
  Bytes v9;
  v9.header(0, 0, 9);
  expect_message(parse_error(v9), {"version 9"});
  expect_message(parse_error(Bytes{}), {"magic"});
}

TEST(GgufHostile, HugeLengthsAndCounts) {
  Bytes str_len;
  str_len.header(0, 1).put<uint64_t>(uint64_t{1} << 62).zeros(64);
  expect_message(parse_error(str_len), {"key", "offset 24"});

  Bytes value_len;
  value_len.header(0, 1).str("general.name").put<uint32_t>(8).put<uint64_t>(~uint64_t{0});
  expect_message(parse_error(value_len), {"'general.name'", "string value", "offset 48"});

  Bytes array_count;
  array_count.header(0, 1)
      .str("tokenizer.ggml.tokens")
      .put<uint32_t>(9)
      .put<uint32_t>(8)
      .put<uint64_t>(uint64_t{1} << 61);
  array_count.zeros(64);
  expect_message(parse_error(array_count), {"'tokenizer.ggml.tokens'", "array of 2305843009213693952"});

  Bytes kv_count;
  kv_count.header(0, ~uint64_t{0});
  expect_message(parse_error(kv_count), {"metadata count"});

  Bytes tensor_count;
  tensor_count.header(uint64_t{1} << 40, 0);
  expect_message(parse_error(tensor_count), {"tensor count"});

  Bytes deep;
  deep.header(0, 1).str("deep").put<uint32_t>(9);
  for (int k = 0; k < 40; ++k) deep.put<uint32_t>(9).put<uint64_t>(1);
  expect_message(parse_error(deep), {"'deep'", "nested"});

  Bytes bad_type;
  bad_type.header(0, 1).str("k").put<uint32_t>(13).put<uint32_t>(0);
  expect_message(parse_error(bad_type), {"'k'", "value type 13"});
}

TEST(GgufHostile, BadTensorInfos) {
  Bytes dims;
  dims.header(1, 0).tensor("blk.0.attn_q.weight", {1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, 0);
  expect_message(parse_error(dims), {"'blk.0.attn_q.weight'", "n_dims 9"});

  Bytes misaligned;
  misaligned.header(1, 0).tensor("w", {4}, 0, 3).pad_to(32).zeros(64);
  expect_message(parse_error(misaligned), {"'w'", "offset 3", "alignment 32"});

  Bytes duplicate;
  duplicate.header(2, 0).tensor("dup", {4}, 0, 0).tensor("dup", {4}, 0, 32).pad_to(32).zeros(64);
  expect_message(parse_error(duplicate), {"'dup'", "duplicate"});

  Bytes type;
  type.header(1, 0).tensor("w", {4}, 31, 0).pad_to(32).zeros(64);
  expect_message(parse_error(type), {"'w'", "ggml type id 31"});

  Bytes block;
  block.header(1, 0).tensor("w", {33}, 8, 0).pad_to(32).zeros(64);
  expect_message(parse_error(block), {"'w'", "block size 32"});

  Bytes negative;
  negative.header(1, 0).tensor("w", {4, -1}, 0, 0).pad_to(32).zeros(64);
  expect_message(parse_error(negative), {"'w'", "negative"});

  Bytes overflow;
  overflow.header(1, 0).tensor("w", {int64_t{1} << 32, int64_t{1} << 32}, 0, 0).pad_to(32).zeros(64);
  expect_message(parse_error(overflow), {"'w'", "overflow"});

  Bytes past_end;
  past_end.header(1, 0).tensor("blk.3.attn_q.weight", {256, 2}, 0, 0).pad_to(32).zeros(1000);
  std::string msg = parse_error(past_end);
  expect_message(
      msg, {"tensor 'blk.3.attn_q.weight' data [offset ", ", 2048 bytes] extends past end of file (size "});
}

TEST(GgufHostile, BadAlignmentAndDuplicateKeys) {
  Bytes not_pow2;
  not_pow2.header(0, 1).kv_u32("general.alignment", 48);
  expect_message(parse_error(not_pow2), {"'general.alignment'", "power of two", "offset 24"});
  Bytes zero;
  zero.header(0, 1).kv_u32("general.alignment", 0);
  expect_message(parse_error(zero), {"'general.alignment'", "power of two"});
  Bytes wrong_type;
  wrong_type.header(0, 1).str("general.alignment").put<uint32_t>(8).str("32");
  expect_message(parse_error(wrong_type), {"'general.alignment'", "integer"});
  Bytes dup;
  dup.header(0, 2).kv_u32("general.name", 1).kv_u32("general.name", 2);
  expect_message(parse_error(dup), {"'general.name'", "duplicate", "offset 52"});
}

TEST(GgufHostile, OpenErrorsNameThePath) {
  std::string msg = error_of([] { GgufFile::open("/nonexistent/model.gguf"); });
  EXPECT_TRUE(contains(msg, "/nonexistent/model.gguf")) << msg;
  ScratchDir tmp;
  std::string empty = tmp.file("empty.gguf");
  std::ofstream(empty).close();
  msg = error_of([&] { GgufFile::open(empty); });
  EXPECT_TRUE(contains(msg, empty)) << msg;
  msg = error_of([&] { GgufFile::open(tmp.dir.string()); });
  EXPECT_TRUE(contains(msg, "not a regular file")) << msg;
}

}  // namespace
}  // namespace gem4::gguf
