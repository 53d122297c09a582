// Outside gem4's build: a small program linked against a llama.cpp tree's libllama + libmtmd
// (scripts/peer/mtmd_ref.sh builds and runs it), for reference outputs of upstream llama.cpp:
//
//   mtmd_ref logits TEXT.gguf MMPROJ.gguf MEDIA_FILE PROMPT EMBD.f32 OUT.f32
//     decodes one reference prompt of ../shared/testdata/mtmd-ref the way that data was made (F32 KV,
//     flash attention off, one 1024-row micro-batch, the media chunk through
//     mtmd_helper_decode_image_chunk, which switches images to non-causal attention), but with the
//     media rows taken from EMBD.f32 (the reference data's own), so only the text model is compared.
//     Writes the logits of every row of the last text chunk, float32 [rows][n_vocab].
//   mtmd_ref embd TEXT.gguf MMPROJ.gguf (rgb W H PIXELS.u8 | audio FILE.wav) OUT.f32
//     the projector's output rows for one image (RGB bytes of a size the projector takes as it is, so
//     no resize runs) or one audio file, float32 [tokens][n_embd].
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"
#include "mtmd-helper.h"
#include "mtmd.h"

namespace {

int fail(const std::string& what) {
  std::fprintf(stderr, "mtmd_ref: %s\n", what.c_str());
  return 1;
}

std::vector<float> read_floats(const char* path, size_t n) {
  std::vector<float> v(n);
  FILE* f = std::fopen(path, "rb");
  if (!f) return {};
  const size_t got = std::fread(v.data(), sizeof(float), n, f);
  std::fclose(f);
  if (got != n) return {};
  return v;
}

struct Session {
  llama_model* model = nullptr;
  llama_context* lctx = nullptr;
  mtmd_context* mctx = nullptr;
  ~Session() {
    if (mctx) mtmd_free(mctx);
    if (lctx) llama_free(lctx);
    if (model) llama_model_free(model);
  }
};

// The reference's settings: 2 threads, F32 KV, flash attention off, 1024-row batches.
bool open_session(Session& s, const char* text_path, const char* mmproj_path) {
  llama_backend_init();
  s.model = llama_model_load_from_file(text_path, llama_model_default_params());
  if (!s.model) return false;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = cp.n_batch = cp.n_ubatch = 1024;
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = 2;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  cp.swa_full = true;
  s.lctx = llama_init_from_model(s.model, cp);
  mtmd_context_params mp = mtmd_context_params_default();
  mp.use_gpu = false;
  mp.n_threads = 2;
  mp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  // The reference's soft-token budget for images (later llama.cpp raised its default to 70..1120).
  mp.image_min_tokens = 40;
  mp.image_max_tokens = 280;
  s.mctx = mtmd_init_from_file(mmproj_path, s.model, mp);
  return s.lctx && s.mctx;
}

mtmd_bitmap* media_from_file(mtmd_context* mctx, const char* path) {
#ifdef MTMD_HELPER_INIT_OPT
  return mtmd_helper_bitmap_init_from_file(mctx, path, false, mtmd_helper_init_opt_default()).bitmap;
#else
  return mtmd_helper_bitmap_init_from_file(mctx, path, false).bitmap;
#endif
}

bool write_floats(const char* path, const float* data, size_t n) {
  FILE* out = std::fopen(path, "wb");
  if (!out) return false;
  const bool ok = std::fwrite(data, sizeof(float), n, out) == n;
  return std::fclose(out) == 0 && ok;
}

int run_logits(char** argv) {
  const char *text_path = argv[0], *mmproj_path = argv[1], *media_path = argv[2], *embd_path = argv[4],
             *out_path = argv[5];
  const std::string prompt = argv[3];
  Session s;
  if (!open_session(s, text_path, mmproj_path)) return fail(std::string("cannot open ") + mmproj_path);
  mtmd_bitmap* media = media_from_file(s.mctx, media_path);
  if (!media) return fail(std::string("cannot read ") + media_path);
  mtmd_input_chunks* chunks = mtmd_input_chunks_init();
  const mtmd_input_text text{prompt.c_str(), prompt.size(), true, true};
  const mtmd_bitmap* bitmaps[1] = {media};
  if (mtmd_tokenize(s.mctx, chunks, &text, bitmaps, 1) != 0) return fail("mtmd_tokenize failed");
  const int d = llama_model_n_embd(s.model);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(s.model));
  const size_t n_chunks = mtmd_input_chunks_size(chunks);
  llama_pos n_past = 0;
  for (size_t i = 0; i + 1 < n_chunks; ++i) {
    const mtmd_input_chunk* c = mtmd_input_chunks_get(chunks, i);
    if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
      if (mtmd_helper_eval_chunk_single(s.mctx, s.lctx, c, n_past, 0, 1024, false, &n_past))
        return fail("decoding a text chunk failed");
      continue;
    }
    std::vector<float> embd = read_floats(embd_path, mtmd_input_chunk_get_n_tokens(c) * size_t(d));
    if (embd.empty()) return fail(std::string("cannot read the media rows from ") + embd_path);
    if (mtmd_helper_decode_image_chunk(s.mctx, s.lctx, c, embd.data(), n_past, 0, 1024, &n_past, nullptr,
                                       nullptr))
      return fail("decoding the media chunk failed");
  }
  // The last text chunk with logits for every row.
  const mtmd_input_chunk* last = mtmd_input_chunks_get(chunks, n_chunks - 1);
  if (mtmd_input_chunk_get_type(last) != MTMD_INPUT_CHUNK_TYPE_TEXT)
    return fail("the prompt must end in text");
  size_t n_rows = 0;
  const llama_token* ids = mtmd_input_chunk_get_tokens_text(last, &n_rows);
  llama_batch batch = llama_batch_init(int(n_rows), 0, 1);
  for (size_t j = 0; j < n_rows; ++j) {
    batch.token[j] = ids[j];
    batch.pos[j] = n_past + llama_pos(j);
    batch.n_seq_id[j] = 1;
    batch.seq_id[j][0] = 0;
    batch.logits[j] = 1;
  }
  batch.n_tokens = int(n_rows);
  if (llama_decode(s.lctx, batch)) return fail("decoding the last text chunk failed");
  std::vector<float> logits;
  for (size_t j = 0; j < n_rows; ++j) {
    const float* row = llama_get_logits_ith(s.lctx, int(j));
    logits.insert(logits.end(), row, row + n_vocab);
  }
  if (!write_floats(out_path, logits.data(), logits.size()))
    return fail(std::string("cannot write ") + out_path);
  std::printf("%s: %zu rows x %d logits\n", out_path, n_rows, n_vocab);
  llama_batch_free(batch);
  mtmd_input_chunks_free(chunks);
  mtmd_bitmap_free(media);
  return 0;
}

