// What the three binaries' command lines share at their edge: CLI11's exceptions become exit
// codes (README, Exit codes: every usage error is 2 and prints the command's usage line; an
// unknown command says so with a did-you-mean), `--version` / `version`, and tokens read from a
// file so they never sit on a command line where `ps` shows them.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"

namespace ablate::cli_edge {

inline constexpr int kUsageExit = 2;

// "ablate 0.1.0 (commit 2c24e39a1b2c)"; `extra` lines (e.g. "torch 1.13.1") follow, one a line.
std::string VersionText(const std::string& program, const std::vector<std::string>& extra = {});

// Adds `--version` to `app` and a `version` subcommand; `extra` is called only when asked (the
// worker's torch version means loading LibTorch). Returns the subcommand: the caller prints
// VersionText when it was parsed.
CLI::App* AddVersion(CLI::App& app, const std::string& program,
                     std::function<std::vector<std::string>()> extra = nullptr);

// Parses argv. Returns std::nullopt when the command should run, or the exit code to return:
// 0 after --help/--version, kUsageExit after a usage error (printed to stderr with the usage
// line of the subcommand that failed and a did-you-mean for an unknown command).
std::optional<int> Parse(CLI::App& app, int argc, char** argv, const std::string& program);

// A usage error found after parsing (arguments CLI11 cannot check together): prints
// "<command>: <message>" and the command's usage line, returns kUsageExit.
int UsageError(const CLI::App& command, const std::string& message);

// A token from a file (surrounding whitespace dropped): `--token-file` on every binary.
// `flag` names the source in errors ("--token-file", "ABLATE_TOKEN_FILE").
absl::StatusOr<std::string> ReadTokenFile(const std::string& path, const std::string& flag);

}  // namespace ablate::cli_edge
