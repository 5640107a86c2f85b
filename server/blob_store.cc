#include "server/blob_store.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <optional>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/util/file.h"
#include "common/util/status_macros.h"

namespace ablate::server {

namespace fs = std::filesystem;

bool IsSha256Hex(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::Status BlobStore::Init() {
  std::error_code ec;
  fs::create_directories(fs::path(root_) / "tmp", ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("--store-dir ", root_, ": cannot create: ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BlobStore::Writer>> BlobStore::NewWriter(int64_t max_bytes,
                                                                        std::string what,
                                                                        std::string cap_flag) {
  static std::atomic<uint64_t> counter{0};
  auto w = std::unique_ptr<Writer>(new Writer());
  w->root_ = root_;
  w->max_bytes_ = max_bytes;
  w->what_ = std::move(what);
  w->cap_flag_ = std::move(cap_flag);
  w->tmp_path_ =
      (fs::path(root_) / "tmp" / absl::StrCat(getpid(), "-", counter.fetch_add(1), ".part"))
          .string();
  w->out_.open(w->tmp_path_, std::ios::binary | std::ios::trunc);
  if (!w->out_) return w->Failed("cannot create", errno);
  return w;
}

BlobStore::Writer::~Writer() {
  if (!committed_) {
    out_.close();
    std::error_code ec;
    fs::remove(tmp_path_, ec);
  }
}

absl::Status BlobStore::Writer::Append(const std::string& data) {
  if (size_ + static_cast<int64_t>(data.size()) > max_bytes_) {
    out_.close();
    std::error_code ec;
    fs::remove(tmp_path_, ec);
    return absl::InvalidArgumentError(absl::StrCat(what_, ": more than ", max_bytes_,
                                                   " bytes uploaded; the server's ", cap_flag_,
                                                   " is ", max_bytes_));
  }
  out_.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out_) return Failed("write", errno);
  hash_.Update(data);
  size_ += static_cast<int64_t>(data.size());
  return absl::OkStatus();
}

absl::Status BlobStore::Writer::Failed(const char* what, int err) {
  out_.close();
  std::error_code ec;
  fs::remove(tmp_path_, ec);
  // A full store is RESOURCE_EXHAUSTED: the uploader skips this blob and goes on (a worker
  // training on offers its next checkpoint), where UNAVAILABLE would have it retry the same one.
  const absl::Status s = util::FileError(what, tmp_path_, err);
  if (absl::IsResourceExhausted(s)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what_, ": the server's store is full (--store-dir ", root_, ")"));
  }
  return absl::UnavailableError(absl::StrCat(what_, ": store: ", s.message()));
}

absl::Status BlobStore::Writer::Commit(const std::string& sha256, int64_t size_bytes) {
  out_.close();
  if (!out_) return Failed("write", errno);
  if (size_ != size_bytes) {
    return absl::DataLossError(
        absl::StrCat(what_, ": received ", size_, " bytes, header announced ", size_bytes));
  }
  const std::string digest = hash_.HexDigest();
  if (digest != sha256) {
    return absl::DataLossError(
        absl::StrCat(what_, ": sha256 mismatch: received ", digest, ", header announced ", sha256));
  }
  const fs::path dir = fs::path(root_) / sha256.substr(0, 2);
  std::error_code ec;
  fs::create_directories(dir, ec);
  fs::rename(tmp_path_, dir / sha256, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("checkpoint store: ", ec.message()));
  committed_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::string> BlobStore::PathOf(const std::string& sha256) const {
  if (!IsSha256Hex(sha256)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sha256 must be 64 lower-case hex digits (got \"", sha256, "\")"));
  }
  fs::path p = fs::path(root_) / sha256.substr(0, 2) / sha256;
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) {
    return absl::NotFoundError(absl::StrCat("checkpoint blob ", sha256, " is not in the store"));
  }
  return p.string();
}

absl::Status BlobStore::ForEachFile(const std::function<absl::Status(const File&)>& visit) const {
  std::error_code ec;
  fs::directory_iterator end;
  auto stat = [&](const fs::path& p, std::string sha256) -> std::optional<File> {
    std::error_code e;
    if (!fs::is_regular_file(fs::symlink_status(p, e))) return std::nullopt;
    File f{p.string(), std::move(sha256), 0, fs::last_write_time(p, e)};
    if (e) return std::nullopt;  // removed meanwhile
    f.size_bytes = static_cast<int64_t>(fs::file_size(p, e));
    if (e) return std::nullopt;
    return f;
  };
  for (fs::directory_iterator dir(root_, ec); !ec && dir != end; dir.increment(ec)) {
    const std::string name = dir->path().filename().string();
    const bool tmp = name == "tmp";
    const bool shard = name.size() == 2 && IsSha256Hex(name + std::string(62, '0'));
    if (!tmp && !shard) continue;
    std::error_code e;
    if (!fs::is_directory(fs::symlink_status(dir->path(), e))) continue;
    for (fs::directory_iterator it(dir->path(), e); !e && it != end; it.increment(e)) {
      const std::string file = it->path().filename().string();
      std::optional<File> f;
      if (tmp && file.ends_with(".part")) {
        f = stat(it->path(), "");
      } else if (shard && IsSha256Hex(file) && file.starts_with(name)) {
        f = stat(it->path(), file);
      }
      if (f) RETURN_IF_ERROR(visit(*f));
    }
    if (e)
      return absl::UnavailableError(
          absl::StrCat("store: cannot list ", dir->path().string(), ": ", e.message()));
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("--store-dir ", root_, ": cannot list: ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> BlobStore::Remove(const std::string& sha256) const {
  if (!IsSha256Hex(sha256)) {
    return absl::InvalidArgumentError(absl::StrCat("not a sha256: \"", sha256, "\""));
  }
  const fs::path p = fs::path(root_) / sha256.substr(0, 2) / sha256;
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  if (ec) return 0;  // not there (removed already)
  if (!fs::remove(p, ec) || ec) {
    if (ec)
      return absl::UnavailableError(
          absl::StrCat("store: cannot remove ", p.string(), ": ", ec.message()));
    return 0;
  }
  return static_cast<int64_t>(size);
}

absl::Status StreamFile(const std::string& path, size_t chunk_bytes,
                        const std::function<bool(std::string&&, int64_t total)>& emit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::error_code ec;
  const auto total = static_cast<int64_t>(fs::file_size(path, ec));
  if (ec) return absl::NotFoundError(absl::StrCat("cannot stat ", path, ": ", ec.message()));
  bool first = true;
  while (in || first) {
    std::string chunk(chunk_bytes, '\0');
    in.read(chunk.data(), static_cast<std::streamsize>(chunk_bytes));
    chunk.resize(static_cast<size_t>(in.gcount()));
    if (chunk.empty() && !first) break;
    if (!emit(std::move(chunk), first ? total : 0)) return absl::CancelledError("client went away");
    first = false;
  }
  return absl::OkStatus();
}

}  // namespace ablate::server
