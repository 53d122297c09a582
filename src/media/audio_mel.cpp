// Every float expression keeps the reference's operation order (mtmd-audio's table-driven FFT and
// filterbank); the file is compiled without floating-point contraction (CMakeLists.txt).
#include "media/audio_mel.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>

namespace gem4::media {

namespace {

constexpr int kFft = 512;
constexpr int kWindow = 320;
constexpr int kHop = 160;
constexpr int kBins = kFft / 2 + 1;
constexpr double kPi = 3.14159265358979323846;

// The tables llama.cpp builds once: sin/cos of 2 pi i / 512 (evaluated in float), the periodic Hann
// window of 320 taps padded with zeros to 512, and the HTK filterbank [n_mel][257].
struct MelTables {
  float sin_[kFft], cos_[kFft], hann[kFft];
  int64_t n_mel = 0;
  std::vector<float> filters;

  explicit MelTables(int64_t mels) : n_mel(mels) {
    for (int i = 0; i < kFft; ++i) {
      const double theta = (2 * kPi * i) / kFft;
      sin_[i] = std::sin(float(theta));
      cos_[i] = std::cos(float(theta));
    }
    for (int i = 0; i < kFft; ++i) hann[i] = 0;
    for (int i = 0; i < kWindow; ++i)
      hann[i] = 0.5f - 0.5f * std::cos((2.0f * float(kPi) * float(i)) / float(kWindow));

    auto hz_to_mel = [](double f) { return 2595.0 * std::log10(1.0 + f / 700.0); };
    auto mel_to_hz = [](double m) { return 700.0 * (std::pow(10.0, m / 2595.0) - 1.0); };
    const double fmin = 0.0, fmax = double(float(kMelSampleRate) / 2.0f);
    const double bin_hz = double(kMelSampleRate) / double(kFft);
    const double m_lo = hz_to_mel(fmin), m_hi = hz_to_mel(fmax);
    std::vector<double> hz(n_mel + 2);
    for (int64_t i = 0; i < n_mel + 2; ++i)
      hz[i] = mel_to_hz(m_lo + (m_hi - m_lo) * (double(i) / double(n_mel + 1)));
    filters.assign(n_mel * kBins, 0.0f);
    for (int64_t m = 0; m < n_mel; ++m) {
      const double left = hz[m], center = hz[m + 1], right = hz[m + 2];
      const double denom_l = std::max(1e-30, center - left), denom_r = std::max(1e-30, right - center);
      for (int k = 0; k < kBins; ++k) {
        const double f = k * bin_hz;
        double w = 0.0;
        if (f >= left && f <= center) {
          w = (f - left) / denom_l;
        } else if (f > center && f <= right) {
          w = (right - f) / denom_r;
        }
        filters[m * kBins + k] = float(w);
      }
    }
  }
};

const MelTables& tables(int64_t n_mel) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<MelTables>> cache;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& t : cache)
    if (t->n_mel == n_mel) return *t;
  cache.push_back(std::make_unique<MelTables>(n_mel));
  return *cache.back();
}

// Radix-2 decimation in time on real input of length n (a power of two), complex output interleaved
// [re, im] x n. The recursion and the butterfly's expression order are the reference's.
void fft_real(const MelTables& t, const float* in, int n, float* out, float* scratch) {
  if (n == 1) {
    out[0] = in[0];
    out[1] = 0.0f;
    return;
  }
  const int half = n / 2;
  float* even = scratch;          // half samples
  float* odd = scratch + half;    // half samples
  float* even_fft = out + 2 * n;  // 2 * half floats beyond the output
  float* odd_fft = even_fft + n;  // 2 * half floats
  for (int i = 0; i < half; ++i) {
    even[i] = in[2 * i];
    odd[i] = in[2 * i + 1];
  }
  // The sub-transforms write their own temporaries beyond their outputs: give each room.
  fft_real(t, even, half, even_fft, scratch + n);
  fft_real(t, odd, half, odd_fft, scratch + n);
  const int step = kFft / n;
  for (int k = 0; k < half; ++k) {
    const float re = t.cos_[k * step];
    const float im = -1.0f * t.sin_[k * step];
    const float re_odd = odd_fft[2 * k], im_odd = odd_fft[2 * k + 1];
    const float e_re = even_fft[2 * k], e_im = even_fft[2 * k + 1];
    out[2 * k + 0] = e_re + re * re_odd - im * im_odd;
    out[2 * k + 1] = e_im + re * im_odd + im * re_odd;
    out[2 * (k + half) + 0] = e_re - re * re_odd + im * im_odd;
    out[2 * (k + half) + 1] = e_im - re * im_odd - im * re_odd;
  }
}

}  // namespace

int64_t mel_frame_count(int64_t n_samples) {
  if (n_samples <= 0) return 0;
  // C++ division truncates toward zero, as the reference's int arithmetic does (a chunk of 2..320
  // samples still gives one frame).
  const int64_t frames = (n_samples + kHop - (kWindow + 1)) / kHop + 1;
  return std::max<int64_t>(frames, 0);
}

LogMel log_mel_gemma4a(const float* samples, int64_t n_samples, int64_t n_mel) {
  const MelTables& t = tables(n_mel);
  LogMel mel;
  mel.n_mel = n_mel;
  mel.frames = mel_frame_count(n_samples);
  if (mel.frames == 0) return mel;
  const int64_t pad_left = kWindow / 2;
  const int64_t needed = (mel.frames - 1) * kHop + kFft;
  const int64_t total_pad = std::max(needed - n_samples, pad_left);
  std::vector<float> padded(size_t(total_pad + n_samples), 0.0f);
  std::copy(samples, samples + n_samples, padded.begin() + pad_left);

  mel.data.assign(size_t(mel.frames * n_mel), 0.0f);
  // Output: 512 complex values, then the recursion's temporaries (2 * 512 more pairs suffice).
  std::vector<float> fft_in(kFft), fft_out(kFft * 8), scratch(kFft * 4), mag(kBins);
  for (int64_t f = 0; f < mel.frames; ++f) {
    const float* frame = padded.data() + f * kHop;
    for (int j = 0; j < kFft; ++j) fft_in[j] = t.hann[j] * frame[j];
    fft_real(t, fft_in.data(), kFft, fft_out.data(), scratch.data());
    for (int j = 0; j < kBins; ++j) {
      const float re = fft_out[2 * j], im = fft_out[2 * j + 1];
      mag[j] = std::sqrt(re * re + im * im);
    }
    float* row = mel.data.data() + f * n_mel;
    for (int64_t m = 0; m < n_mel; ++m) {
      const float* w = t.filters.data() + m * kBins;
      double sum = 0.0;
      int k = 0;
      for (; k < kBins - 3; k += 4)
        sum += mag[k] * w[k] + mag[k + 1] * w[k + 1] + mag[k + 2] * w[k + 2] + mag[k + 3] * w[k + 3];
      for (; k < kBins; ++k) sum += mag[k] * w[k];
      sum = std::max(sum, double(0.001f));
      row[m] = float(std::log(sum));
    }
  }
  return mel;
}

std::vector<LogMel> log_mel_chunks(const std::vector<float>& pcm16k, int64_t n_mel) {
  std::vector<LogMel> chunks;
  const int64_t n = int64_t(pcm16k.size());
  for (int64_t off = 0; off < n; off += kMelChunkSamples) {
    const int64_t len = std::min(kMelChunkSamples, n - off);
    LogMel mel = log_mel_gemma4a(pcm16k.data() + off, len, n_mel);
    if (mel.frames > 0) chunks.push_back(std::move(mel));
  }
  return chunks;
}

}  // namespace gem4::media
