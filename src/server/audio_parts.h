// OpenAI input_audio content parts: {"type": "input_audio", "input_audio": {"data": "<base64>",
// "format": "wav"}}, the audio beside text and image_url parts. Only WAV is read (the reader of
// media/audio_wav.h); another format, a missing field or malformed base64 is a 400 naming the field.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace gem4::server {

// The WAV bytes of an input_audio part (checks its shape too). Throws ApiError 400 naming `param`.
std::string input_audio_bytes(const nlohmann::json& part, const std::string& param);

}  // namespace gem4::server
