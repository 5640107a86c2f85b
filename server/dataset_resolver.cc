#include "server/dataset_resolver.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/util/sha256.h"

namespace ablate::server {

namespace fs = std::filesystem;

absl::StatusOr<DatasetRecord> DatasetResolver::ResolveOne(const std::string& where,
                                                          const char* field,
                                                          const std::string& value) {
  auto fail = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": data.", field, ": ", why));
  };
  if (data_dir_.empty()) {
    return fail(absl::StrCat("\"", value,
                             "\": this server has no --data-dir to serve files from; use "
                             "synthetic:N or start the server with --data-dir"));
  }
  if (value.find('\0') != std::string::npos) return fail("path must not contain a NUL byte");
  const fs::path rel(value);
  // The server serves these files to any worker: a path must not reach outside --data-dir.
  if (rel.is_absolute()) {
    return fail(absl::StrCat("\"", value, "\" must be relative to the server's --data-dir"));
  }
  for (const auto& part : rel) {
    if (part == "..") return fail(absl::StrCat("\"", value, "\" must not contain \"..\""));
  }
  // The string checks above cannot see symlinks: a link inside the data dir to /etc/passwd (or
  // to a directory elsewhere) passes them. Only the real path decides.
  auto real = Confine((fs::path(data_dir_) / rel).string());
  if (absl::IsPermissionDenied(real.status())) {
    return fail(absl::StrCat("\"", value, "\" ", real.status().message()));
  }
  if (!real.ok()) {
    return fail(absl::StrCat("file \"", value, "\" not found under --data-dir (", data_dir_, ")"));
  }
  const fs::path full(*real);
  std::error_code ec;
  const auto size = static_cast<int64_t>(fs::file_size(full, ec));
  const auto mtime = static_cast<int64_t>(fs::last_write_time(full, ec).time_since_epoch().count());
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(full.string());
    if (it != cache_.end() && std::get<0>(it->second) == size && std::get<1>(it->second) == mtime) {
      return DatasetRecord{std::get<2>(it->second), full.string(), size};
    }
  }
  auto sha = Sha256File(full.string());
  if (!sha.ok()) return fail(std::string(sha.status().message()));
  std::lock_guard<std::mutex> lock(mu_);
  cache_[full.string()] = {size, mtime, *sha};
  return DatasetRecord{*sha, full.string(), size};
}

absl::StatusOr<std::string> DatasetResolver::Confine(const std::string& path) const {
  std::error_code ec;
  const fs::path root = fs::canonical(data_dir_, ec);
  if (ec || data_dir_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--data-dir \"", data_dir_, "\" is not an existing directory"));
  }
  const fs::path real = fs::canonical(path, ec);  // resolves every link, fails if missing
  if (ec || !fs::is_regular_file(real, ec)) {
    return absl::NotFoundError(absl::StrCat("\"", path, "\" is not a regular file"));
  }
  // Component-wise, so /data-other does not count as inside /data.
  auto r = real.begin();
  for (auto d = root.begin(); d != root.end(); ++d, ++r) {
    if (r == real.end() || *r != *d) {
      // The target is not named: it is the server's business, not the caller's.
      return absl::PermissionDeniedError(
          "leads outside --data-dir through a symbolic link; only files inside it are served");
    }
  }
  return real.string();
}

absl::StatusOr<std::vector<DatasetRecord>> DatasetResolver::Resolve(
    const std::string& file_name, const std::map<std::string, int>& lines, v1::DataSpec* data) {
  std::vector<DatasetRecord> out;
  struct Field {
    const char* name;
    const std::string& value;
    std::string* sha;
    int64_t* bytes;
  };
  std::string train_sha, val_sha;
  int64_t train_bytes = 0, val_bytes = 0;
  for (const Field& f : {Field{"train", data->train(), &train_sha, &train_bytes},
                         Field{"val", data->val(), &val_sha, &val_bytes}}) {
    if (f.value.empty() || absl::StartsWith(f.value, "synthetic:")) continue;
    const auto line = lines.find(f.name);
    auto rec =
        ResolveOne(line == lines.end() ? file_name : absl::StrCat(file_name, ":", line->second),
                   f.name, f.value);
    if (!rec.ok()) return rec.status();
    *f.sha = rec->sha256;
    *f.bytes = rec->size_bytes;
    out.push_back(*std::move(rec));
  }
  data->set_train_sha256(train_sha);
  data->set_train_bytes(train_bytes);
  data->set_val_sha256(val_sha);
  data->set_val_bytes(val_bytes);
  return out;
}

}  // namespace ablate::server
