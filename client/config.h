// Where the CLI finds its server and token: flags, then environment (ABLATE_SERVER,
// ABLATE_TOKEN, ABLATE_TLS_CA), then the config file (~/.config/ablate/config.yaml or
// $ABLATE_CONFIG), then the default 127.0.0.1:7070.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/rpc/channel.h"

namespace ablate::cli {

struct ConnectionFlags {
  std::string server, token, tls_ca, config_file;
  bool tls = false;
};

absl::StatusOr<rpc::ClientConfig> ResolveConnection(const ConnectionFlags& flags);

}  // namespace ablate::cli
