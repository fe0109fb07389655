// Notices that an HTTP client went away while its request still runs, so the request can be
// cancelled at once instead of after the next failed write. Linux only: finds the connection's
// socket by its addresses (cpp-httplib does not expose it) and polls it for a hang-up.
#pragma once

#include <string>

namespace inflight::frontends {

class ConnectionWatch {
 public:
  ConnectionWatch(int local_port, const std::string& remote_addr, int remote_port);
  // True once the peer closed or reset the connection. Never blocks.
  bool PeerClosed() const;

 private:
  int fd_ = -1;
};

// cpp-httplib listens with a backlog of 5: a burst of clients overflows it and connections
// fail. Raises the backlog of the listening socket on `port` to SOMAXCONN.
void RaiseListenBacklog(int port);

}  // namespace inflight::frontends
