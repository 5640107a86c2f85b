// Resolves a sweep's data files against --data-dir and hashes them, so workers can fetch them
// by content (GetDataset) and runs record exactly which bytes they trained on.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"
#include "server/store/sweep_store.h"

namespace ablate::server {

class DatasetResolver {
 public:
  explicit DatasetResolver(std::string data_dir) : data_dir_(std::move(data_dir)) {}

  // Fills train/val sha256 and bytes in `data`; returns the files to record. `synthetic:N`
  // passes through. Errors name the sweep file, the line (from `lines`: "train"/"val" -> the
  // line of its value, as sweep::SweepSpec::data_lines has them) and the field.
  absl::StatusOr<std::vector<DatasetRecord>> Resolve(const std::string& file_name,
                                                     const std::map<std::string, int>& lines,
                                                     v1::DataSpec* data);

  // The real path (symlinks resolved) of `path` if it is a regular file inside the real
  // --data-dir; FAILED_PRECONDITION otherwise. GetDataset checks every recorded path again at
  // serve time, so swapping a submitted file for a link afterwards serves nothing outside.
  absl::StatusOr<std::string> Confine(const std::string& path) const;

 private:
  // `where`: "FILE:LINE" (or "FILE" when the line is unknown), the errors' prefix.
  absl::StatusOr<DatasetRecord> ResolveOne(const std::string& where, const char* field,
                                           const std::string& value);

  std::string data_dir_;
  // Hashing a corpus of hundreds of MB per submit would dominate submit time; files are
  // re-hashed only when their size or mtime changes.
  std::mutex mu_;
  std::map<std::string, std::tuple<int64_t, int64_t, std::string>>
      cache_;  // path -> size, mtime, sha
};

}  // namespace ablate::server
