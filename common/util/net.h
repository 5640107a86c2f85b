// Address checks shared by ablate-server and ablate-worker: whether a listen address is reachable
// only from this machine (plaintext and unauthenticated endpoints are allowed there by default).
#pragma once

#include <string>

namespace ablate::util {

// True for host:port (or [v6]:port) whose host is localhost, ::1 or 127.x.
bool IsLoopback(const std::string& listen_address);

}  // namespace ablate::util
