// The gemma4a audio tower of a Gemma 4 E2B/E4B projector file, as llama.cpp's multimodal library runs
// it: WAV -> 16 kHz mono (audio_wav.h), log-mel per 30 s chunk (audio_mel.h), then per chunk two 3x3
// stride-2 convolutions (fp16-rounded inputs and kernels, as ggml_conv_2d's F16 im2col computes them)
// each with a LayerNorm over channels and ReLU, the input projection, conformer blocks (half-step FFN,
// chunked local attention with relative positions and softcap, light convolution, half-step FFN, RMS
// norm), the output projection with bias, an RMS norm and the projection to the text model's width.
// Each chunk of T mel frames gives ((T-1)/2 + 1 - 1)/2 + 1 soft tokens; a clip's tokens are its chunks'
// rows in order, and the text model reads them causally between <|audio> and <audio|>.
//
// The GEMMs (convolutions as im2col products, every linear) run on kernels::matmul; the attention
// (24 keys per query), layer norms, the depthwise convolution and the activations are plain loops.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "media/audio_mel.h"
#include "media/audio_wav.h"
#include "media/clamped_linear.h"

namespace gem4 {
class ThreadPool;
}

namespace gem4::media {

class MmprojFile;

struct AudioHparams {
  int n_embd = 0;   // conformer width (clip.audio.embedding_length)
  int n_ff = 0;     // FFN width (clip.audio.feed_forward_length)
  int n_layer = 0;  // conformer blocks
  int n_head = 0;
  int head_dim = 0;
  int n_mel = 0;                  // mel bins (clip.audio.num_mel_bins)
  int sscp_channels[2] = {0, 0};  // output channels of the two subsampling convolutions
  int conv_kernel = 0;            // light-convolution taps
  int out_proj_dim = 0;           // a.pre_encode.out width
  int n_embd_out = 0;             // the text model's width (mm.a.input_projection)
  float eps = 1e-6f;              // hard-coded in llama.cpp (the file's key is not read)
  int chunk = 12;                 // attention block: queries per block
  int max_past = 12;              // keys per query: itself and max_past - 1 earlier frames
};

// Called with each named intermediate: "sscp_out", "layer_out-N", "embd" (rows x cols, row-major), the
// names of llama.cpp's graph nodes in the reference dumps. `chunk` is the 30 s chunk's index.
using AudioTrace =
    std::function<void(int chunk, const std::string& name, const float* data, int64_t rows, int64_t cols)>;

class AudioEncoder {
 public:
  // Reads the audio tower of `file` (which must outlive this object) and checks every a.* / mm.a.*
  // tensor of it. Throws MmprojError naming the file and the key or tensor (a file without an audio
  // tower, a projector type other than gemma4a, a missing or misshapen tensor, an unknown one).
  explicit AudioEncoder(const MmprojFile& file);

  const AudioHparams& hparams() const { return hp_; }
  int n_embd_out() const { return hp_.n_embd_out; }

  // Soft tokens of a chunk of `frames` mel frames, and of a whole 16 kHz clip (all its chunks).
  static int64_t n_tokens_for_frames(int64_t frames);
  int64_t n_tokens(const std::vector<float>& pcm16k) const;

  // Soft-token embeddings of a 16 kHz mono clip (read_wav_16k_mono): n_tokens x n_embd_out, row-major,
  // the chunks' rows one after another. Throws AudioError for a clip too short to give one frame.
  std::vector<float> encode(const std::vector<float>& pcm16k, ThreadPool* pool,
                            const AudioTrace& trace = {}) const;
  // One chunk's log-mel ([frames][n_mel]) to its rows.
  std::vector<float> encode_mel(const LogMel& mel, ThreadPool* pool, const AudioTrace& trace = {},
                                int chunk_index = 0) const;

 private:
  struct Ffn {
    std::vector<float> norm, post_norm;
    ClampedLinear up, down;
  };
  struct Block {
    Ffn ffn1, ffn2;
    std::vector<float> attn_pre_norm, attn_post_norm, per_dim_scale;
    ClampedLinear q, k, v, o;
    std::vector<float> rel_pos;  // [max_past + 1][n_embd]: attn_k_rel applied to the sinusoids
    std::vector<float> conv_pre_norm, conv_post_norm, conv_dw;  // conv_dw: [n_embd][conv_kernel]
    ClampedLinear pw1, pw2;
    std::vector<float> out_norm;  // ln2
  };
  void run_ffn(const Ffn& f, float* h, int64_t n, ThreadPool* pool) const;
  void run_attention(const Block& b, float* h, int64_t n, ThreadPool* pool) const;
  void run_light_conv(const Block& b, float* h, int64_t n, ThreadPool* pool) const;

  const MmprojFile& file_;
  AudioHparams hp_;
  std::vector<float> conv_kernel_[2];  // [out][in * 9], fp16-rounded
  std::vector<float> conv_bias_[2];    // optional
  std::vector<float> conv_norm_[2];    // LayerNorm weights over channels
  MatrixView conv_matrix_[2];
  ClampedLinear input_projection_;
  std::vector<float> input_projection_bias_;  // optional
  std::vector<Block> blocks_;
  ClampedLinear out_projection_;
  std::vector<float> out_projection_bias_;
  ClampedLinear mm_projection_;
};

}  // namespace gem4::media
