// Running a helper program (gnuplot) without a shell: no quoting of paths, no injection.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ablate::report {

struct ProgramResult {
  int exit_code = -1;  // 127: the program could not be started (not found)
  std::string output;  // stdout and stderr together
};

// Runs argv[0] (searched in PATH) in `cwd`, waits for it, captures its output.
absl::StatusOr<ProgramResult> RunProgram(const std::vector<std::string>& argv,
                                         const std::string& cwd);

// True if `program` is a path to an executable or an executable in PATH.
bool ProgramExists(const std::string& program);

}  // namespace ablate::report
