#include "generate/media_prompt.h"

#include <stdexcept>

namespace gem4::generate {

namespace {

int32_t require_token(const text::Tokenizer& tok, const char* text) {
  const auto id = tok.find_token(text);
  if (!id)
    throw std::invalid_argument(std::string("the model's vocabulary has no ") + text + " token for media");
  return *id;
}

}  // namespace

MediaInput make_media_input(bool image, std::vector<float> embd, int n_embd) {
  MediaInput m;
  m.image = image;
  m.rows = n_embd > 0 ? int(embd.size() / size_t(n_embd)) : 0;
  m.hash = media_hash(embd);
  m.embd = std::make_shared<const std::vector<float>>(std::move(embd));
  return m;
}

std::vector<MediaSpan> expand_media(std::vector<int32_t>& tokens, const text::Tokenizer& tok,
                                    const std::vector<MediaInput>& media) {
  if (media.empty()) return {};
  bool any_image = false, any_audio = false;
  for (const MediaInput& m : media) (m.image ? any_image : any_audio) = true;
  const int32_t kinds[2][3] = {
      {any_image ? require_token(tok, "<|image|>") : -1, any_image ? require_token(tok, "<|image>") : -1,
       any_image ? require_token(tok, "<image|>") : -1},
      {any_audio ? require_token(tok, "<|audio|>") : -1, any_audio ? require_token(tok, "<|audio>") : -1,
       any_audio ? require_token(tok, "<audio|>") : -1}};
  const int32_t pad = tok.pad() >= 0 ? tok.pad() : kMediaPlaceholderToken;
  // Missing placeholders go after BOS, in the media's order.
  for (int k = 0; k < 2; ++k) {
    if (kinds[k][0] < 0) continue;
    int have = 0, want = 0;
    for (int32_t t : tokens) have += t == kinds[k][0];
    for (const MediaInput& m : media) want += m.image == (k == 0);
    if (have > want)
      throw std::invalid_argument("the prompt has " + std::to_string(have) + (k == 0 ? " image" : " audio") +
                                  " placeholders but " + std::to_string(want) + " were given");
    const size_t at = !tokens.empty() && tokens[0] == tok.bos() ? 1 : 0;
    tokens.insert(tokens.begin() + at, size_t(want - have), kinds[k][0]);
  }
  std::vector<int32_t> out;
  std::vector<MediaSpan> spans;
  size_t next[2] = {0, 0};
  const auto nth = [&](int k) -> const MediaInput& {
    while (media[next[k]].image != (k == 0)) ++next[k];
    return media[next[k]++];
  };
  for (int32_t t : tokens) {
    const int k = t == kinds[0][0] && kinds[0][0] >= 0 ? 0 : t == kinds[1][0] && kinds[1][0] >= 0 ? 1 : -1;
    if (k < 0) {
      out.push_back(t);
      continue;
    }
    const MediaInput& m = nth(k);
    out.push_back(kinds[k][1]);
    MediaSpan s;
    s.first = int(out.size());
    s.count = m.rows;
    s.bidirectional = m.image;
    s.embd = m.embd;
    s.hash = m.hash;
    spans.push_back(s);
    out.insert(out.end(), size_t(m.rows), pad);
    out.push_back(kinds[k][2]);
  }
  tokens = std::move(out);
  return spans;
}

}  // namespace gem4::generate
