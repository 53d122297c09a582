#include "media/mmproj_synthetic.h"

#include <stdexcept>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "media/mmproj_file.h"

namespace gem4::media {

SyntheticMmproj synthetic_mmproj_preset(const std::string& preset, GgmlType type, uint64_t seed) {
  if (type != GgmlType::F32 && type != GgmlType::F16 && type != GgmlType::BF16 && type != GgmlType::Q8_0)
    throw std::invalid_argument(std::string("projector matrices of type ") + ggml_type_name(type) +
                                " are not generated (f32, f16, bf16 or q8_0)");
  SyntheticMmproj m;
  m.name = "gemma4-" + preset + "-mmproj (random weights)";
  if (preset == "e2b") {
    m.v.n_embd_out = m.a.n_embd_out = 1536;
  } else if (preset == "e4b") {
    m.v.n_embd_out = m.a.n_embd_out = 2560;
  } else if (preset == "tiny") {
    // The reference files' shapes (../shared/testdata/mtmd-ref): runs in milliseconds.
    m.v.n_embd = 64, m.v.n_head = 4, m.v.n_ff = 128, m.v.n_layer = 2, m.v.pos_size = 256;
    m.a.n_embd = 64, m.a.n_head = 4, m.a.n_ff = 256, m.a.n_layer = 2;
    m.a.sscp_channels[0] = 8, m.a.sscp_channels[1] = 4, m.a.out_proj_dim = 96;
    m.v.n_embd_out = m.a.n_embd_out = 128;
  } else {
    throw std::invalid_argument("unknown projector preset '" + preset + "' (e2b, e4b or tiny)");
  }
  m.v.matrix_type = m.a.matrix_type = type;
  m.v.seed = m.a.seed = seed;
  return m;
}

void add_synthetic_mmproj(gguf::GgufWriter& w, const SyntheticMmproj& m) {
  if (!m.vision && !m.audio) throw std::invalid_argument("a projector needs a vision or an audio tower");
  if (m.vision) add_synthetic_vision_tower(w, m.v);
  if (m.audio) add_synthetic_audio_tower(w, m.a);
  w.set_string("general.name", m.name);
  const GgmlType t = m.vision ? m.v.matrix_type : m.a.matrix_type;
  if (const auto ft = llama_file_type_of(t)) w.set_u32("general.file_type", *ft);
}

void write_synthetic_mmproj(const SyntheticMmproj& m, const std::string& path) {
  gguf::GgufWriter w;
  add_synthetic_mmproj(w, m);
  w.write(path);
}

std::unique_ptr<MmprojFile> synthetic_mmproj_in_memory(const SyntheticMmproj& m) {
  gguf::GgufWriter w;
  add_synthetic_mmproj(w, m);
  std::unique_ptr<gguf::GgufFile> f;
  {
    const std::vector<uint8_t> bytes = w.to_bytes();  // from_memory copies; freed before returning
    f = gguf::GgufFile::from_memory(bytes.data(), bytes.size(), "<generated " + m.name + ">");
  }
  return MmprojFile::from_gguf(std::move(f));
}

}  // namespace gem4::media
