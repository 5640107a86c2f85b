// Content-addressed files on the server's disk (checkpoints): <root>/<sha[0:2]>/<sha>. A blob is
// written to a temporary file, checked against the size and SHA-256 its uploader announced, and
// only then renamed into place, so a reader never sees a partial or corrupt checkpoint.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/util/sha256.h"

namespace ablate::server {

bool IsSha256Hex(const std::string& s);

class BlobStore {
 public:
  explicit BlobStore(std::string root) : root_(std::move(root)) {}

  absl::Status Init();  // creates the directories

  class Writer {
   public:
    ~Writer();  // removes the temporary file unless committed
    // INVALID_ARGUMENT (the temporary file is removed) once more than the writer's cap arrived.
    absl::Status Append(const std::string& data);
    // Checks size and digest, then moves the blob into place.
    absl::Status Commit(const std::string& sha256, int64_t size_bytes);

   private:
    friend class BlobStore;
    // Removes the temporary file; RESOURCE_EXHAUSTED when `err` says the disk is full (the
    // message names --store-dir, not the file), UNAVAILABLE otherwise.
    absl::Status Failed(const char* what, int err);
    std::string tmp_path_, root_, what_, cap_flag_;
    std::ofstream out_;
    Sha256 hash_;
    int64_t size_ = 0;
    int64_t max_bytes_ = 0;
    bool committed_ = false;
  };

  // A writer that accepts at most `max_bytes` (--max-checkpoint-bytes); an upload is refused as
  // it crosses the cap, not after it has filled the disk. `what` and `cap_flag` name the upload
  // and the flag that sets the cap in its errors (prepared data files share the store).
  absl::StatusOr<std::unique_ptr<Writer>> NewWriter(
      int64_t max_bytes, std::string what = "checkpoint",
      std::string cap_flag = "--max-checkpoint-bytes");
  // Path of an existing blob; NOT_FOUND otherwise.
  absl::StatusOr<std::string> PathOf(const std::string& sha256) const;

  // A file in the store: a blob (sha256 set) or an upload's temporary file (sha256 empty).
  struct File {
    std::string path;
    std::string sha256;
    int64_t size_bytes = 0;
    std::filesystem::file_time_type modified;
  };
  // Every blob and temporary file; names the store did not write are not visited.
  absl::Status ForEachFile(const std::function<absl::Status(const File&)>& visit) const;
  // Removes a blob; its size, or 0 when it was not there.
  absl::StatusOr<int64_t> Remove(const std::string& sha256) const;
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

// Streams a file in chunks to `emit` (false from emit stops early).
absl::Status StreamFile(const std::string& path, size_t chunk_bytes,
                        const std::function<bool(std::string&&, int64_t total)>& emit);

}  // namespace ablate::server
