// Maps a request's method and target to a KServe v2 / Triton endpoint: no regular expressions,
// percent-escapes in model names and versions decoded, the query string ignored.
#pragma once

#include <string>
#include <string_view>

#include "ipj/serve/http_front_end.hpp"

namespace ipj::serve {

enum class Endpoint {
  server_metadata,  // GET /v2
  health_live,      // GET /v2/health/live
  health_ready,     // GET /v2/health/ready
  all_stats,        // GET /v2/models/stats
  model_metadata,   // GET /v2/models/{m}[/versions/{v}]
  model_ready,      // GET .../ready
  model_config,     // GET .../config
  model_stats,      // GET .../stats
  model_infer,      // POST .../infer
  metrics,          // GET /metrics
  wrong_method,     // a known path with another method (405)
  not_found,
};

struct Route {
  Endpoint endpoint = Endpoint::not_found;
  std::string model, version;  // for the model endpoints; version empty = the loaded one
};

Route route_request(HttpMethod method, std::string_view target);

}  // namespace ipj::serve
