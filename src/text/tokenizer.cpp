#include "text/tokenizer.h"

#include <algorithm>
#include <climits>
#include <queue>
#include <unordered_map>

namespace gem4::text {

namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Character length from the lead byte alone (llama.cpp's unicode_len_utf8).
inline size_t utf8_char_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

void append_code_point(std::string& out, uint32_t cpt) {
  if (cpt <= 0x7F) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {  // surrogates included: llama.cpp re-encodes them unchanged
    out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0x10FFFF) {
    out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out.append(kReplacement);
  }
}

// A piece of text cut out by the special-token pass: either a token or a byte range of raw text.
struct Fragment {
  size_t begin = 0, size = 0;
  int32_t token = kNoToken;  // kNoToken: raw text
};

// llama.cpp's tokenizer_st_partition: each special token in turn (longest first) splits every raw
// fragment at each of its occurrences, scanning left to right.
std::vector<Fragment> partition_special(const Vocab& vocab, std::string_view text, bool parse_special) {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back(Fragment{0, text.size(), kNoToken});

  bool present[256] = {};
  for (unsigned char c : text) present[c] = true;

  std::vector<Fragment> next;
  for (int32_t id : vocab.special_tokens()) {
    if (!parse_special && vocab.has_attr(id, attr::kControl | attr::kUnknown)) continue;
    const std::string_view piece = vocab.text(id);
    if (!present[static_cast<unsigned char>(piece[0])]) continue;  // cheap reject
    bool split = false;
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token != kNoToken) {
        next.push_back(f);
        continue;
      }
      const std::string_view window = text.substr(0, f.begin + f.size);
      size_t pos = f.begin;
      for (size_t hit; (hit = window.find(piece, pos)) != std::string_view::npos; pos = hit + piece.size()) {
        if (hit > pos) next.push_back(Fragment{pos, hit - pos, kNoToken});
        next.push_back(Fragment{hit, piece.size(), id});
        split = true;
      }
      if (pos < f.begin + f.size) next.push_back(Fragment{pos, f.begin + f.size - pos, kNoToken});
    }
    if (split) fragments.swap(next);
  }
  return fragments;
}

// Per-call cache of BPE results for line pieces. Token ids live in one pool.
struct TransparentHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct PieceCache {
  static constexpr size_t kMaxPieceBytes = 256;
  static constexpr size_t kMaxEntries = 1 << 18;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, TransparentHash, std::equal_to<>> map;
  std::vector<int32_t> pool;
};

// BPE over the UTF-8 characters of one piece, as llama.cpp's llm_tokenizer_bpe_session does.
class BpeWorker {
 public:
  explicit BpeWorker(const Vocab& vocab) : vocab_(vocab) {}

  void run(std::string_view word, std::vector<int32_t>& out) {
    symbols_.clear();
    for (size_t pos = 0; pos < word.size();) {
      const uint8_t lead = static_cast<uint8_t>(word[pos]);
      const size_t len = std::min(utf8_char_len(lead), word.size() - pos);
      const int32_t id = lead < 0x80 ? vocab_.ascii_symbol(lead) : vocab_.symbol(word.substr(pos, len));
      const int32_t index = static_cast<int32_t>(symbols_.size());
      symbols_.push_back(
          Symbol{id, index - 1, index + 1, static_cast<uint32_t>(pos), static_cast<uint32_t>(len)});
      pos += len;
    }
    if (symbols_.empty()) return;
    symbols_.back().next = -1;

    if (symbols_.size() > 1) {
      queue_ = {};
      for (int32_t i = 1; i < static_cast<int32_t>(symbols_.size()); ++i) add_candidate(i - 1, i);
      while (!queue_.empty()) {
        const Candidate c = queue_.top();
        queue_.pop();
        Symbol& left = symbols_[c.left];
        Symbol& right = symbols_[c.right];
        // Stale when either side has been merged away or has grown since the pair was queued.
        if (left.len == 0 || right.len == 0 || left.next != c.right || left.id != c.left_id ||
            right.id != c.right_id)
          continue;
        left.id = c.result;
        left.len += right.len;
        right.len = 0;
        left.next = right.next;
        if (right.next >= 0) symbols_[right.next].prev = c.left;
        add_candidate(left.prev, c.left);
        add_candidate(c.left, left.next);
      }
    }

    for (int32_t i = 0; i != -1; i = symbols_[i].next) {
      const Symbol& s = symbols_[i];
      if (vocab_.valid(s.id)) {
        out.push_back(s.id);
        continue;
      }
      // Not a token: one <0xXX> per byte; a byte without such a token is dropped (as llama.cpp).
      for (uint32_t k = 0; k < s.len; ++k) {
        const int32_t b = vocab_.byte_token(static_cast<uint8_t>(word[s.start + k]));
        if (b != kNoToken) out.push_back(b);
      }
    }
  }

