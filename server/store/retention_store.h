// Retention (docs/server.md#retention): deleting a finished or cancelled sweep, and the store's
// question of which blob files no row references any more. The files themselves are the blob
// store's (server/retention.h removes them, after the transaction has committed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/store/db.h"

namespace ablate::server {

struct DeletedSweep {
  int64_t id = 0;
  std::string name;
  int64_t runs = 0;
  int64_t metric_points = 0;
  int64_t checkpoints = 0;
  int64_t checkpoint_bytes = 0;  // as the rows state them, shared files included
  // Every checkpoint blob its runs kept; candidates for removal, not yet checked.
  std::vector<std::string> checkpoint_sha256;
};

class RetentionStore {
 public:
  explicit RetentionStore(Db* db) : db_(db) {}

  // Deletes sweep `id` and everything of its runs in one transaction. NOT_FOUND when there is
  // no such sweep; FAILED_PRECONDITION, deleting nothing, while it is active or has unfinished
  // runs. With `dry_run`, the same checks and tally, and nothing deleted.
  absl::StatusOr<DeletedSweep> DeleteSweep(int64_t id, bool dry_run = false);
  // Of `sha256`, those no checkpoint, prepared file or pending prepared upload references.
  absl::StatusOr<std::vector<std::string>> Unreferenced(const std::vector<std::string>& sha256);

 private:
  Db* db_;
};

}  // namespace ablate::server
