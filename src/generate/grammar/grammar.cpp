#include "generate/grammar/grammar.h"

#include <algorithm>

namespace gem4::generate::grammar {

namespace {

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void encode(uint32_t cp, uint8_t* out, int n) {
  if (n == 1) {
    out[0] = uint8_t(cp);
    return;
  }
  static const uint8_t lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
  for (int i = n - 1; i > 0; --i) {
    out[i] = uint8_t(0x80 | (cp & 0x3F));
    cp >>= 6;
  }
  out[0] = uint8_t(lead[n] | cp);
}

// [lo, hi] with lo and hi of the same encoded length: split until every byte position varies
// independently (the classic UTF-8 range split, as regex engines do it).
void split_same_length(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_same_length(lo, lo | m, out);
        split_same_length((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_same_length(lo, (hi & ~m) - 1, out);
        split_same_length(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  encode(lo, a, n);
  encode(hi, b, n);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int i = 0; i < n; ++i) seq.push_back({a[i], b[i]});
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges, bool negate) {
  for (auto& r : ranges) r.hi = std::min<uint32_t>(r.hi, 0x10FFFF);
  std::sort(ranges.begin(), ranges.end(), [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
  std::vector<CodeRange> merged;
  for (const auto& r : ranges) {
    if (r.lo > r.hi) continue;
    if (!merged.empty() && r.lo <= merged.back().hi + 1)
      merged.back().hi = std::max(merged.back().hi, r.hi);
    else
      merged.push_back(r);
  }
  if (!negate) return merged;
  std::vector<CodeRange> out;
  uint32_t next = 0;
  for (const auto& r : merged) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_byte_ranges(std::vector<CodeRange> ranges) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> out;
  for (CodeRange r : normalize_ranges(std::move(ranges), false)) {
    // Cut out the surrogates, then split at the encoded-length boundaries.
    std::vector<CodeRange> parts;
    if (r.lo < 0xD800 && r.hi > 0xDFFF) {
      parts = {{r.lo, 0xD7FF}, {0xE000, r.hi}};
    } else if (r.lo >= 0xD800 && r.hi <= 0xDFFF) {
      continue;
    } else if (r.lo >= 0xD800 && r.lo <= 0xDFFF) {
      parts = {{0xE000, r.hi}};
    } else if (r.hi >= 0xD800 && r.hi <= 0xDFFF) {
      parts = {{r.lo, 0xD7FF}};
    } else {
      parts = {r};
    }
    for (CodeRange p : parts) {
      static const uint32_t limits[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
      for (uint32_t lim : limits) {
        if (p.lo > p.hi) break;
        if (p.lo > lim) continue;
        const uint32_t hi = std::min(p.hi, lim);
        split_same_length(p.lo, hi, out);
        p.lo = hi + 1;
      }
    }
  }
  return out;
}

void check_not_left_recursive(const Grammar& g) {
  const int n = int(g.rule_alts.size());
  // Nullable rules by fixed point.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (int32_t a : g.rule_alts[r]) {
        bool all = true;
        for (int32_t i = a; g.elements[i].kind != Element::End; ++i)
          if (g.elements[i].kind != Element::Ref || !nullable[g.elements[i].value]) {
            all = false;
            break;
          }
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // Edges r -> s where s can start r; a cycle is left recursion.
  std::vector<std::vector<int32_t>> left(n);
  for (int r = 0; r < n; ++r)
    for (int32_t a : g.rule_alts[r])
      for (int32_t i = a; g.elements[i].kind == Element::Ref; ++i) {
        left[r].push_back(g.elements[i].value);
        if (!nullable[g.elements[i].value]) break;
      }
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<int32_t, size_t>> stack;
  for (int s = 0; s < n; ++s) {
    if (color[s]) continue;
    stack.push_back({s, 0});
    color[s] = 1;
    while (!stack.empty()) {
      auto& [r, k] = stack.back();
      if (k < left[r].size()) {
        const int32_t t = left[r][k++];
        if (color[t] == 1) throw GrammarError("rule '" + g.rule_names[t] + "' is left recursive");
        if (color[t] == 0) {
          color[t] = 1;
          stack.push_back({t, 0});
        }
      } else {
        color[r] = 2;
        stack.pop_back();
      }
    }
  }
}

}  // namespace gem4::generate::grammar
