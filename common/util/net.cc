#include "common/util/net.h"

#include "absl/strings/match.h"

namespace ablate::util {

bool IsLoopback(const std::string& listen) {
  std::string host = listen;
  if (absl::StartsWith(host, "[")) {
    host = host.substr(1, host.find(']') - 1);
  } else if (auto colon = host.rfind(':'); colon != std::string::npos) {
    host = host.substr(0, colon);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

}  // namespace ablate::util
