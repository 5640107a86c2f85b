// `ablate completion bash|zsh|fish`: shell completion scripts generated from the CLI11 app
// itself, so a new command or flag completes without anyone editing a list. Sweep and run ids
// come from the server at TAB time, through `ablate __complete` (CompleteIds).
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "client/config.h"

namespace ablate::cli {

absl::StatusOr<std::string> CompletionScript(const CLI::App& app, const std::string& shell);

// A completion's wait for the server: a TAB that hangs is worse than one that offers nothing.
inline constexpr double kCompleteTimeoutSeconds = 2;
// The newest this many sweeps (or runs) are offered.
inline constexpr int kCompleteLimit = 100;

// `ablate __complete sweeps|runs [SWEEP]` (hidden; the completion scripts call it): one
// candidate a line, "ID<TAB>what it is" (sweeps also by name), newest first, from the server
// `flags` configure; nothing when none is configured or it does not answer. Never writes to
// stderr; always returns 0.
int CompleteIds(const ConnectionFlags& flags, const std::string& what, const std::string& sweep);

}  // namespace ablate::cli
