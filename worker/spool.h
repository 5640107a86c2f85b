// An on-disk, append-only queue of metric points for one run attempt.
//
// The training thread appends; the sender thread reads batches in order and acknowledges them
// once the server has stored them. While the server is unreachable (a laptop asleep, a network
// blip) points pile up on disk, not in memory, and are replayed in order once it is back.
// The spool does not outlive its attempt: after a crash the lease expires and the next attempt
// recomputes those steps from the last checkpoint, so replaying an old attempt's points would
// only be refused by fencing.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ablate::worker {

class MetricSpool {
 public:
  // Creates (truncates) the spool file at `path`.
  static absl::StatusOr<std::unique_ptr<MetricSpool>> Create(const std::string& path);
  ~MetricSpool();

  // Appends all of `points` or none: a failed write (RESOURCE_EXHAUSTED when the disk is full)
  // is cut off again, so the spool holds only whole records and the caller may retry the same
  // points once there is space.
  absl::Status Append(const std::vector<v1::MetricPoint>& points);
  // Up to `max_points` unacknowledged points, oldest first; does not consume them.
  absl::StatusOr<std::vector<v1::MetricPoint>> Peek(size_t max_points);
  // Marks the first `count` unacknowledged points as stored by the server.
  void Ack(size_t count);
  // Points appended and not yet acknowledged.
  int64_t pending() const;

 private:
  explicit MetricSpool(std::string path);

  const std::string path_;
  mutable std::mutex mu_;
  int fd_ = -1;             // appends, unbuffered: a failed write is seen at once
  std::streamoff end_ = 0;  // bytes of whole records written
  std::ifstream in_;
  int64_t appended_ = 0;
  int64_t acked_ = 0;
  // Byte offset of each peeked-but-unacked record end, so Ack can advance the read position.
  std::vector<std::streamoff> peeked_ends_;
  std::streamoff read_offset_ = 0;
};

}  // namespace ablate::worker
