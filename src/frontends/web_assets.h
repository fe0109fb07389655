// The web page's assets, compiled into the binary (src/frontends/web/).
#pragma once

namespace inflight::frontends {

extern const char kIndexHtml[];  // the playground and the batcher's dashboard

}  // namespace inflight::frontends
