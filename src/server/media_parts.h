// OpenAI content parts that carry media: {"type": "image_url", "image_url": {"url": "data:image/png;
// base64,..."}} (or "image_url": "data:..."). Only data: URIs are read; an http(s) URL is a 400 (the
// server fetches nothing from the network), as is any other scheme or malformed base64.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace gem4::server {

// The bytes of base64 text (line breaks and spaces skipped). Throws ApiError 400 naming `param`; the
// message calls the text `what` ("the data: URI", "the base64 audio").
std::string base64_bytes(std::string_view b64, const std::string& param, const std::string& what);

// The bytes of a data: URI with base64 content. Throws ApiError 400 naming `param`.
std::string data_uri_bytes(std::string_view uri, const std::string& param);

// The URL of an image_url part (the object or the string form). Throws ApiError 400 naming `param`.
std::string image_url_of(const nlohmann::json& part, const std::string& param);

}  // namespace gem4::server
