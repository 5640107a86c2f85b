// LibTorch's errors as one line for a person. c10::Error::what() appends a C++ stack trace (28
// frames for a dtype mismatch) that says nothing to someone running a sweep; the run's error
// gets the cause, and whoever catches logs what() at debug level for the trace.
#pragma once

#include <c10/util/Exception.h>

#include <string>

namespace ablate::train {

// The first line of the error's message without its backtrace ("expected scalar type BFloat16
// but found Float").
inline std::string TorchErrorLine(const c10::Error& e) {
  std::string msg = e.what_without_backtrace();
  if (const auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
  return msg;
}

}  // namespace ablate::train
