#include "worker/failure_class.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace ablate::worker {
namespace {

// The payload WithFault attaches: the FaultClass's number as text.
constexpr absl::string_view kFaultPayload = "type.ablate.dev/ablate.v1.FaultClass";

struct Marker {
  absl::string_view text;  // matched case-insensitively anywhere in the message
  v1::FaultClass fault;
};

// Rule 4: what LibTorch, the CUDA and MPS runtimes, the C++ library and the OS say when the
// machine is to blame, for errors whose source cannot set a code. Before "CUDA error", the one
// run-side entry (failure_class.h says why).
constexpr Marker kMarkers[] = {
    {"device-side assert", v1::FAULT_RUN},
    // Memory: torch's "CUDA out of memory. Tried to allocate ...", "MPS backend out of memory",
    // the C++ library's std::bad_alloc, the OS's ENOMEM.
    {"out of memory", v1::FAULT_WORKER},
    {"bad_alloc", v1::FAULT_WORKER},
    {"Cannot allocate memory", v1::FAULT_WORKER},
    // The device's runtime: a lost card, a driver that went away, an illegal access, a library
    // of its stack failing.
    {"CUDA error", v1::FAULT_WORKER},
    {"CUDA driver", v1::FAULT_WORKER},
    {"cuDNN", v1::FAULT_WORKER},
    {"CUBLAS_STATUS", v1::FAULT_WORKER},
    {"NCCL", v1::FAULT_WORKER},
    {"MPS backend", v1::FAULT_WORKER},
    {"MTLCommandBuffer", v1::FAULT_WORKER},
    // Disk: full, over quota, read-only, broken, or files this machine will not let it write.
    {"No space left", v1::FAULT_WORKER},
    {"Disk quota exceeded", v1::FAULT_WORKER},
    {"Read-only file system", v1::FAULT_WORKER},
    {"Input/output error", v1::FAULT_WORKER},
    {"Permission denied", v1::FAULT_WORKER},
    {"Operation not permitted", v1::FAULT_WORKER},
    {"Too many open files", v1::FAULT_WORKER},
    // A library missing or mismatched on this machine's image.
    {"cannot open shared object", v1::FAULT_WORKER},
    {"dlopen", v1::FAULT_WORKER},
    {"undefined symbol", v1::FAULT_WORKER},
    // No thread could be started (std::system_error from std::thread, EAGAIN).
    {"Resource temporarily unavailable", v1::FAULT_WORKER},
    // An exception of no known type escaped the trainer (train::Train).
    {"the trainer crashed", v1::FAULT_WORKER},
};

std::optional<v1::FaultClass> AttachedFault(const absl::Status& status) {
  const auto payload = status.GetPayload(kFaultPayload);
  if (!payload) return std::nullopt;
  int value = 0;
  for (char c : std::string(*payload)) value = value * 10 + (c - '0');
  if (!v1::FaultClass_IsValid(value) || value == v1::FAULT_CLASS_UNSPECIFIED) return std::nullopt;
  return static_cast<v1::FaultClass>(value);
}

}  // namespace

v1::FaultClass ClassifyFailure(const absl::Status& status, FaultStage stage) {
  if (status.ok()) return v1::FAULT_UNKNOWN;
  if (auto attached = AttachedFault(status)) return *attached;
  switch (stage) {
    case FaultStage::kSpool:
    case FaultStage::kRunDir:
    case FaultStage::kThread:
      return v1::FAULT_WORKER;
    case FaultStage::kFetchInputs:
    case FaultStage::kTrain:
      break;
  }
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kPermissionDenied:
      return v1::FAULT_WORKER;
    default:
      break;
  }
  const std::string message = absl::AsciiStrToLower(status.message());
  for (const Marker& m : kMarkers) {
    if (absl::StrContains(message, absl::AsciiStrToLower(m.text))) return m.fault;
  }
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return v1::FAULT_RUN;
    default:
      return v1::FAULT_UNKNOWN;
  }
}

FaultArea AreaOf(const absl::Status& status, FaultStage stage) {
  switch (stage) {
    case FaultStage::kSpool:
    case FaultStage::kRunDir:
      return FaultArea::kDisk;
    case FaultStage::kThread:
      return FaultArea::kMemory;  // no thread left: the process's memory limit, most often
    case FaultStage::kFetchInputs:
    case FaultStage::kTrain:
      break;
  }
  struct Area {
    absl::string_view text;  // matched case-insensitively anywhere in the message
    FaultArea area;
  };
  // Memory first: "CUDA out of memory" is the device's memory, which the self-check's device
  // benchmark measures again too.
  static constexpr Area kAreas[] = {
      {"out of memory", FaultArea::kMemory},
      {"bad_alloc", FaultArea::kMemory},
      {"Cannot allocate memory", FaultArea::kMemory},
      {"Resource temporarily unavailable", FaultArea::kMemory},
      {"spool:", FaultArea::kDisk},
      {"No space left", FaultArea::kDisk},
      {"Disk quota exceeded", FaultArea::kDisk},
      {"Read-only file system", FaultArea::kDisk},
      {"Input/output error", FaultArea::kDisk},
      {"Permission denied", FaultArea::kDisk},
      {"Operation not permitted", FaultArea::kDisk},
      {"Too many open files", FaultArea::kDisk},
      {"CUDA", FaultArea::kDevice},
      {"cuDNN", FaultArea::kDevice},
      {"CUBLAS_STATUS", FaultArea::kDevice},
      {"NCCL", FaultArea::kDevice},
      {"MPS backend", FaultArea::kDevice},
      {"MTLCommandBuffer", FaultArea::kDevice},
  };
  const std::string message = absl::AsciiStrToLower(status.message());
  for (const Area& a : kAreas) {
    if (absl::StrContains(message, absl::AsciiStrToLower(a.text))) return a.area;
  }
  return FaultArea::kOther;
}

const char* FaultAreaName(FaultArea area) {
  switch (area) {
    case FaultArea::kDisk:
      return "disk";
    case FaultArea::kMemory:
      return "memory";
    case FaultArea::kDevice:
      return "device";
    case FaultArea::kOther:
      break;
  }
  return "other";
}

absl::Status WithFault(absl::Status status, v1::FaultClass fault) {
  if (!status.ok()) status.SetPayload(kFaultPayload, absl::Cord(std::to_string(int(fault))));
  return status;
}

const char* FaultClassName(v1::FaultClass fault) {
  switch (fault) {
    case v1::FAULT_RUN:
      return "run";
    case v1::FAULT_WORKER:
      return "worker";
    default:
      return "unknown";
  }
}

std::optional<absl::Status> InjectedFault(const std::string& path) {
  if (path.empty()) return std::nullopt;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const std::string contents = text.str();
  absl::string_view message = absl::StripAsciiWhitespace(contents);
  if (absl::ConsumePrefix(&message, "run:")) {
    message = absl::StripLeadingAsciiWhitespace(message);
    return WithFault(absl::InvalidArgumentError(message.empty() ? "run-side failure (injected)"
                                                                : std::string(message)),
                     v1::FAULT_RUN);
  }
  return WithFault(
      absl::InternalError(message.empty() ? kDefaultInjectedFault : std::string(message)),
      v1::FAULT_WORKER);
}

bool InjectedCrash(const std::string& path) {
  if (path.empty()) return false;
  std::ifstream in(path);
  std::string head;
  return in && std::getline(in, head) && absl::StartsWith(head, "crash:");
}

}  // namespace ablate::worker