 private:
  struct Symbol {
    int32_t id;  // symbol id (a token id when < n_tokens), kNoToken for an unknown character
    int32_t prev, next;
    uint32_t start, len;  // len 0: merged into its left neighbour
  };
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, result;
  };
  struct LaterFirst {  // min-heap on (rank, left position)
    bool operator()(const Candidate& a, const Candidate& b) const {
      return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
    }
  };

  void add_candidate(int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t l = symbols_[left].id, r = symbols_[right].id;
    const std::optional<Merge> m = vocab_.merge(l, r);
    if (m) queue_.push(Candidate{m->rank, left, right, l, r, m->result});
  }

  const Vocab& vocab_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Candidate, std::vector<Candidate>, LaterFirst> queue_;
};

class FragmentEncoder {
 public:
  explicit FragmentEncoder(const Vocab& vocab) : vocab_(vocab), bpe_(vocab) {}

  void encode(std::string_view raw, std::vector<int32_t>& out) {
    normalized_.clear();
    append_llama_normalized(normalized_, raw);
    const std::string_view s = normalized_;
    for (size_t i = 0; i < s.size();) {
      size_t j = i;
      if (s[i] == '\n') {
        while (j < s.size() && s[j] == '\n') ++j;
        const std::string_view run = s.substr(i, j - i);
        // llama.cpp #21343: a run of newlines that is a token is emitted whole.
        if (std::optional<int32_t> id = vocab_.find(run)) {
          out.push_back(*id);
        } else {
          bpe_.run(run, out);
        }
      } else {
        j = s.find('\n', i);
        if (j == std::string_view::npos) j = s.size();
        encode_line(s.substr(i, j - i), out);
      }
      i = j;
    }
  }

 private:
  // Splits a line before each U+2581 that follows a character no merge can join to a U+2581:
  // no BPE symbol can ever span such a point, so the pieces tokenize independently.
  void encode_line(std::string_view line, std::vector<int32_t>& out) {
    size_t piece_start = 0, prev_start = 0;
    bool have_prev = false, prev_is_space = false;
    for (size_t p = 0; p < line.size();) {
      const size_t len = std::min(utf8_char_len(static_cast<uint8_t>(line[p])), line.size() - p);
      const bool is_space = line.compare(p, len, kSpaceMarker) == 0;
      if (is_space && have_prev && !prev_is_space &&
          !vocab_.glues_to_following_space(line.substr(prev_start, p - prev_start))) {
        encode_piece(line.substr(piece_start, p - piece_start), out);
        piece_start = p;
      }
      have_prev = true;
      prev_start = p;
      prev_is_space = is_space;
      p += len;
    }
    encode_piece(line.substr(piece_start), out);
  }

