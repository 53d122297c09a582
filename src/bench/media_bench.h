// gem4 bench's projector rows: how fast the towers of a projector (mmproj) file encode an image and an
// audio clip, llama-bench style (-r repetitions, -t threads): images per second and milliseconds per
// image for the vision tower (preprocessing, tower, pooling and projection: everything after the image
// is decoded), audio seconds per second for the audio tower (log-mel, conformer, projection: everything
// after the WAV is read). Without --mmproj the projector is generated in memory at the real E2B/E4B
// dimensions (media/mmproj_synthetic.h), as the text rows generate an E2B-shaped model.
#pragma once

namespace gem4::cli {

class Args;

void declare_media_bench_flags(Args& a);
// True when a projector flag (--mmproj, --mmproj-preset, --image, --image-size, --audio,
// --audio-seconds) is given: bench then measures the towers instead of the text model.
bool media_bench_requested(const Args& a);
int run_media_bench(const Args& a, int n_threads);

}  // namespace gem4::cli
