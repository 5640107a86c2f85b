// The worker's startup micro-benchmark: a few timed training steps of a reference model on the
// device a slot trains on, with one slot's share of the threads, reported to the server in
// WorkerInfo.benchmarks (docs/architecture.md#the-trainer). The server turns the FLOP/s into
// sweep estimates and budgets before any run of similar size has finished on the device class.
//
// Torch-free, so the daemon can include it; the measurement itself is device_benchmark.cc.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"

namespace ablate::train {

struct DeviceBenchmarkOptions {
  std::string device = "auto";  // auto|cpu|cuda|mps, as the worker's --device
  int threads = 1;              // one slot's share of the CPU threads (0: all cores)
  // A file that keeps the result between starts, keyed by device name, torch version, threads,
  // ablate version and the reference model: a result under another key is measured again.
  // Empty: measure every time.
  std::string cache_file;
  std::string ablate_version;  // part of the cache key
  // Asked before each step (and before the model is built): true ends the benchmark with
  // CANCELLED, so a worker told to stop while it measures (SIGTERM) does not wait for it.
  std::function<bool()> should_stop;
};

struct DeviceBenchmarkResult {
  std::vector<ablate::v1::DeviceBenchmark> benchmarks;  // float32 first, then bfloat16 if any
  bool cached = false;                                  // read from cache_file, not measured
};

// Measures (or reads from the cache) the reference model's training speed: float32, plus
// bfloat16 on CUDA. Every error, LibTorch's included, comes back as a status; an unwritable cache
// file is not an error (the result is returned, and measured again next time).
absl::StatusOr<DeviceBenchmarkResult> RunDeviceBenchmark(const DeviceBenchmarkOptions& options);

// "1.9 GFLOP/s fp32 (n_layer 2, ...), 0.3 s", one rate per dtype, with " (cached)" when read
// from the cache file (the seconds are then those the measurement took): what the worker logs.
std::string DescribeBenchmarks(const DeviceBenchmarkResult& result);

}  // namespace ablate::train
