#include "text/detokenizer.h"

namespace gem4::text {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Well-formed UTF-8 (Unicode Table 3-7): the lead byte fixes the length and the allowed range of
// the second byte, which rules out overlong forms, surrogates and code points above U+10FFFF.
struct LeadInfo {
  uint8_t length;  // 0: cannot start a character
  uint8_t lo, hi;  // allowed second byte
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b >= 0xE1 && b <= 0xEC) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xEE && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

size_t append_valid_utf8(std::string& out, std::string_view bytes, bool final) {
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = static_cast<uint8_t>(bytes[i]);
    const LeadInfo info = lead_info(b);
    if (info.length == 1) {
      out.push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    if (info.length == 0) {
      out.append(kReplacement);
      ++i;
      continue;
    }
    size_t k = 1;  // bytes of this character that are valid so far
    while (k < info.length && i + k < n) {
      const uint8_t c = static_cast<uint8_t>(bytes[i + k]);
      const uint8_t lo = k == 1 ? info.lo : 0x80, hi = k == 1 ? info.hi : 0xBF;
      if (c < lo || c > hi) break;
      ++k;
    }
    if (k == info.length) {
      out.append(bytes.substr(i, k));
      i += k;
    } else if (i + k == n && !final) {
      return i;  // may still be completed by the next piece
    } else {
      out.append(kReplacement);  // the maximal invalid part, replaced once
      i += k;
    }
  }
  return n;
}

std::string StreamingDetokenizer::push(int32_t id) {
  pending_ += tokenizer_.token_piece(id, special_);
  std::string out;
  const size_t used = append_valid_utf8(out, pending_, /*final=*/false);
  pending_.erase(0, used);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out;
  append_valid_utf8(out, pending_, /*final=*/true);
  pending_.clear();
  return out;
}

}  // namespace gem4::text
