// Training one run: the public face of worker/train, free of torch types so the daemon and the
// CLI can include it without pulling LibTorch into their translation units.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"

namespace ablate::train {

struct TrainOptions {
  std::string device = "auto";  // auto|cpu|cuda|mps; auto = CUDA, then MPS, then CPU
  std::string out_dir;          // metrics.jsonl, checkpoints/, result.json
  std::string cache_dir;        // tokenizer models and token files, keyed by content hash
  std::string resume_from;      // checkpoint file to resume from; empty = start fresh
  int threads = 0;              // 0 = all cores; on the CPU a step's batch is split over them
  // Each step takes at least this long: the loop sleeps out the rest. For fault-injection tests
  // (tests/e2e), whose runs must last long in wall time while costing little CPU; 0 = off.
  double min_step_seconds = 0;
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
  // A checkpoint could not be written for lack of space (`error` is RESOURCE_EXHAUSTED). Return
  // true to try it again (after waiting for space: training is paused meanwhile), false to fail
  // the run with `error`.
  virtual bool WaitForSpace(const absl::Status& /*error*/) { return false; }
};

enum class Outcome { kSucceeded, kDiverged, kStopped };

struct TrainResult {
  Outcome outcome = Outcome::kSucceeded;
  ablate::v1::RunResult result;  // filled for kSucceeded and kDiverged
  int64_t last_step = 0;
  std::string last_checkpoint;  // newest checkpoint written by this call, if any
  // RunSpec.keep_final, kSucceeded and kDiverged: the final weights (and the rest of the
  // training state) at last_step, out_dir/final.pt.
  std::string final_checkpoint;
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
  // What a run may use (WorkerInfo.device_memory_bytes; the server divides it by the slots): a
  // CUDA device's total memory; on MPS two thirds of the unified memory, Metal's recommended
  // working set on the smaller Macs (device.cc says why not Metal's own figure); on the CPU the
  // system's physical memory.
  int64_t memory_bytes = 0;
};

// The most memory this process held on a device of `device_kind` (DeviceInfo.kind), for
// RunResult.peak_memory_bytes: on CUDA the caching allocator's peak of memory reserved from the
// device since the last ResetPeakMemory (all runs on the GPU together, with --slots); on MPS and
// the CPU the process's peak resident set since it started (on MPS a lower bound: Metal's own
// allocations need not show in it). 0: not measured.
int64_t PeakMemoryBytes(const std::string& device_kind);
// Starts PeakMemoryBytes's CUDA peak again (an attempt's start); a no-op elsewhere.
void ResetPeakMemory(const std::string& device_kind);
// "3.20 GiB", or "unknown" for 0: how an out-of-memory error names the peak and the device's size.
std::string DescribeMemory(int64_t bytes);

// The device `requested` (auto|cpu|cuda|mps) resolves to on this machine; an error when a
// specific device is asked for and absent (UNAVAILABLE: this machine's lack, not the run's).
absl::StatusOr<DeviceInfo> ProbeDevice(const std::string& requested);

// What this binary was built with, for --version: "torch 1.13.1, CPU build (no CUDA)" or
// "torch 2.6.0, CUDA build (CUDA runtime 12.4)".
std::string TorchBuildLine();

// The files Train reads for a run's data (tokenizer and token files in the cache), located
// without making them: what a worker shares with its fleet (worker/fleet_data.h). `key` names
// them across machines: the same key means byte-identical files.
struct DataPlan {
  std::string key;          // 64 hex digits
  std::string description;  // "bpe vocab 4096, train 1a2b3c4d5e6f, val ..."
  // (role, path in the cache), in the order to install them: the tokenizer model last, since
  // its presence tells a reader the rest is there.
  std::vector<std::pair<std::string, std::string>> files;
};
// `data` as Train sees it (local file paths or synthetic:N; synthetic text is generated into
// the cache). Hashes the texts.
absl::StatusOr<DataPlan> PlanRunData(const ablate::v1::DataSpec& data,
                                     const std::string& cache_dir);

struct DataPrepTimes {
  double tokenizer_seconds = 0;  // 0 when the tokenizer was cached
  int64_t encoded_bytes = 0;     // text bytes encoded (0 when every token file was cached)
  double encode_seconds = 0;
};
// Makes what PlanRunData names (trains the tokenizer, encodes the texts), as Train would.
absl::StatusOr<DataPrepTimes> PrepareRunData(const ablate::v1::DataSpec& data,
                                             const std::string& cache_dir);

// Sets torch's intra-op threads for the calling thread (0 = all cores) and BLIS_NUM_THREADS to 1.
// A CPU step's GEMMs run one per core already, each shard of the batch on a thread of its own
// (step.h, Sharding), so BLIS splitting one GEMM over cores would only nest threads inside
// threads. BLIS reads its variable once, at its first call, for the whole process, so this runs
// before the first matrix multiply (the daemon calls it before any slot trains; Train calls it
// too, since torch's count is per thread under OpenMP).
// On glibc it also keeps freed blocks of up to 32 MiB in the heap instead of unmapping them:
// every step frees and reallocates the same activations (16 MiB of attention probabilities per
// layer at the benchmark's shape), and fresh mmap'd pages cost a page fault per 4 KiB on first
// touch.
void ConfigureThreads(int threads);

// The newest checkpoint Train wrote under out_dir/checkpoints, or "" if there is none: what a
// rerun with the same out_dir passes as TrainOptions::resume_from.
std::string NewestCheckpoint(const std::string& out_dir);

}  // namespace ablate::train
