// Retention (docs/server.md#retention): `DeleteSweep` (the RPC) and `ablate-server gc`. Rows go
// first, in one transaction; files go after it committed, and only those no row references. A
// crash in between leaves unreferenced files, never a row naming a missing file, and gc removes
// them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "server/blob_store.h"
#include "server/store/retention_store.h"

namespace ablate::server {

struct SweepDeletion {
  DeletedSweep rows;
  int64_t files_removed = 0;
  int64_t bytes_removed = 0;
};

// Deletes sweep `id` (RetentionStore::DeleteSweep), then the checkpoint files that no remaining
// row references. Removing files is best effort once the rows are gone: a failure is logged and
// left to gc.
absl::StatusOr<SweepDeletion> DeleteSweep(RetentionStore* store, const BlobStore& blobs,
                                          int64_t id);

struct GcOptions {
  // Files younger than this are kept: an upload in flight writes its temporary file and, once
  // renamed into place, records its row a moment later.
  std::chrono::seconds min_age{3600};
  bool dry_run = false;
};

struct GcReport {
  int64_t files_removed = 0;  // or, with dry_run, that would be
  int64_t bytes_removed = 0;
  int64_t files_kept = 0;  // referenced, or too young
  int64_t bytes_kept = 0;
};

// Removes the store's blobs no row references and temporary files of interrupted uploads, each
// older than `min_age`; calls `removed` with each (before removing it).
absl::StatusOr<GcReport> CollectGarbage(RetentionStore* store, const BlobStore& blobs,
                                        const GcOptions& options,
                                        const std::function<void(const BlobStore::File&)>& removed);

}  // namespace ablate::server
