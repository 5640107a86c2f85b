// Whole-file reads and writes with errors that name the path.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ablate::report {

absl::Status MakeDirectories(const std::string& dir);

// Writes to PATH.tmp then renames, so a reader never sees half a file.
absl::Status WriteFile(const std::string& path, const std::string& content);

absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace ablate::report
