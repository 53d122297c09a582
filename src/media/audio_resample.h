// Sample-rate conversion as llama.cpp's audio decoding does it (miniaudio 0.11 ma_decoder with its
// default linear resampler), so that the 16 kHz samples match the reference bit for bit:
//
// - the rates are reduced by their greatest common divisor (44100/16000 -> 441/160);
// - a 4th-order low-pass (two biquads in transposed direct form II, f32 state, Butterworth Qs
//   1/(2 cos(pi/8)) and 1/(2 cos(3 pi/8))) with cutoff min(in, out)/2 at max(in, out), computed
//   in double and normalised to f32 coefficients;
// - downsampling filters every input sample as it is loaded, upsampling filters every output sample;
// - output frame k interpolates linearly between the two most recently loaded (filtered) inputs with
//   the fraction (k * in mod out) / out; the state starts with a zero sample, so the first output is 0;
// - the output stops when the input runs out; its length is then padded with zeros or cut to
//   ma_calculate_frame_count_after_resampling, the length the decoder reports and the caller reads.
#pragma once
#include <cstdint>
#include <vector>

namespace gem4::media {

// The frame count miniaudio's decoder reports for `frames_in` input frames (its own formula).
uint64_t resampled_length(uint32_t rate_out, uint32_t rate_in, uint64_t frames_in);

// Mono f32 `in` at rate_in to rate_out, result of length resampled_length(rate_out, rate_in, n).
// Equal rates return the input unchanged (miniaudio passes such data through).
std::vector<float> resample_linear(const std::vector<float>& in, uint32_t rate_in, uint32_t rate_out);

}  // namespace gem4::media
