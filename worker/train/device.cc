#include "worker/train/device.h"

#include <ATen/Context.h>
#include <sys/resource.h>
#include <torch/version.h>
#include <unistd.h>
#ifdef ABLATE_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdlib>
#include <fstream>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/threads.h"
#include "worker/train/torch_error.h"
#include "worker/train/trainer.h"

#if __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
#define ABLATE_HAVE_CUDA_RUNTIME 1
#endif

namespace ablate::train {
namespace {

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "cpu";
}

// Metal's recommendedMaxWorkingSetSize is two thirds to three quarters of the unified memory on
// Apple's Macs so far; the lower figure, so that a run the server sends by it fits.
constexpr double kMpsWorkingSetFraction = 2.0 / 3.0;

int64_t PhysicalMemoryBytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
}

// The process's peak resident set since it started: ru_maxrss is in KiB on Linux, bytes on macOS.
int64_t PeakResidentBytes() {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
#if defined(__APPLE__)
  return static_cast<int64_t>(usage.ru_maxrss);
#else
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
#endif
}

std::string CudaName(int index, int64_t* memory) {
#ifdef ABLATE_HAVE_CUDA_RUNTIME
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, index) == cudaSuccess) {
    *memory = static_cast<int64_t>(prop.totalGlobalMem);
    return prop.name;
  }
#endif
  *memory = 0;
  return absl::StrCat("cuda:", index);
}

}  // namespace

absl::StatusOr<torch::Device> ResolveDevice(const std::string& requested) {
  const bool cuda = torch::cuda::is_available();
  const bool mps = at::hasMPS();
  if (requested == "auto") {
    if (cuda) return torch::Device(torch::kCUDA, 0);
    if (mps) return torch::Device(torch::kMPS);
    return torch::Device(torch::kCPU);
  }
  if (requested == "cpu") return torch::Device(torch::kCPU);
  if (requested == "cuda") {
    if (!cuda) {
#ifdef ABLATE_TORCH_CUDA
      return absl::UnavailableError(
          "device cuda requested, but no CUDA GPU is visible to this process (check nvidia-smi, "
          "the driver and CUDA_VISIBLE_DEVICES)");
#else
      return absl::FailedPreconditionError(absl::StrCat(
          "device cuda requested, but this ablate-worker is built against a CPU-only LibTorch (",
          TORCH_VERSION,
          "); build it against LibTorch with CUDA (README: Building each flavour) or use "
          "--device cpu"));
#endif
    }
    return torch::Device(torch::kCUDA, 0);
  }
  if (requested == "mps") {
    if (!mps) return absl::UnavailableError("device mps requested, but none is available");
    return torch::Device(torch::kMPS);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device '", requested, "': expected auto, cpu, cuda or mps"));
}

std::string DescribeDevice(const torch::Device& device) {
  if (device.is_cuda()) {
    int64_t memory = 0;
    return absl::StrCat("cuda:0 (", CudaName(0, &memory), ")");
  }
  return device.is_mps() ? "mps" : "cpu";
}

void ConfigureThreads(int threads) {
  const int n = util::ThreadsOrAll(threads);
  {
    // setenv is not safe against a concurrent getenv; the daemon sets the value once before its
    // slots start, so with --slots this only ever reads.
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    const char* current = std::getenv("BLIS_NUM_THREADS");
    if (current == nullptr || std::string(current) != "1") {
      setenv("BLIS_NUM_THREADS", "1", /*overwrite=*/1);
    }
  }
  SetThreadIntraOpThreads(n);
#if defined(__GLIBC__)
  // 32 MiB is the largest mmap threshold glibc accepts; without a trim threshold it would hand
  // the top of the heap back after each step and fault it in again on the next.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

std::string TorchVersion() { return TORCH_VERSION; }

std::string TorchBuildLine() {
#ifdef ABLATE_TORCH_CUDA
#ifdef CUDART_VERSION
  return absl::StrCat("torch ", TORCH_VERSION, ", CUDA build (CUDA runtime ", CUDART_VERSION / 1000,
                      ".", CUDART_VERSION % 1000 / 10, ")");
#else
  return absl::StrCat("torch ", TORCH_VERSION, ", CUDA build");
#endif
#else
  return absl::StrCat("torch ", TORCH_VERSION, ", CPU build (no CUDA)",
                      at::hasMPS() ? ", MPS available" : "");
#endif
}

void SetThreadIntraOpThreads(int threads) {
  at::get_num_threads();  // adopts the process-wide value now, not at the first parallel op
  at::set_num_threads(threads);
}

DeviceInfo DescribeDeviceInfo(const torch::Device& device) {
  DeviceInfo info;
  info.torch_version = TorchVersion();
  if (device.is_cuda()) {
    info.kind = "cuda";
    info.name = CudaName(0, &info.memory_bytes);
  } else if (device.is_mps()) {
    info.kind = "mps";
    info.name = "Apple GPU (MPS)";
    // MPS shares the system's unified memory, of which Metal lets the GPU hold its
    // recommendedMaxWorkingSetSize. Asking Metal for it takes Objective-C, which this C++ build
    // does not compile, so the worker reports kMpsWorkingSetFraction of it instead.
    info.memory_bytes =
        static_cast<int64_t>(static_cast<double>(PhysicalMemoryBytes()) * kMpsWorkingSetFraction);
  } else {
    info.kind = "cpu";
    info.name = CpuModelName();
    info.memory_bytes = PhysicalMemoryBytes();
  }
  return info;
}

absl::StatusOr<DeviceInfo> ProbeDevice(const std::string& requested) {
  try {
    auto device = ResolveDevice(requested);
    if (!device.ok()) return device.status();
    return DescribeDeviceInfo(*device);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("probing device '", requested, "': ", TorchErrorLine(e)));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("probing device '", requested, "': ", e.what()));
  }
}

void ResetPeakMemory(const std::string& device_kind) {
#ifdef ABLATE_TORCH_CUDA
  if (device_kind == "cuda") {
    try {
      c10::cuda::CUDACachingAllocator::resetPeakStats(0);
    } catch (const std::exception&) {
      // A device that cannot answer this fails the run's first step with its own error.
    }
  }
#else
  (void)device_kind;
#endif
}

int64_t PeakMemoryBytes(const std::string& device_kind) {
#ifdef ABLATE_TORCH_CUDA
  if (device_kind == "cuda") {
    try {
      // Index 0 is StatType::AGGREGATE (all pools), whose namespace moved after LibTorch 1.13.
      return c10::cuda::CUDACachingAllocator::getDeviceStats(0).reserved_bytes[0].peak;
    } catch (const std::exception&) {
      return 0;
    }
  }
#else
  (void)device_kind;
#endif
  return PeakResidentBytes();
}

std::string DescribeMemory(int64_t bytes) {
  if (bytes <= 0) return "unknown";
  return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / double(int64_t{1} << 30));
}

}  // namespace ablate::train
