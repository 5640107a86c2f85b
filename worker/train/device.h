// Device selection and CPU threading (internal; the public ProbeDevice is in trainer.h).
#pragma once

#include <torch/torch.h>

#include <string>

#include "absl/status/statusor.h"
#include "worker/train/trainer.h"

namespace ablate::train {

// auto -> CUDA, then MPS, then CPU; a named device that is absent is an error.
absl::StatusOr<torch::Device> ResolveDevice(const std::string& requested);

// "cpu", or "cuda:0 (NVIDIA ...)": what RunResult.device records.
std::string DescribeDevice(const torch::Device& device);

// Kind, name, memory and torch version of a resolved device (ProbeDevice's answer).
DeviceInfo DescribeDeviceInfo(const torch::Device& device);

std::string TorchVersion();

// Sets torch's intra-op thread count for the calling thread only. Under OpenMP the count is per
// thread, but torch also keeps one process-wide value that a thread adopts lazily, at its first
// parallel op, overriding what was set before; several threads setting different counts (slots,
// the shards of a step) would then race. This forces that first adoption before setting.
void SetThreadIntraOpThreads(int threads);

}  // namespace ablate::train
