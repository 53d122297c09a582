// FunctionRef: calls the callable it refers to (no copy), with the arguments and result as given.
#include "kernels/function_ref.h"

#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <string>

namespace gem4 {
namespace {

int twice(int x) { return 2 * x; }

int call(FunctionRef<int(int)> f, int x) { return f(x); }

TEST(FunctionRef, CallsWhatItRefersTo) {
  // A lambda capturing more than std::function keeps in place, mutated through the reference.
  std::array<int, 8> big{1, 2, 3, 4, 5, 6, 7, 8};
  int calls = 0;
  auto sum_plus = [&, big](int x) {
    ++calls;
    int s = x;
    for (int v : big) s += v;
    return s;
  };
  EXPECT_EQ(call(sum_plus, 4), 40);
  EXPECT_EQ(call(sum_plus, -36), 0);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(call(twice, 21), 42);
  const std::function<int(int)> f = [](int x) { return x - 1; };
  EXPECT_EQ(call(f, 1), 0);
  // References pass through as references. (A FunctionRef must not outlive what it refers to: the
  // lambda is named, not a temporary of the declaration.)
  std::string text;
  const auto append_to = [](std::string& to, const std::string& s) { to += s; };
  const FunctionRef<void(std::string&, const std::string&)> append = append_to;
  append(text, "ab");
  append(text, "c");
  EXPECT_EQ(text, "abc");
}

}  // namespace
}  // namespace gem4
