// Status plumbing shared by every module. Errors cross module boundaries as absl::Status.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ABLATE_CONCAT_INNER(a, b) a##b
#define ABLATE_CONCAT(a, b) ABLATE_CONCAT_INNER(a, b)

// RETURN_IF_ERROR(expr): returns the status of `expr` from the enclosing function if not ok.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status ablate_status_ = (expr);          \
    if (!ablate_status_.ok()) return ablate_status_; \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates a StatusOr, returns its status on error, else assigns.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ABLATE_ASSIGN_OR_RETURN_IMPL(ABLATE_CONCAT(ablate_statusor_, __LINE__), lhs, expr)
#define ABLATE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()
