// LibTorch's errors as one line for a person, and as a status whose code says whose fault it is
// (worker/failure_class.h). c10::Error::what() appends a C++ stack trace (28 frames for a dtype
// mismatch) that says nothing to someone running a sweep; the run's error gets the cause, and
// whoever catches logs what() at debug level for the trace.
#pragma once

#include <c10/util/Exception.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ablate::train {

// The first line of the error's message without its backtrace ("expected scalar type BFloat16
// but found Float").
inline std::string TorchErrorLine(const c10::Error& e) {
  std::string msg = e.what_without_backtrace();
  if (const auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
  return msg;
}

// True for LibTorch's out-of-memory errors: the CUDA (and, in later releases, MPS) allocators
// throw c10::OutOfMemoryError; the CPU allocator throws a plain c10::Error whose text is its only
// mark ("DefaultCPUAllocator: can't allocate memory: you tried to allocate ...").
inline bool IsTorchOutOfMemory(const c10::Error& e) {
  return dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr ||
         absl::StrContains(e.what_without_backtrace(), "can't allocate memory");
}

// `context`: the error line, with the code set where the type says whose fault it is, so the
// worker need not read the text: RESOURCE_EXHAUSTED for out of memory (the machine's), INTERNAL
// otherwise (the worker's message table, or unknown).
inline absl::Status TorchErrorStatus(const std::string& context, const c10::Error& e) {
  const std::string text = absl::StrCat(context, TorchErrorLine(e));
  if (IsTorchOutOfMemory(e)) return absl::ResourceExhaustedError(text);
  return absl::InternalError(text);
}

}  // namespace ablate::train
