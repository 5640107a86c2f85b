// Whole-file reads, atomic writes and directories, with errors that name the path: the one home
// for them (the trainer's caches and checkpoints, the worker's downloads, reports, flag files).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ablate::util {

// NOT_FOUND when the file does not exist, INTERNAL for any other failure.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// How far a write-then-rename goes before it returns.
enum class Durability {
  // Rename only: a reader never sees half a file, but a crash of the machine may lose the write.
  // For output that is cheap to make again (reports, downloads verified by hash on use).
  kRename,
  // The file's data reaches the disk before the rename: after a crash the path holds the old file
  // or the whole new one. For what a resume depends on (checkpoints, caches, results).
  kFsync,
};

// A temporary name next to `path`, unique per process and call, for write-then-rename.
std::string TempPathFor(const std::string& path);

// Writes `data` to a temporary file next to `path` and renames it over `path`.
absl::Status WriteFileAtomically(const std::string& path, std::string_view data,
                                 Durability durability = Durability::kFsync);

// Renames a complete file `tmp` (written by other code, e.g. a stream or another library) over
// `path`, syncing it first under kFsync.
absl::Status CommitFile(const std::string& tmp, const std::string& path,
                        Durability durability = Durability::kFsync);

// The status for a failed file operation (`what` on `path`, errno `err`): RESOURCE_EXHAUSTED for
// a full disk or quota (ENOSPC, EDQUOT), which callers wait out or skip rather than fail on,
// INTERNAL otherwise. The message names the path and the system's reason.
absl::Status FileError(const char* what, const std::string& path, int err);

// Creates `dir` and its parents; OK if it exists.
absl::Status MakeDirs(const std::string& dir);

}  // namespace ablate::util
