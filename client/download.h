// HTTP(S) downloads for `ablate data fetch`, with libcurl: resume of an interrupted transfer
// (<dest>.part plus a Range request), a progress bar with rate and ETA, a low-speed timeout so a
// stalled server ends in an error instead of a hang, SHA-256 verification, and an atomic rename
// to <dest> only once the bytes are verified. Nothing but a verified file ever has <dest>'s name.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ablate::cli {

struct DownloadOptions {
  std::string url;
  std::string dest;
  // Expected SHA-256 (64 hex digits); empty: none known, the caller records what arrived.
  std::string sha256;
  std::string sha256_source;  // named in a mismatch error: "the manifest", "--sha256", ...
  // A transfer slower than low_speed_bytes per second for low_speed_seconds is abandoned (the
  // part kept for a resume).
  int64_t low_speed_bytes = 1024;
  int64_t low_speed_seconds = 30;
  int64_t connect_timeout_seconds = 30;
  bool progress = true;  // on stderr: a redrawn bar on a terminal, a line every 5 s otherwise
};

struct DownloadResult {
  std::string sha256;        // of the verified file now at dest
  int64_t bytes = 0;         // its size
  int64_t resumed_from = 0;  // bytes already in <dest>.part before this transfer
  int64_t transferred = 0;   // bytes received this time
  double seconds = 0;
};

// Downloads opts.url to opts.dest. Errors name the URL and what went wrong: an HTTP status
// (404), a stall (low-speed timeout, the partial file kept for a resume), a cut connection (kept
// for a resume), a SHA-256 mismatch (the partial file deleted: a resume would only repeat it).
absl::StatusOr<DownloadResult> Download(const DownloadOptions& opts);

// InvalidArgument unless `url` is http:// or https:// (the only schemes Download takes): a
// file:// or ftp:// URL is a usage error, found before anything is created. `flag` names it.
absl::Status CheckDownloadUrl(const std::string& url, const std::string& flag);

}  // namespace ablate::cli
