// The chat page served at / by `gem4 serve`: src/server/web/*.html|js|css compiled into the binary
// (cmake/embed_web.cmake generates the table), so the page needs no build step, no CDN and no files
// beside the binary.
#pragma once
#include <cstddef>
#include <span>

namespace gem4::server {

struct WebAsset {
  const char* route;         // "/" for index.html, else "/<file name>"
  const char* content_type;  // e.g. "text/javascript; charset=utf-8"
  const unsigned char* data;
  size_t size;
};

std::span<const WebAsset> web_assets();

}  // namespace gem4::server
