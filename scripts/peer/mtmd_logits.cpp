// Outside gem4's build: a small program linked against a llama.cpp tree's libllama + libmtmd
// (scripts/peer/mtmd_logits.sh builds and runs it). It decodes one reference prompt of
// ../shared/testdata/mtmd-ref the way that data was made (F32 KV, flash attention off, one 1024-row
// micro-batch, the media chunk through mtmd_helper_decode_image_chunk, which switches images to
// non-causal attention), but with the media rows taken from a file (the reference data's own
// embd.f32), so only the text model is compared. Writes the logits of every row of the last text
// chunk, float32 [rows][n_vocab].
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
  std::fprintf(stderr, "mtmd_logits: %s\n", what.c_str());
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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) return fail("usage: mtmd_logits TEXT.gguf MMPROJ.gguf MEDIA_FILE PROMPT EMBD.f32 OUT.f32");
  const char *text_path = argv[1], *mmproj_path = argv[2], *media_path = argv[3], *embd_path = argv[5],
             *out_path = argv[6];
  const std::string prompt = argv[4];
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(text_path, llama_model_default_params());
  if (!model) return fail(std::string("cannot load ") + text_path);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = cp.n_batch = cp.n_ubatch = 1024;
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = 2;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  cp.swa_full = true;
  llama_context* lctx = llama_init_from_model(model, cp);
  mtmd_context_params mp = mtmd_context_params_default();
  mp.use_gpu = false;
  mp.n_threads = 2;
  mp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  // The reference's soft-token budget for images (later llama.cpp raised its default to 70..1120).
  mp.image_min_tokens = 40;
  mp.image_max_tokens = 280;
  mtmd_context* mctx = mtmd_init_from_file(mmproj_path, model, mp);
  if (!lctx || !mctx) return fail(std::string("cannot open ") + mmproj_path);
#ifdef MTMD_HELPER_INIT_OPT
  mtmd_helper_bitmap_wrapper media =
      mtmd_helper_bitmap_init_from_file(mctx, media_path, false, mtmd_helper_init_opt_default());
#else
  mtmd_helper_bitmap_wrapper media = mtmd_helper_bitmap_init_from_file(mctx, media_path, false);
#endif
  if (!media.bitmap) return fail(std::string("cannot read ") + media_path);
  mtmd_input_chunks* chunks = mtmd_input_chunks_init();
  const mtmd_input_text text{prompt.c_str(), prompt.size(), true, true};
  const mtmd_bitmap* bitmaps[1] = {media.bitmap};
  if (mtmd_tokenize(mctx, chunks, &text, bitmaps, 1) != 0) return fail("mtmd_tokenize failed");
  const int d = llama_model_n_embd(model);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const size_t n_chunks = mtmd_input_chunks_size(chunks);
  llama_pos n_past = 0;
  for (size_t i = 0; i + 1 < n_chunks; ++i) {
    const mtmd_input_chunk* c = mtmd_input_chunks_get(chunks, i);
    if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
      if (mtmd_helper_eval_chunk_single(mctx, lctx, c, n_past, 0, 1024, false, &n_past))
        return fail("decoding a text chunk failed");
      continue;
    }
    std::vector<float> embd = read_floats(embd_path, mtmd_input_chunk_get_n_tokens(c) * size_t(d));
    if (embd.empty()) return fail(std::string("cannot read the media rows from ") + embd_path);
    if (mtmd_helper_decode_image_chunk(mctx, lctx, c, embd.data(), n_past, 0, 1024, &n_past, nullptr,
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
  if (llama_decode(lctx, batch)) return fail("decoding the last text chunk failed");
  FILE* out = std::fopen(out_path, "wb");
  if (!out) return fail(std::string("cannot write ") + out_path);
  for (size_t j = 0; j < n_rows; ++j)
    std::fwrite(llama_get_logits_ith(lctx, int(j)), sizeof(float), n_vocab, out);
  std::fclose(out);
  std::printf("%s: %zu rows x %d logits\n", out_path, n_rows, n_vocab);
  llama_batch_free(batch);
  mtmd_input_chunks_free(chunks);
  mtmd_bitmap_free(media.bitmap);
  mtmd_free(mctx);
  llama_free(lctx);
  llama_model_free(model);
  return 0;
}
