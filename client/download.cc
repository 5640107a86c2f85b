#include "client/download.h"

#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/sha256.h"

namespace ablate::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string Bytes(double b) {
  if (b >= 1e9) return absl::StrFormat("%.2f GB", b / 1e9);
  if (b >= 1e6) return absl::StrFormat("%.1f MB", b / 1e6);
  if (b >= 1e3) return absl::StrFormat("%.1f kB", b / 1e3);
  return absl::StrFormat("%.0f B", b);
}

std::string Duration(double s) {
  if (s < 0 || s > 1e7) return "--:--";
  const auto t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return absl::StrFormat("%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
  return absl::StrFormat("%d:%02d", t / 60, t % 60);
}

// State the libcurl callbacks share for one transfer.
struct Transfer {
  FILE* out = nullptr;
  std::string part;
  int64_t offset = 0;   // bytes of the part file kept from before (the Range start)
  int64_t written = 0;  // bytes written this transfer
  std::string write_error;
  // Progress.
  bool progress = false;
  bool tty = false;
  Clock::time_point start = Clock::now();
  Clock::time_point last_draw{};
  std::string name;
};

size_t OnWrite(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  if (fwrite(data, 1, bytes, t->out) != bytes) {
    t->write_error = absl::StrCat(t->part, ": write failed (disk full?)");
    return 0;
  }
  t->written += static_cast<int64_t>(bytes);
  return bytes;
}

void Draw(Transfer* t, double total, bool final) {
  const double now_bytes = static_cast<double>(t->offset + t->written);
  const double secs = std::chrono::duration<double>(Clock::now() - t->start).count();
  const double rate = secs > 0 ? static_cast<double>(t->written) / secs : 0;
  const double eta = (total > 0 && rate > 0) ? (total - now_bytes) / rate : -1;
  std::string line;
  if (total > 0) {
    const double frac = std::min(1.0, now_bytes / total);
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(frac * kWidth);
    line = absl::StrFormat("%s [%s%s] %3.0f%% %s / %s  %s/s  ETA %s", t->name,
                           std::string(filled, '='), std::string(kWidth - filled, ' '), frac * 100,
                           Bytes(now_bytes), Bytes(total), Bytes(rate), Duration(eta));
  } else {
    line = absl::StrFormat("%s %s  %s/s", t->name, Bytes(now_bytes), Bytes(rate));
  }
  if (t->tty) {
    std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

int OnProgress(void* user, curl_off_t dltotal, curl_off_t /*dlnow*/, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (!t->progress) return 0;
  const auto now = Clock::now();
  const auto every = t->tty ? std::chrono::milliseconds(250) : std::chrono::milliseconds(5000);
  if (now - t->last_draw < every) return 0;
  t->last_draw = now;
  // dltotal counts this transfer only; add what the part file already held.
  Draw(t, dltotal > 0 ? static_cast<double>(t->offset + dltotal) : 0, false);
  return 0;
}

struct CurlGlobal {
  CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
  ~CurlGlobal() { curl_global_cleanup(); }
};

absl::Status Verify(const DownloadOptions& opts, const std::string& path, std::string* got) {
  auto sha = Sha256File(path);
  if (!sha.ok()) return sha.status();
  *got = *sha;
  if (!opts.sha256.empty() && *sha != opts.sha256) {
    std::error_code ec;
    fs::remove(path, ec);
    return absl::DataLossError(absl::StrCat(
        "sha256 mismatch for ", opts.url, ": received ", *sha, ", expected ", opts.sha256,
        " (from ", opts.sha256_source.empty() ? "--sha256" : opts.sha256_source,
        "); the download was deleted and ", opts.dest, " left as it was"));
  }
  return absl::OkStatus();
}

// One libcurl transfer into t->part from t->offset; fills *code with the HTTP status.
CURLcode Perform(const DownloadOptions& opts, Transfer* t, long* code, std::string* detail) {
  *code = 0;
  t->written = 0;
  t->start = Clock::now();
  t->out = std::fopen(t->part.c_str(), t->offset > 0 ? "ab" : "wb");
  if (t->out == nullptr) {
    t->write_error = absl::StrCat(t->part, ": cannot write");
    return CURLE_WRITE_ERROR;
  }
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) {
    std::fclose(t->out);
    *detail = "libcurl: cannot start a transfer";
    return CURLE_FAILED_INIT;
  }
  char errbuf[CURL_ERROR_SIZE] = {0};
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, opts.url.c_str());
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);  // the Hub redirects to its CDN
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "ablate-data-fetch/1");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, static_cast<long>(opts.connect_timeout_seconds));
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(opts.low_speed_bytes));
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>(opts.low_speed_seconds));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnWrite);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, t);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, t);
  if (t->offset > 0) {
    curl_easy_setopt(c, CURLOPT_RESUME_FROM_LARGE, static_cast<curl_off_t>(t->offset));
    if (opts.progress) {
      std::fprintf(stderr, "%s: resuming after %s already in %s\n", t->name.c_str(),
                   Bytes(static_cast<double>(t->offset)).c_str(), t->part.c_str());
    }
  }
  const CURLcode rc = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, code);
  if (std::fclose(t->out) != 0 && rc == CURLE_OK) {
    t->write_error = absl::StrCat(t->part, ": write failed");
    return CURLE_WRITE_ERROR;
  }
  if (t->progress && rc == CURLE_OK) {
    Draw(t, static_cast<double>(t->offset + t->written), true);
  } else if (t->progress && t->tty) {
    std::fprintf(stderr, "\n");
  }
  *detail = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc);
  return rc;
}

}  // namespace

