// The gemma4v vision tower of a Gemma 4 E2B/E4B projector file, as llama.cpp's multimodal library runs
// it: image -> target size, resize + pad, normalise, patch embedding, learned 2-D position tables, ViT
// blocks (RMS norms, clamped linears, per-head q/k/v norms, 2-D NeoX RoPE, bidirectional attention,
// post norms, gelu_quick FFN), 3x3 average pool, x sqrt(width), RMS norm, input projection to the text
// model's width. The output rows are the image's soft tokens. The GEMMs (q/k/v/o, FFN, attention scores
// and value sums, the patch convolution as a GEMM over im2col rows) run on kernels::matmul.
#pragma once
#include <array>
#include <functional>
#include <string>
#include <vector>

#include "media/clamped_linear.h"
#include "media/image.h"
#include "media/image_preprocess.h"

namespace gem4 {
class ThreadPool;
}

namespace gem4::media {

class MmprojFile;

struct VisionHparams {
  int n_embd = 0;   // encoder width (clip.vision.embedding_length)
  int n_ff = 0;     // FFN width
  int n_layer = 0;  // ViT blocks
  int n_head = 0;
  int head_dim = 0;
  int patch = 0;       // patch side in pixels
  int n_merge = 3;     // pooling kernel (clip.vision.projector.scale_factor)
  int pos_size = 0;    // rows of each position table
  int n_embd_out = 0;  // the text model's width (mm.input_projection)
  float eps = 1e-6f;
  float rope_theta = 100.0f;
  std::array<float, 3> mean{0, 0, 0}, std{1, 1, 1};
  int min_tokens = 40, max_tokens = 280;  // llama.cpp's fixed bounds for gemma4v
  int align() const { return patch * n_merge; }
};

// Called with each named intermediate: "inp", "pos_embd", "layer_out-N", "pooled", "embd" (rows x cols,
// row-major), the names of llama.cpp's graph nodes in the reference dumps.
using EncoderTrace =
    std::function<void(const std::string& name, const float* data, int64_t rows, int64_t cols)>;

class VisionEncoder {
 public:
  // Reads the vision tower of `file` (which must outlive this object) and checks every v.* / mm.*
  // tensor of it. Throws MmprojError naming the file and the key or tensor.
  explicit VisionEncoder(const MmprojFile& file);

  const VisionHparams& hparams() const { return hp_; }
  int n_embd_out() const { return hp_.n_embd_out; }
  // The size the image is resized to, and the soft tokens it gives.
  ImageSize target_size(int width, int height) const;
  int n_tokens(int width, int height) const;

  // Soft-token embeddings of a decoded image: n_tokens x n_embd_out, row-major over the pooled grid.
  std::vector<float> encode(const RgbImage& image, ThreadPool* pool, const EncoderTrace& trace = {}) const;
  // The same for an image already of a valid target size (multiples of align()).
  std::vector<float> encode_resized(const RgbImage& resized, ThreadPool* pool,
                                    const EncoderTrace& trace = {}) const;

 private:
  struct Block {
    std::vector<float> ln1, q_norm, k_norm, attn_post_norm, ln2, ffn_post_norm;
    ClampedLinear q, k, v, o, gate, up, down;
    std::vector<float> out_scale;  // optional: 1 value or n_embd (empty: none)
  };
  void run_block(const Block& b, float* h, int64_t n, const std::vector<int>& col,
                 const std::vector<int>& row, ThreadPool* pool) const;
  const MmprojFile& file_;
  VisionHparams hp_;
  std::vector<float> patch_kernel_;  // n_embd x (3 P P), fp16-rounded (see vision_ops.h)
  MatrixView patch_matrix_;
  std::vector<float> pos_table_;  // [2][pos_size][n_embd]: by column, then by row
  std::vector<Block> blocks_;
  std::vector<float> std_bias_, std_scale_;  // optional (26B/31B files)
  ClampedLinear projection_;
};

}  // namespace gem4::media
