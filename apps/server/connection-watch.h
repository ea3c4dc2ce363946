// Notices a client that went away while its request is still being answered. cpp-httplib (0.11)
// does not hand handlers their socket, so we find it by its address pair and poll it.
// Other transports (unix sockets) would add their own lookup here.
#pragma once

#include <string>

namespace hearth::server {

// This process's TCP socket whose peer is remote_addr:remote_port and whose local port is
// local_port; -1 when none matches (the caller then simply cannot watch the connection).
int find_connection_fd(const std::string& remote_addr, int remote_port, int local_port);

// True once the peer has closed or reset the connection (never blocks).
bool peer_closed(int fd);

}  // namespace hearth::server
