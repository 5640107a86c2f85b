#include "common/cli/server_flags.h"

#include <cstdlib>

#include "common/cli/edge.h"

namespace ablate::cli_edge {
std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

void AddServerFlags(CLI::App& app, ServerFlags* flags) {
  app.add_option("--server", flags->server,
                 "Server HOST:PORT (env ABLATE_SERVER; default 127.0.0.1:7070)");
  app.add_option("--token", flags->token,
                 "Bearer token (env ABLATE_TOKEN); visible to `ps`, prefer --token-file");
  app.add_option("--token-file", flags->token_file,
                 "Read the bearer token from this file (env ABLATE_TOKEN_FILE)");
  app.add_option("--tls-ca", flags->tls_ca, "CA certificate (PEM) for TLS (env ABLATE_TLS_CA)");
  app.add_flag("--tls", flags->tls, "Use TLS with the system's root certificates");
}

absl::StatusOr<rpc::ClientConfig> ResolveServer(const ServerFlags& flags, const ServerFile& file) {
  auto pick = [](const std::string& flag, const std::string& env, const std::string& from_file,
                 const std::string& fallback) {
    if (!flag.empty()) return flag;
    if (!env.empty()) return env;
    if (!from_file.empty()) return from_file;
    return fallback;
  };
  rpc::ClientConfig cfg;
  cfg.server = pick(flags.server, Env("ABLATE_SERVER"), file.settings.server, "127.0.0.1:7070");
  cfg.tls_ca = pick(flags.tls_ca, Env("ABLATE_TLS_CA"), file.settings.tls_ca, "");
  cfg.tls = flags.tls || file.settings.tls;
  struct Source {
    std::string token, file, file_label;
  };
  const Source sources[] = {
      {flags.token, flags.token_file, "--token-file"},
      {Env("ABLATE_TOKEN"), Env("ABLATE_TOKEN_FILE"), "ABLATE_TOKEN_FILE"},
      {file.settings.token, file.settings.token_file, file.token_file_label},
  };
  for (const auto& src : sources) {
    if (!src.token.empty()) {
      cfg.token = src.token;
      break;
    }
    if (!src.file.empty()) {
      auto token = ReadTokenFile(src.file, src.file_label);
      if (!token.ok()) return token.status();
      cfg.token = *token;
      break;
    }
  }
  return cfg;
}

}  // namespace ablate::cli_edge
