#include "server/retention.h"

#include <filesystem>
#include <set>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"
#include "spdlog/spdlog.h"

namespace ablate::server {

namespace fs = std::filesystem;

absl::StatusOr<SweepDeletion> DeleteSweep(RetentionStore* store, const BlobStore& blobs,
                                          int64_t id) {
  SweepDeletion out;
  ASSIGN_OR_RETURN(out.rows, store->DeleteSweep(id));
  // Committed: from here on only files go, and what fails is garbage for gc, not an error.
  auto orphans = store->Unreferenced(out.rows.checkpoint_sha256);
  if (!orphans.ok()) {
    spdlog::warn("sweep delete id={}: checkpoint files left for `ablate-server gc`: {}", id,
                 orphans.status().ToString());
    return out;
  }
  for (const auto& sha : *orphans) {
    auto bytes = blobs.Remove(sha);
    if (!bytes.ok()) {
      spdlog::warn("sweep delete id={}: {} (left for `ablate-server gc`)", id,
                   bytes.status().ToString());
      continue;
    }
    if (*bytes > 0) {  // 0: already gone (a concurrent gc, or an identical blob's deletion)
      out.files_removed++;
      out.bytes_removed += *bytes;
    }
  }
  return out;
}

absl::StatusOr<GcReport> CollectGarbage(
    RetentionStore* store, const BlobStore& blobs, const GcOptions& options,
    const std::function<void(const BlobStore::File&)>& removed) {
  GcReport report;
  const auto cutoff = fs::file_time_type::clock::now() - options.min_age;
  auto old_enough = [&](const std::string& path) {
    std::error_code ec;
    const auto t = fs::last_write_time(path, ec);
    return !ec && t <= cutoff;
  };
  auto remove = [&](const BlobStore::File& f) -> absl::Status {
    // Checked again just before: an upload of the same content renames a new file into place.
    if (!old_enough(f.path)) {
      report.files_kept++;
      report.bytes_kept += f.size_bytes;
      return absl::OkStatus();
    }
    removed(f);
    if (!options.dry_run) {
      std::error_code ec;
      fs::remove(f.path, ec);
      if (ec) {
        return absl::UnavailableError(absl::StrCat("cannot remove ", f.path, ": ", ec.message()));
      }
    }
    report.files_removed++;
    report.bytes_removed += f.size_bytes;
    return absl::OkStatus();
  };
  // Blobs are checked against the database a batch at a time, never all hashes at once.
  constexpr size_t kBatch = 1000;
  std::vector<BlobStore::File> batch;
  auto flush = [&]() -> absl::Status {
    if (batch.empty()) return absl::OkStatus();
    std::vector<std::string> shas;
    shas.reserve(batch.size());
    for (const auto& f : batch) shas.push_back(f.sha256);
    ASSIGN_OR_RETURN(const std::vector<std::string> found, store->Unreferenced(shas));
    const std::set<std::string> orphans(found.begin(), found.end());
    for (const auto& f : batch) {
      if (orphans.contains(f.sha256)) {
        RETURN_IF_ERROR(remove(f));
      } else {
        report.files_kept++;
        report.bytes_kept += f.size_bytes;
      }
    }
    batch.clear();
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(blobs.ForEachFile([&](const BlobStore::File& f) -> absl::Status {
    if (f.modified > cutoff) {
      report.files_kept++;
      report.bytes_kept += f.size_bytes;
      return absl::OkStatus();
    }
    if (f.sha256.empty()) return remove(f);  // an interrupted upload's temporary file
    batch.push_back(f);
    return batch.size() >= kBatch ? flush() : absl::OkStatus();
  }));
  RETURN_IF_ERROR(flush());
  return report;
}

}  // namespace ablate::server