  void encode_piece(std::string_view piece, std::vector<int32_t>& out) {
    if (piece.empty()) return;
    if (piece.size() > PieceCache::kMaxPieceBytes) {
      bpe_.run(piece, out);
      return;
    }
    if (auto it = cache_.map.find(piece); it != cache_.map.end()) {
      const auto [offset, count] = it->second;
      out.insert(out.end(), cache_.pool.begin() + offset, cache_.pool.begin() + offset + count);
      return;
    }
    const size_t before = out.size();
    bpe_.run(piece, out);
    if (cache_.map.size() < PieceCache::kMaxEntries) {
      const uint32_t offset = static_cast<uint32_t>(cache_.pool.size());
      cache_.pool.insert(cache_.pool.end(), out.begin() + before, out.end());
      cache_.map.emplace(std::string(piece),
                         std::make_pair(offset, static_cast<uint32_t>(out.size() - before)));
    }
  }

  const Vocab& vocab_;
  BpeWorker bpe_;
  PieceCache cache_;
  std::string normalized_;
};

}  // namespace

void append_llama_normalized(std::string& out, std::string_view raw) {
  out.reserve(out.size() + raw.size() + raw.size() / 4);
  const size_t n = raw.size();
  for (size_t i = 0; i < n;) {
    const uint8_t b = static_cast<uint8_t>(raw[i]);
    if (b == ' ') {
      out.append(kSpaceMarker);
      ++i;
      continue;
    }
    if (b < 0x80) {
      out.push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    // llama.cpp's unicode_cpt_from_utf8: the lead byte fixes the length; continuation bytes must be
    // 10xxxxxx and present; nothing else is checked (no overlong or surrogate rejection).
    size_t need = 0;
    uint32_t cpt = 0;
    if ((b & 0x40) == 0) {
      need = 0;  // stray continuation byte
    } else if ((b & 0x20) == 0) {
      need = 1, cpt = b & 0x1F;
    } else if ((b & 0x10) == 0) {
      need = 2, cpt = b & 0x0F;
    } else if ((b & 0x08) == 0) {
      need = 3, cpt = b & 0x07;
    } else {
      need = 0;  // F8..FF
    }
    bool ok = need > 0 && i + need < n;
    for (size_t k = 1; ok && k <= need; ++k) {
      const uint8_t c = static_cast<uint8_t>(raw[i + k]);
      if ((c & 0xC0) != 0x80) ok = false;
      cpt = (cpt << 6) | (c & 0x3F);
    }
    if (!ok) {
      out.append(kReplacement);  // one U+FFFD, then resume at the next byte
      ++i;
      continue;
    }
    append_code_point(out, cpt);
    i += need + 1;
  }
}

Tokenizer Tokenizer::from_gguf(const gguf::GgufFile& file, const std::string& merge_cache_dir) {
  return Tokenizer(std::make_shared<const Vocab>(file, merge_cache_dir));
}

Tokenizer::Tokenizer(VocabData data) : vocab_(std::make_shared<const Vocab>(std::move(data))) {}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  const Vocab& vocab = *vocab_;
  if (text.size() > static_cast<size_t>(INT32_MAX))  // symbol indices are 32-bit
    throw TokenizerError(vocab.source() + ": text of " + std::to_string(text.size()) +
                         " bytes is too long to tokenize");
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos) {
    if (vocab.special().bos == kNoToken)
      throw TokenizerError(vocab.source() + ": BOS requested but tokenizer.ggml.bos_token_id is not set");
    out.push_back(vocab.special().bos);
  }
  FragmentEncoder encoder(vocab);
  for (const Fragment& f : partition_special(vocab, text, parse_special)) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
    } else {
      encoder.encode(text.substr(f.begin, f.size), out);
    }
  }
  return out;
}

std::string Tokenizer::token_piece(int32_t id, bool special) const {
  if (!special && vocab_->has_attr(id, attr::kControl | attr::kUnknown)) return std::string();
  return std::string(vocab_->piece(id));
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool special) const {
  std::string out;
  for (int32_t id : ids) {
    if (!special && vocab_->has_attr(id, attr::kControl | attr::kUnknown)) continue;
    out += vocab_->piece(id);
  }
  return out;
}

}  // namespace gem4::text
