#include "server/gc_command.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "server/retention.h"
#include "server/store/db.h"

namespace ablate::server {

absl::Status RunGc(const std::string& url, const std::string& store_dir, int64_t min_age_seconds,
                   bool dry_run) {
  if (url.empty()) {
    return absl::InvalidArgumentError("--database-url (or ABLATE_DATABASE_URL) is required");
  }
  if (min_age_seconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--min-age-seconds must be 0 or more, not ", min_age_seconds));
  }
  Db db(url, 1);
  if (auto s = db.Ping(); !s.ok()) return s;
  RetentionStore store(&db);
  BlobStore blobs(store_dir);
  GcOptions options;
  options.min_age = std::chrono::seconds(min_age_seconds);
  options.dry_run = dry_run;
  const char* verb = dry_run ? "would remove" : "removed";
  auto report = CollectGarbage(&store, blobs, options, [&](const BlobStore::File& f) {
    std::printf("%s %s (%lld bytes%s)\n", verb, f.path.c_str(),
                static_cast<long long>(f.size_bytes),
                f.sha256.empty() ? ", an interrupted upload" : ", no row references it");
  });
  if (!report.ok()) return report.status();
  std::printf(
      "%s %lld file(s), %lld bytes; kept %lld file(s), %lld bytes (referenced, or younger "
      "than %lld s)\n",
      verb, static_cast<long long>(report->files_removed),
      static_cast<long long>(report->bytes_removed), static_cast<long long>(report->files_kept),
      static_cast<long long>(report->bytes_kept), static_cast<long long>(min_age_seconds));
  return absl::OkStatus();
}

}  // namespace ablate::server
