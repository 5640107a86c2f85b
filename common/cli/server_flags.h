// Where a server is and who is calling: the flags `ablate` and `ablate-worker` share, declared
// once with one help text, and the one precedence rule that resolves them. Each setting is taken
// from the first level that gives it: the flag, else the environment (ABLATE_SERVER,
// ABLATE_TOKEN / ABLATE_TOKEN_FILE, ABLATE_TLS_CA), else a config file (the CLI's; the worker has
// none), else the default. For the token, a level offers the token itself or a file holding it,
// and the first level offering either wins, so a token file on the command line beats
// ABLATE_TOKEN.
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "common/rpc/channel.h"

namespace ablate::cli_edge {

struct ServerFlags {
  std::string server{};
  std::string token{};
  std::string token_file{};
  std::string tls_ca{};
  bool tls = false;
};

// The environment variable `name`; empty when unset.
std::string Env(const char* name);

// Adds --server, --token, --token-file, --tls-ca and --tls to `app`, bound to `flags`.
void AddServerFlags(CLI::App& app, ServerFlags* flags);

// A config file's settings (any may be empty) and how errors name its token file.
struct ServerFile {
  ServerFlags settings{};
  std::string token_file_label{};  // e.g. "/home/u/.config/ablate/config.yaml: token_file"
};

// The connection `flags` ask for, by the precedence above; fails when a token file cannot be read
// (the error names the flag, variable or config key that gave it).
absl::StatusOr<rpc::ClientConfig> ResolveServer(const ServerFlags& flags,
                                                const ServerFile& file = {});

}  // namespace ablate::cli_edge
