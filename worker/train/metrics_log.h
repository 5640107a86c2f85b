// out_dir/metrics.jsonl: one {"step", "name", "value", "time"} object per line, appended and
// flushed as points arrive, so a crash loses at most the line being written.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"

namespace ablate::train {

class MetricsLog {
 public:
  // Opens `path` for appending. Lines with step > keep_through_step are dropped first, so a run
  // resumed from a checkpoint at step s has no duplicates after s; -1 starts an empty file.
  static absl::StatusOr<MetricsLog> Open(const std::string& path, int64_t keep_through_step);

  absl::Status Append(const std::vector<ablate::v1::MetricPoint>& points);

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  explicit MetricsLog(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  std::unique_ptr<std::FILE, Closer> file_;
  std::string path_;
};

}  // namespace ablate::train
