// `ablate completion bash|zsh`: shell completion scripts generated from the CLI11 app itself, so
// a new command or flag completes without anyone editing a list.
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"

namespace ablate::cli {

absl::StatusOr<std::string> CompletionScript(const CLI::App& app, const std::string& shell);

}  // namespace ablate::cli
