// Plain greedy decoding, the reference speculative decoding is held to: one token at a time through
// Session::set_tokens/push and an argmax of the logits.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "generate/session.h"

namespace gem4::test {

inline std::vector<int32_t> plain_greedy(Session& s, const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> out;
  s.set_tokens(prompt);
  while (true) {
    const float* logits = s.logits();
    out.push_back(int32_t(std::max_element(logits, logits + s.n_vocab()) - logits));
    if (int(out.size()) == n) return out;
    s.push(out.back());
  }
}

}  // namespace gem4::test
