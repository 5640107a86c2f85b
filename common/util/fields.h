// Checks for strings that clients and workers send: one place that decides what a name may
// contain, how long a free-text field may be, and how user-supplied text appears in a log line.
// Everything that reaches PostgreSQL or a log from the network goes through these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ablate::util {

// Caps, in bytes. Names are identifiers people type; text is free-form (error messages, reasons).
inline constexpr size_t kMaxNameBytes = 128;
inline constexpr size_t kMaxTextBytes = 64 * 1024;

// A name (worker, token, sweep, metric, file): 1..max bytes of printable ASCII without spaces at
// either end and without control characters. INVALID_ARGUMENT names `field` and says what is
// wrong, quoting at most the first 64 bytes of the value.
absl::Status CheckName(absl::string_view field, absl::string_view value,
                       size_t max_bytes = kMaxNameBytes);

// Free text: at most max bytes, no NUL, valid UTF-8 (PostgreSQL refuses invalid UTF-8 and NUL).
absl::Status CheckText(absl::string_view field, absl::string_view value,
                       size_t max_bytes = kMaxTextBytes);

// `value` as it may appear in a log line: in double quotes, with control characters (C0, DEL and
// C1), quotes, backslashes and bytes >= 0x80 that are not valid UTF-8 escaped, cut at `max_bytes`
// of input with "..." appended. A newline in a worker name can never start a forged log line.
std::string LogQuote(absl::string_view value, size_t max_bytes = 200);

// `value` as a terminal may show it: control characters (C0 such as ESC, BEL and newline, DEL, and
// C1 such as CSI) and bytes that are not valid UTF-8 escaped ("\x1b", "\n", "\u009b"), the rest
// as is. What the CLI prints of text a worker or user sent goes through this once, so an escape
// sequence or a newline in it can neither drive the terminal nor forge a row.
std::string Printable(absl::string_view value);

// INVALID_ARGUMENT naming `field` unless `value` is finite and within [lo, hi] (NaN is neither).
absl::Status CheckNumber(absl::string_view field, double value, double lo, double hi);
// INVALID_ARGUMENT naming `field` unless lo <= `value` <= hi.
absl::Status CheckInteger(absl::string_view field, int64_t value, int64_t lo, int64_t hi);

}  // namespace ablate::util
