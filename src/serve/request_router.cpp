// Path matching of the KServe v2 / Triton REST routes.
#include "request_router.hpp"

#include <vector>

namespace ipj::serve {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Splits "/a/b%2Fc" into {"a", "b/c"}; false on a malformed escape or an empty segment.
bool split_path(std::string_view path, std::vector<std::string>& segments) {
  if (path.empty() || path[0] != '/') return false;
  path.remove_prefix(1);
  if (path.empty()) return true;
  for (;;) {
    const std::size_t slash = path.find('/');
    const std::string_view raw = path.substr(0, slash);
    if (raw.empty()) return false;
    std::string segment;
    for (std::size_t index = 0; index < raw.size(); ++index) {
      if (raw[index] != '%') {
        segment += raw[index];
        continue;
      }
      if (index + 2 >= raw.size()) return false;
      const int high = hex_digit(raw[index + 1]), low = hex_digit(raw[index + 2]);
      if (high < 0 || low < 0) return false;
      segment += static_cast<char>(high * 16 + low);
      index += 2;
    }
    segments.push_back(std::move(segment));
    if (slash == std::string_view::npos) return true;
    path.remove_prefix(slash + 1);
  }
}

Route endpoint(Endpoint which) {
  Route route;
  route.endpoint = which;
  return route;
}

Route with_method(HttpMethod method, HttpMethod wanted, Route route) {
  if (method != wanted) route.endpoint = Endpoint::wrong_method;
  return route;
}

}  // namespace

Route route_request(HttpMethod method, std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  std::vector<std::string> parts;
  if (!split_path(path, parts)) return {};
  const std::size_t count = parts.size();
  if (count == 1 && parts[0] == "metrics")
    return with_method(method, HttpMethod::get, endpoint(Endpoint::metrics));
  if (count == 0 || parts[0] != "v2") return {};
  if (count == 1) return with_method(method, HttpMethod::get, endpoint(Endpoint::server_metadata));
  if (parts[1] == "health" && count == 3) {
    if (parts[2] == "live") return with_method(method, HttpMethod::get, endpoint(Endpoint::health_live));
    if (parts[2] == "ready") return with_method(method, HttpMethod::get, endpoint(Endpoint::health_ready));
    return {};
  }
  if (parts[1] != "models" || count < 3) return {};
  if (count == 3 && parts[2] == "stats")
    return with_method(method, HttpMethod::get, endpoint(Endpoint::all_stats));
  Route route;
  route.model = parts[2];
  std::size_t next = 3;
  if (count >= 5 && parts[3] == "versions") {
    route.version = parts[4];
    next = 5;
  }
  if (next == count) {
    route.endpoint = Endpoint::model_metadata;
    return with_method(method, HttpMethod::get, route);
  }
  if (next + 1 != count) return {};
  const std::string& action = parts[next];
  if (action == "infer") {
    route.endpoint = Endpoint::model_infer;
    return with_method(method, HttpMethod::post, route);
  }
  route.endpoint = action == "ready"    ? Endpoint::model_ready
                   : action == "config" ? Endpoint::model_config
                   : action == "stats"  ? Endpoint::model_stats
                                        : Endpoint::not_found;
  if (route.endpoint == Endpoint::not_found) return {};
  return with_method(method, HttpMethod::get, route);
}

}  // namespace ipj::serve