int run_embd(int argc, char** argv) {
  const bool rgb = argc == 7 && std::strcmp(argv[2], "rgb") == 0;
  const bool audio = argc == 5 && std::strcmp(argv[2], "audio") == 0;
  if (!rgb && !audio)
    return fail("usage: mtmd_ref embd TEXT MMPROJ (rgb W H PIXELS.u8 | audio FILE.wav) OUT");
  Session s;
  if (!open_session(s, argv[0], argv[1])) return fail(std::string("cannot open ") + argv[1]);
  mtmd_bitmap* media = nullptr;
  if (rgb) {
    const int w = std::atoi(argv[3]), h = std::atoi(argv[4]);
    std::vector<unsigned char> px(size_t(w) * h * 3);
    FILE* f = std::fopen(argv[5], "rb");
    const bool ok = f && std::fread(px.data(), 1, px.size(), f) == px.size();
    if (f) std::fclose(f);
    if (!ok) return fail(std::string("cannot read ") + argv[5]);
    media = mtmd_bitmap_init(uint32_t(w), uint32_t(h), px.data());
  } else {
    media = media_from_file(s.mctx, argv[3]);
  }
  if (!media) return fail("cannot make the media bitmap");
  const char* out_path = argv[argc - 1];
  const std::string prompt = mtmd_default_marker();
  mtmd_input_chunks* chunks = mtmd_input_chunks_init();
  const mtmd_input_text text{prompt.c_str(), prompt.size(), false, true};
  const mtmd_bitmap* bitmaps[1] = {media};
  if (mtmd_tokenize(s.mctx, chunks, &text, bitmaps, 1) != 0) return fail("mtmd_tokenize failed");
  int written = -1;
  for (size_t i = 0; i < mtmd_input_chunks_size(chunks); ++i) {
    const mtmd_input_chunk* c = mtmd_input_chunks_get(chunks, i);
    if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT) continue;
    if (mtmd_encode_chunk(s.mctx, c) != 0) return fail("mtmd_encode_chunk failed");
    const size_t n = mtmd_input_chunk_get_n_tokens(c);
    if (!write_floats(out_path, mtmd_get_output_embd(s.mctx), n * size_t(llama_model_n_embd(s.model))))
      return fail(std::string("cannot write ") + out_path);
    written = int(n);
  }
  if (written < 0) return fail("no media chunk");
  std::printf("%s: %d tokens x %d\n", out_path, written, llama_model_n_embd(s.model));
  mtmd_input_chunks_free(chunks);
  mtmd_bitmap_free(media);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 8 && std::strcmp(argv[1], "logits") == 0) return run_logits(argv + 2);
  if (argc >= 3 && std::strcmp(argv[1], "embd") == 0) return run_embd(argc - 2, argv + 2);
  return fail(
      "usage: mtmd_ref logits TEXT MMPROJ MEDIA PROMPT EMBD.f32 OUT.f32 | "
      "mtmd_ref embd TEXT MMPROJ (rgb W H PIXELS.u8 | audio FILE.wav) OUT.f32");
}
