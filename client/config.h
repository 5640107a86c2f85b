// Where the CLI finds its server and token, each setting on its own: the flag, else the
// environment, else the config file, else the default. Token: --token or --token-file, else
// ABLATE_TOKEN or ABLATE_TOKEN_FILE, else the file's `token:` or `token_file:`. Server:
// --server, ABLATE_SERVER, `server:`, 127.0.0.1:7070. CA: --tls-ca, ABLATE_TLS_CA, `tls_ca:`.
// The file is --config, else $ABLATE_CONFIG, else $XDG_CONFIG_HOME/ablate/config.yaml (default
// ~/.config/ablate/config.yaml); `ablate login` and `ablate config init` write it.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/cli/server_flags.h"
#include "common/rpc/channel.h"

namespace ablate::cli {

// The shared server flags (common/cli/server_flags.h) and the CLI's own --config.
struct ConnectionFlags : cli_edge::ServerFlags {
  std::string config_file;
};

absl::StatusOr<rpc::ClientConfig> ResolveConnection(const ConnectionFlags& flags);

// True when no server was given anywhere (no --server, no ABLATE_SERVER, no `server:` in the
// config file): the CLI then tries the default 127.0.0.1:7070 and, if nothing answers there,
// says how to configure one instead of only that the default is unreachable.
bool ServerUnconfigured(const ConnectionFlags& flags);

// The config file `flags` name or imply (it may not exist).
std::string ConfigPath(const ConnectionFlags& flags);

// Writes `cfg` (server, token, tls_ca, tls) to `path` with mode 0600, its directory 0700 if new,
// replacing the file atomically.
absl::Status WriteConfig(const std::string& path, const rpc::ClientConfig& cfg);

}  // namespace ablate::cli
