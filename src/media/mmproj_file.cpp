#include "media/mmproj_file.h"

#include <algorithm>

#include "tensor/quant.h"

namespace gem4::media {

std::string shape_string(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

std::unique_ptr<MmprojFile> MmprojFile::open(const std::string& path) {
  std::unique_ptr<gguf::GgufFile> f;
  try {
    f = gguf::GgufFile::open(path);
  } catch (const gguf::GgufError& e) {
    throw MmprojError(std::string("projector file: ") + e.what());
  }
  return from_gguf(std::move(f));
}

std::unique_ptr<MmprojFile> MmprojFile::from_gguf(std::unique_ptr<gguf::GgufFile> file) {
  std::unique_ptr<MmprojFile> m(new MmprojFile(std::move(file)));
  m->validate();
  return m;
}

MmprojFile::MmprojFile(std::unique_ptr<gguf::GgufFile> f) : file_(std::move(f)) {}

void MmprojFile::fail(const std::string& what) const { throw MmprojError(path() + ": " + what); }

void MmprojFile::fail_tensor(const std::string& name, const std::string& what) const {
  fail("tensor '" + name + "' " + what);
}

namespace {

// What gem4 says about a projector type it does not run, so the user learns what the file is.
std::string unsupported_type_note(const std::string& type) {
  if (type == "gemma4uv" || type == "gemma4ua")
    return " (the encoder-free tower of the Gemma 4 12B unified model, not E2B/E4B)";
  return "";
}

}  // namespace

void MmprojFile::validate() {
  const std::string arch = file_->get_string_or("general.architecture", "");
  if (arch != "clip")
    fail("general.architecture is '" + arch + "', expected 'clip' (is this a projector (mmproj) file?)");
  const auto str_key = [&](const std::string& key) -> std::string {
    const gguf::Value* v = file_->find(key);
    if (!v) return "";
    if (v->type != gguf::ValueType::STRING) fail("key " + key + " is not a string");
    return v->s;
  };
  const std::string generic = str_key("clip.projector_type");
  // A tower is present when its projector type is named, or when clip.has_*_encoder says so (the type
  // then comes from the older generic clip.projector_type key).
  const auto tower = [&](const char* name, const char* expected, std::string& out) {
    const std::string key = std::string("clip.") + name + ".projector_type";
    const std::string has_key = std::string("clip.has_") + name + "_encoder";
    const gguf::Value* has = file_->find(has_key);
    if (has && has->type != gguf::ValueType::BOOL) fail("key " + has_key + " is not a bool");
    const bool declared = has && has->u != 0;
    std::string type = str_key(key);
    if (type.empty() && declared) type = generic;
    if (type.empty()) {
      if (declared)
        fail(has_key + " is true but neither " + key + " nor clip.projector_type names the projector");
      return;
    }
    if (has && !declared) return;  // the type key without the tower (a converter leftover): no tower
    if (type != expected)
      fail(key + " is '" + type + "'" + unsupported_type_note(type) + "; gem4 runs '" + expected + "' only");
    out = type;
  };
  tower("vision", "gemma4v", vision_type_);
  tower("audio", "gemma4a", audio_type_);
  if (!has_vision() && !has_audio())
    fail(
        "holds neither a vision nor an audio tower (no clip.vision.projector_type / "
        "clip.audio.projector_type)");
}

int64_t MmprojFile::get_int(const std::string& key) const {
  const gguf::Value* v = file_->find(key);
  if (!v) fail("missing key " + key);
  if (!v->is_integer()) fail("key " + key + " is not an integer");
  return v->as_int();
}

int64_t MmprojFile::get_int_or(const std::string& key, int64_t fallback) const {
  return file_->has(key) ? get_int(key) : fallback;
}

double MmprojFile::get_float_or(const std::string& key, double fallback) const {
  const gguf::Value* v = file_->find(key);
  if (!v) return fallback;
  if (!v->is_float() && !v->is_integer()) fail("key " + key + " is not a number");
  return v->as_double();
}

std::vector<float> MmprojFile::get_float_array_or(const std::string& key, std::vector<float> fallback) const {
  if (!file_->has(key)) return fallback;
  try {
    return file_->get_float_array(key);
  } catch (const gguf::GgufError& e) {
    throw MmprojError(e.what());
  }
}

const gguf::TensorInfo* MmprojFile::find_tensor(const std::string& name) const {
  return file_->find_tensor(name);
}

const gguf::TensorInfo& MmprojFile::require(const std::string& name, const std::vector<int64_t>& ne) const {
  const gguf::TensorInfo* t = file_->find_tensor(name);
  if (!t) fail_tensor(name, "is missing (expected shape " + shape_string(ne) + ")");
  used_.insert(name);
  std::vector<int64_t> got = t->ne;
  while (got.size() > ne.size() && got.back() == 1) got.pop_back();
  if (got != ne) fail_tensor(name, "has shape " + shape_string(t->ne) + ", expected " + shape_string(ne));
  return *t;
}

MatrixView MmprojFile::matrix(const std::string& name, int64_t in, int64_t out) const {
  const gguf::TensorInfo& t = require(name, {in, out});
  if (!is_supported_weight_type(t.type))
    fail_tensor(name,
                std::string("has type ") + ggml_type_name(t.type) + ", which gem4 does not compute with");
  if (in % ggml_block_elems(t.type) != 0)
    fail_tensor(name, "has " + std::to_string(in) + " columns, not a multiple of its type's block");
  MatrixView m;
  m.type = t.type;
  m.data = file_->tensor_data(t);
  m.in = in;
  m.out = out;
  m.row_bytes = ggml_row_bytes(t.type, in);
  return m;
}

std::vector<float> MmprojFile::floats(const std::string& name, const std::vector<int64_t>& ne) const {
  const gguf::TensorInfo& t = require(name, ne);
  if (!is_supported_weight_type(t.type))
    fail_tensor(name, std::string("has type ") + ggml_type_name(t.type) + ", which gem4 does not read");
  const int64_t n = t.n_elements();
  if (t.ne.empty() || t.ne[0] % ggml_block_elems(t.type) != 0)
    fail_tensor(name, "has rows that are not a multiple of its type's block");
  std::vector<float> v(static_cast<size_t>(n));
  const int64_t row = t.ne[0];
  const size_t row_bytes = ggml_row_bytes(t.type, row);
  const uint8_t* src = file_->tensor_data(t);
  for (int64_t r = 0; r < n / row; ++r)
    dequantize_row(t.type, src + size_t(r) * row_bytes, v.data() + r * row, row);
  return v;
}

float MmprojFile::scalar(const std::string& name) const { return floats(name, {1})[0]; }

void MmprojFile::check_all_used(const std::vector<std::string>& prefixes,
                                const std::vector<std::string>& except) const {
  const auto starts = [](const std::string& s, const std::string& p) {
    return s.compare(0, p.size(), p) == 0;
  };
  std::vector<std::string> unused;
  for (const auto& t : file_->tensors()) {
    if (used_.count(t.name)) continue;
    const bool mine =
        std::any_of(prefixes.begin(), prefixes.end(), [&](auto& p) { return starts(t.name, p); });
    const bool other = std::any_of(except.begin(), except.end(), [&](auto& p) { return starts(t.name, p); });
    if (mine && !other) unused.push_back(t.name);
  }
  if (unused.empty()) return;
  std::string list;
  for (size_t i = 0; i < unused.size() && i < 8; ++i) list += (i ? "', '" : "'") + unused[i];
  fail("tensor " + list + "'" + (unused.size() > 8 ? " and more" : "") +
       (unused.size() == 1 ? " is" : " are") +
       " not part of the Gemma 4 projector layout gem4 knows (refusing to load rather than ignore " +
       (unused.size() == 1 ? "it" : "them") + ")");
}

ClampSemantics parse_clamp_semantics(const std::string& s) {
  if (s == "independent") return ClampSemantics::kIndependent;
  if (s == "llamacpp-inplace") return ClampSemantics::kLlamaCppInPlace;
  throw std::invalid_argument("clamp semantics '" + s + "': expected independent or llamacpp-inplace");
}

}  // namespace gem4::media
