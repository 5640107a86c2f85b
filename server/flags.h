// Command-line flags (each with an ABLATE_* environment variable) for ablate-server.
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "server/options.h"

namespace ablate::server {

// --database-url / ABLATE_DATABASE_URL, shared by every subcommand.
void AddDatabaseFlag(CLI::App* app, std::string* url);
// Everything `serve` takes.
void AddServeFlags(CLI::App* app, ServerOptions* options, std::string* auth_mode, bool* no_migrate);
// --log-level / ABLATE_LOG_LEVEL; applies the structured log pattern.
void AddLogFlag(CLI::App* app, std::string* level);
void SetUpLogging(const std::string& level);

}  // namespace ablate::server
