// Socket lookup through /proc/self/fd + getpeername, and a zero-timeout poll for hang-ups.
// Scanning is cheap (a server holds tens of sockets) and runs once per waiting request.
#include "connection-watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace hearth::server {

namespace {
bool same_endpoint(const sockaddr_storage& ss, const std::string& addr, int port) {
  char text[INET6_ADDRSTRLEN] = {};
  int p = -1;
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    p = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    p = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  return p == port && addr == text;
}

int port_of(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return -1;
}
}  // namespace

int find_connection_fd(const std::string& remote_addr, int remote_port, int local_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (!end || *end || end == e->d_name) continue;
    sockaddr_storage peer{}, local{};
    socklen_t len = sizeof peer;
    if (getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &len) != 0) continue;
    if (!same_endpoint(peer, remote_addr, remote_port)) continue;
    len = sizeof local;
    if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&local), &len) != 0) continue;
    if (port_of(local) != local_port) continue;
    found = int(fd);
    break;
  }
  closedir(dir);
  return found;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace hearth::server
