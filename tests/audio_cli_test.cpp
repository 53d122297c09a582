// Audio through the command line: gem4 chat --mmproj FILE with /audio PATH and --audio PATH (the clip
// goes with the next message, its soft tokens inside the prompt), a bad WAV as an error line that keeps
// the chat going, and gem4 run --audio.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include "test_util.h"

namespace {

using gem4::test::mtmd;

// Runs a shell command, returns its exit status and combined output.
std::pair<int, std::string> shell(const std::string& cmd) { return gem4::test::shell(cmd + " 2>&1"); }

std::string gem4_chat() {
  return std::string(GEM4_BINARY) + " chat -m " + mtmd("models/gemma4-tiny-mmvocab-f32.gguf") + " --mmproj " +
         mtmd("models/gemma4-tiny-audio.gguf") + " -n 3 --temp 0 -t 1";
}

TEST(AudioCli, ChatAttachesAudioToTheNextMessage) {
  const std::string wav = mtmd("inputs/aud1-speech-16k-mono.wav"),
                    not_wav = mtmd("models/gemma4-tiny-audio.gguf");
  const auto [rc, out] = shell("printf '/audio " + wav + "\\nTranscribe this audio.\\n/audio " + not_wav +
                               "\\n/exit\\n' | " + gem4_chat());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("77 soft tokens"), std::string::npos) << out;
  EXPECT_NE(out.find("[audio " + wav + " attached to the next message]"), std::string::npos) << out;
  // 77 soft tokens + <|audio> <audio|> + the text of the turn.
  EXPECT_NE(out.find("[prompt: 128 new tokens"), std::string::npos) << out;
  EXPECT_NE(out.find("error: " + not_wav + ": not a WAV file"), std::string::npos) << out;
}

TEST(AudioCli, ChatAndRunTakeAudioFlags) {
  const std::string wav = mtmd("inputs/aud2-tones-44k1-stereo.wav");
  const auto [rc, out] = shell("printf 'Hi\\n/exit\\n' | " + gem4_chat() + " --audio " + wav);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("43 soft tokens"), std::string::npos) << out;
  const auto [rc2, out2] =
      shell(std::string(GEM4_BINARY) + " run -m " + mtmd("models/gemma4-tiny-mmvocab-f32.gguf") +
            " --mmproj " + mtmd("models/gemma4-tiny-audio.gguf") + " --audio " + wav +
            " -p 'Transcribe this audio.' -n 2 --temp 0 -t 1");
  EXPECT_EQ(rc2, 0) << out2;
  EXPECT_NE(out2.find("43 soft tokens"), std::string::npos) << out2;
  const auto [rc3, out3] =
      shell(std::string(GEM4_BINARY) + " run -m " + mtmd("models/gemma4-tiny-mmvocab-f32.gguf") +
            " --mmproj " + mtmd("models/gemma4-tiny-vision.gguf") + " --audio " + wav + " -p x -n 1");
  EXPECT_NE(rc3, 0);
  EXPECT_NE(out3.find("holds no audio tower"), std::string::npos) << out3;
}

}  // namespace
