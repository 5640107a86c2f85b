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

// Sets torch's intra-op threads and BLIS_NUM_THREADS (0 = all cores). BLIS reads its variable
// once, at its first call, so this must run before the first matrix multiply of the process;
// later calls change torch's thread count only.
// On glibc it also keeps freed blocks of up to 32 MiB in the heap instead of unmapping them:
// every step frees and reallocates the same activations (16 MiB of attention probabilities per
// layer at the benchmark's shape), and fresh mmap'd pages cost a page fault per 4 KiB on first
// touch.
void ConfigureThreads(int threads);

std::string TorchVersion();

}  // namespace ablate::train
