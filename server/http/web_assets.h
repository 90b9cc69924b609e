// The web dashboard's files (server/http/web/ and Debian's dygraphs),
// embedded into traind at build time (embed_web_assets.cmake).
#ifndef TRAIND_SERVER_HTTP_WEB_ASSETS_H_
#define TRAIND_SERVER_HTTP_WEB_ASSETS_H_

#include <cstddef>

namespace traind::server {

struct WebAsset {
  const char* name;  // "index.html", "app.js", "dygraph.min.js", ...
  const char* content_type;
  const char* data;
  size_t size;
};

// Every embedded file.
const WebAsset* WebAssets(size_t* count);

}  // namespace traind::server

#endif  // TRAIND_SERVER_HTTP_WEB_ASSETS_H_