absl::Status CheckDownloadUrl(const std::string& url, const std::string& flag) {
  const size_t colon = url.find("://");
  const std::string scheme =
      colon == std::string::npos ? "" : absl::AsciiStrToLower(url.substr(0, colon));
  if (scheme == "http" || scheme == "https") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      flag, " ", url, ": expected an http:// or https:// URL",
      scheme.empty() ? "" : absl::StrCat(" (not ", scheme, "://)"),
      scheme == "file" ? "; a local file needs no fetch: copy it into the data directory" : ""));
}

absl::StatusOr<DownloadResult> Download(const DownloadOptions& opts) {
  static CurlGlobal global;
  DownloadResult result;
  Transfer t;
  t.part = opts.dest + ".part";
  t.progress = opts.progress;
  t.tty = isatty(STDERR_FILENO) != 0;
  t.name = fs::path(opts.dest).filename().string();
  std::error_code ec;
  // The directories this call creates, deepest first: a download that fails before a byte
  // arrives removes them again, so a typo in a URL leaves no empty ./data behind.
  std::vector<fs::path> created;
  if (const auto parent = fs::path(opts.dest).parent_path(); !parent.empty()) {
    for (fs::path p = parent; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
      created.push_back(p);
      if (p == p.parent_path()) break;
    }
    fs::create_directories(parent, ec);
    if (ec) return absl::FailedPreconditionError(absl::StrCat(parent.string(), ": ", ec.message()));
  }
  if (fs::exists(t.part, ec)) t.offset = static_cast<int64_t>(fs::file_size(t.part, ec));
  if (ec) t.offset = 0;
  result.resumed_from = t.offset;
  const auto started = Clock::now();
  long code = 0;
  std::string detail;
  CURLcode rc = Perform(opts, &t, &code, &detail);
  if (rc == CURLE_RANGE_ERROR && t.offset > 0) {
    // The server ignores Range (200 with the whole file): the part starts over.
    if (opts.progress) {
      std::fprintf(stderr, "%s: the server cannot resume; downloading from the start\n",
                   t.name.c_str());
    }
    t.offset = 0;
    result.resumed_from = 0;
    rc = Perform(opts, &t, &code, &detail);
  }
  if (rc != CURLE_OK && t.offset + t.written == 0) {
    // Nothing arrived (an HTTP error, no connection): leave no empty part behind.
    fs::remove(t.part, ec);
    for (const auto& dir : created) fs::remove(dir, ec);  // only if still empty
  }
  result.transferred = t.written;
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  const std::string kept = absl::StrCat("; ", Bytes(static_cast<double>(t.offset + t.written)),
                                        " kept in ", t.part, ": run the same command to resume");
  if (rc == CURLE_HTTP_RETURNED_ERROR && code == 416 && t.offset > 0) {
    // The part already holds the whole file (a previous run was cut after the last byte):
    // verification decides.
  } else if (rc == CURLE_HTTP_RETURNED_ERROR) {
    return absl::NotFoundError(absl::StrCat("download ", opts.url, ": the server answered HTTP ",
                                            code,
                                            code == 404 ? " (not found: check the URL)" : ""));
  } else if (rc == CURLE_OPERATION_TIMEDOUT) {
    return absl::DeadlineExceededError(absl::StrCat(
        "download ", opts.url, ": stalled, less than ", opts.low_speed_bytes, " bytes/s for ",
        opts.low_speed_seconds, " s (--low-speed-limit, --low-speed-time): ", detail, kept));
  } else if (rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR || rc == CURLE_GOT_NOTHING) {
    return absl::UnavailableError(
        absl::StrCat("download ", opts.url, ": the connection was cut: ", detail, kept));
  } else if (rc == CURLE_WRITE_ERROR && !t.write_error.empty()) {
    return absl::FailedPreconditionError(t.write_error);
  } else if (rc != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat("download ", opts.url, ": ", detail, t.offset + t.written > 0 ? kept : ""));
  }
  if (auto s = Verify(opts, t.part, &result.sha256); !s.ok()) return s;
  // fsync before the rename, so a crash leaves either no file or the whole verified one.
  if (FILE* f = std::fopen(t.part.c_str(), "rb"); f != nullptr) {
    fsync(fileno(f));
    std::fclose(f);
  }
  fs::rename(t.part, opts.dest, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("rename ", t.part, " to ", opts.dest, ": ", ec.message()));
  }
  result.bytes = static_cast<int64_t>(fs::file_size(opts.dest, ec));
  return result;
}

}  // namespace ablate::cli
