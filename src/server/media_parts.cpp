#include "server/media_parts.h"

#include "server/openai_api.h"

namespace gem4::server {

namespace {

int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

}  // namespace

std::string base64_bytes(std::string_view b64, const std::string& param, const std::string& what) {
  std::string out;
  out.reserve(b64.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  bool padding = false;
  for (unsigned char c : b64) {
    if (c == '=') {
      padding = true;
      continue;
    }
    if (c == '\r' || c == '\n' || c == ' ') continue;
    const int v = b64_value(c);
    if (v < 0 || padding) throw ApiError(400, param + ": " + what + " is not valid base64", param);
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((acc >> bits) & 0xFF));
    }
  }
  if (out.empty()) throw ApiError(400, param + ": " + what + " holds no bytes", param);
  return out;
}

std::string data_uri_bytes(std::string_view uri, const std::string& param) {
  const auto starts = [&](std::string_view p) { return uri.substr(0, p.size()) == p; };
  if (starts("http://") || starts("https://"))
    throw ApiError(400,
                   param + ": image URLs are not fetched (no network access); send the image as a data: URI",
                   param, "unsupported_value");
  if (!starts("data:"))
    throw ApiError(400, param + ": only data: URIs are accepted", param, "unsupported_value");
  const size_t comma = uri.find(',');
  if (comma == std::string_view::npos) throw ApiError(400, param + ": a data: URI without ','", param);
  const std::string_view meta = uri.substr(5, comma - 5);
  if (meta.size() < 7 || meta.substr(meta.size() - 7) != ";base64")
    throw ApiError(400, param + ": the data: URI must be base64 (data:MIME;base64,...)", param);
  return base64_bytes(uri.substr(comma + 1), param, "the data: URI");
}

std::string image_url_of(const nlohmann::json& part, const std::string& param) {
  auto it = part.find("image_url");
  if (it == part.end())
    throw ApiError(400, "'" + param + ".image_url' is required", param + ".image_url",
                   "missing_required_parameter");
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto u = it->find("url");
    if (u != it->end() && u->is_string()) return u->get<std::string>();
  }
  throw ApiError(400, "'" + param + ".image_url.url' must be a string", param + ".image_url.url",
                 "missing_required_parameter");
}

}  // namespace gem4::server
