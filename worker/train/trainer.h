// Training one run: the public face of worker/train, free of torch types so the daemon and the
// CLI can include it without pulling LibTorch into their translation units.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"

namespace ablate::train {

struct TrainOptions {
  std::string device = "auto";  // auto|cpu|cuda|mps; auto = CUDA, then MPS, then CPU
  std::string out_dir;          // metrics.jsonl, checkpoints/, result.json
  std::string cache_dir;        // tokenizer models and token files, keyed by content hash
  std::string resume_from;      // checkpoint file to resume from; empty = start fresh
  int threads = 0;              // 0 = all cores; sets torch intra-op threads and BLIS_NUM_THREADS
};

// All callbacks run on the training thread, so an observer needs no locking of its own unless it
// hands data to another thread.
class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void OnMetrics(const std::vector<ablate::v1::MetricPoint>& /*points*/) {}
  // Called after the checkpoint file is completely written and renamed into place.
  virtual void OnCheckpoint(int64_t /*step*/, const std::string& /*path*/) {}
  virtual void OnProgress(int64_t /*step*/, int64_t /*total_steps*/, double /*tokens_per_second*/) {
  }
  // Polled once per step; true -> write a checkpoint and return Outcome::kStopped.
  virtual bool ShouldStop() { return false; }
};

enum class Outcome { kSucceeded, kDiverged, kStopped };

struct TrainResult {
  Outcome outcome = Outcome::kSucceeded;
  ablate::v1::RunResult result;  // filled for kSucceeded and kDiverged
  int64_t last_step = 0;
  std::string last_checkpoint;  // newest checkpoint written by this call, if any
};

// Trains `spec` (config complete; defaults are applied again defensively). Metrics go to the
// observer and to out_dir/metrics.jsonl; checkpoints to out_dir/checkpoints/; the result to
// out_dir/result.json. Errors (bad data path, unusable device, corrupt checkpoint) come back as a
// status; a diverged run is a result, not an error.
absl::StatusOr<TrainResult> Train(const ablate::v1::RunSpec& spec, const TrainOptions& options,
                                  TrainObserver* observer);

struct DeviceInfo {
  std::string kind;  // cuda | mps | cpu
  std::string name;  // e.g. "NVIDIA GeForce RTX 4090", or the CPU model
  std::string torch_version;
  int64_t memory_bytes = 0;
};

// The device `requested` (auto|cpu|cuda|mps) resolves to on this machine; an error when a
// specific device is asked for and absent.
absl::StatusOr<DeviceInfo> ProbeDevice(const std::string& requested);

// Sets torch's intra-op threads for the calling thread and BLIS_NUM_THREADS (0 = all cores).
// BLIS reads its variable once, at its first call, for the whole process: the first value
// before the first matrix multiply is the one every later call (and thread) gets, so a process
// that trains several runs at once calls this with one run's share before any of them starts.
// Train calls it too (torch's count is per thread under OpenMP); it leaves the environment alone
// when the value is already set, so concurrent runs with the same share never write it.
void ConfigureThreads(int threads);

// The newest checkpoint Train wrote under out_dir/checkpoints, or "" if there is none: what a
// rerun with the same out_dir passes as TrainOptions::resume_from.
std::string NewestCheckpoint(const std::string& out_dir);

}  // namespace ablate::train
