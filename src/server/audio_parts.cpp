#include "server/audio_parts.h"

#include "server/media_parts.h"
#include "server/openai_api.h"

namespace gem4::server {

std::string input_audio_bytes(const nlohmann::json& part, const std::string& param) {
  const auto it = part.find("input_audio");
  if (it == part.end() || !it->is_object())
    throw ApiError(400, param + ".input_audio: an object {\"data\": BASE64, \"format\": \"wav\"} is required",
                   param + ".input_audio", "missing_required_parameter");
  const auto data = it->find("data");
  if (data == it->end() || !data->is_string())
    throw ApiError(400, param + ".input_audio.data: the base64 audio is required (a string)",
                   param + ".input_audio.data", "missing_required_parameter");
  const auto format = it->find("format");
  if (format != it->end() && (!format->is_string() || format->get<std::string>() != "wav"))
    throw ApiError(400, param + ".input_audio.format: only \"wav\" is supported",
                   param + ".input_audio.format", "unsupported_value");
  return base64_bytes(data->get<std::string>(), param + ".input_audio.data", "the base64 audio");
}

}  // namespace gem4::server
