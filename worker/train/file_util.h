// Small file helpers shared by the data cache, checkpoints and result files.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ablate::train {

// A temporary name next to `path`, unique per process and call, for write-then-rename.
std::string TempPathFor(const std::string& path);

// Writes `data` to a temporary file in the same directory, flushes it to disk and renames it
// over `path`, so readers (and a crash) see either the old file or the whole new one.
absl::Status WriteFileAtomically(const std::string& path, std::string_view data);

// Flushes `tmp` to disk and renames it to `path` (for files written by other libraries).
absl::Status CommitFile(const std::string& tmp, const std::string& path);

absl::StatusOr<std::string> ReadFile(const std::string& path);

absl::Status MakeDirs(const std::string& dir);

}  // namespace ablate::train
