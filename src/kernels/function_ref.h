// A non-owning reference to a callable, valid while the callable lives: what the thread pool takes for
// the work it runs within one call. std::function keeps 16 bytes in place and moves a larger callable
// (a lambda capturing three references or more) to the heap, which every decode product paid a few
// times (malloc and free were ~0.6 % of a decode token's samples on a Zen 5). Like a reference, it must not
// outlive what it refers to: a parameter, not a variable initialised from a temporary lambda.
#pragma once
#include <memory>
#include <type_traits>
#include <utility>

namespace gem4 {

template <class Signature>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef> &&
                                              !std::is_function_v<std::remove_reference_t<F>> &&
                                              std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor): stands in for a callable argument
      : target_{.object = const_cast<void*>(static_cast<const void*>(std::addressof(f)))},
        call_([](Target t, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(t.object))(std::forward<Args>(args)...);
        }) {}
  FunctionRef(R (*f)(Args...)) noexcept  // NOLINT(google-explicit-constructor)
      : target_{.function = f},
        call_([](Target t, Args... args) -> R { return t.function(std::forward<Args>(args)...); }) {}

  R operator()(Args... args) const { return call_(target_, std::forward<Args>(args)...); }

 private:
  union Target {  // a callable object, or a function (whose pointer need not fit a void*)
    void* object;
    R (*function)(Args...);
  };
  Target target_;
  R (*call_)(Target, Args...);
};

}  // namespace gem4
