// The operation order of every float expression below is the reference's (miniaudio's linear
// resampler and biquad); this file is compiled without floating-point contraction (see
// CMakeLists.txt) so that no multiply-add is fused on a build that enables FMA.
#include "media/audio_resample.h"

#include <cmath>
#include <numeric>

namespace gem4::media {

namespace {

constexpr double kPi = 3.14159265358979323846264;

// miniaudio computes cos(x) as sin(pi/2 - x); the last bit can differ from std::cos.
double cos_as_reference(double x) { return std::sin(kPi * 0.5 - x); }

// One biquad section, transposed direct form II, f32 coefficients and state.
struct Biquad {
  float b0 = 0, b1 = 0, b2 = 0, a1 = 0, a2 = 0;
  float r1 = 0, r2 = 0;

  // Low-pass with quality q at `cutoff` Hz for a signal sampled at `rate` Hz (RBJ cookbook form).
  static Biquad low_pass(double rate, double cutoff, double q) {
    const double w = 2 * kPi * cutoff / rate;
    const double s = std::sin(w);
    const double c = cos_as_reference(w);
    const double a = s / (2 * q);
    const double b0 = (1 - c) / 2, b1 = 1 - c, b2 = (1 - c) / 2;
    const double a0 = 1 + a, a1 = -2 * c, a2 = 1 - a;
    Biquad f;
    f.b0 = float(b0 / a0);
    f.b1 = float(b1 / a0);
    f.b2 = float(b2 / a0);
    f.a1 = float(a1 / a0);
    f.a2 = float(a2 / a0);
    return f;
  }

  float step(float x) {
    const float y = b0 * x + r1;
    r1 = b1 * x - a1 * y + r2;
    r2 = b2 * x - a2 * y;
    return y;
  }
};

// miniaudio's default resampler filter: order 4 = two second-order sections with Butterworth Qs.
struct LowPass4 {
  Biquad s[2];
  LowPass4(double rate, double cutoff) {
    const int order = 4;
    for (int i = 0; i < 2; ++i) {
      const double angle = (1 + i * 2) * (kPi / (order * 2));
      s[i] = Biquad::low_pass(rate, cutoff, 1 / (2 * cos_as_reference(angle)));
    }
  }
  float step(float x) { return s[1].step(s[0].step(x)); }
};

}  // namespace

uint64_t resampled_length(uint32_t rate_out, uint32_t rate_in, uint64_t frames_in) {
  if (rate_in == 0 || rate_out == 0 || frames_in == 0) return 0;
  if (rate_out == rate_in) return frames_in;
  // The reference's own estimate (ma_calculate_frame_count_after_resampling), kept as it is: the
  // decoder reports this length and the caller reads exactly this many frames.
  uint64_t out = frames_in * rate_out / rate_in;
  const uint64_t from_frac = out * (rate_in / rate_out) / rate_out;
  const uint64_t prelim = out * (rate_in % rate_out) + from_frac;
  if (prelim <= frames_in) out += 1;
  return out;
}

std::vector<float> resample_linear(const std::vector<float>& in, uint32_t rate_in, uint32_t rate_out) {
  if (rate_in == rate_out) return in;
  const uint64_t n_out = resampled_length(rate_out, rate_in, in.size());
  std::vector<float> out(n_out, 0.0f);  // frames the resampler cannot produce stay 0

  const uint32_t g = std::gcd(rate_in, rate_out);
  const uint32_t r_in = rate_in / g, r_out = rate_out / g;
  LowPass4 lpf(double(std::max(r_in, r_out)), double(std::min(r_in, r_out)) * 0.5 * 1.0);
  const bool downsample = r_in > r_out;
  const uint32_t advance_int = r_in / r_out, advance_frac = r_in % r_out;

  float x0 = 0, x1 = 0;
  uint64_t time_int = 1, time_frac = 0;  // one input frame is loaded before the first output
  size_t next_in = 0;
  for (uint64_t k = 0; k < n_out; ++k) {
    for (; time_int > 0 && next_in < in.size(); --time_int) {
      x0 = x1;
      x1 = in[next_in++];
      if (downsample) x1 = lpf.step(x1);
    }
    if (time_int > 0) break;  // out of input: the rest stays 0
    const float a = float(time_frac) / float(r_out);
    float y = x0 + (x1 - x0) * a;
    if (!downsample) y = lpf.step(y);
    out[k] = y;
    time_int += advance_int;
    time_frac += advance_frac;
    if (time_frac >= r_out) {
      time_frac -= r_out;
      time_int += 1;
    }
  }
  return out;
}

}  // namespace gem4::media
