#include "common/util/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace ablate::util {
namespace {

// Closes the descriptor on every return path.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now, so that a failing close (a deferred write error) is seen.
  int Close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

}  // namespace

absl::Status FileError(const char* what, const std::string& path, int err) {
  std::string message = absl::StrCat(path, ": ", what, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(std::move(message));
  return absl::InternalError(std::move(message));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return FileError("cannot open", path, err);
  }
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return FileError("cannot read", path, errno);
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string TempPathFor(const std::string& path) {
  static std::atomic<int> counter{0};
  return absl::StrCat(path, ".tmp.", getpid(), ".", counter.fetch_add(1));
}

absl::Status CommitFile(const std::string& tmp, const std::string& path, Durability durability) {
  if (durability == Durability::kFsync) {
    Fd fd(::open(tmp.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return FileError("open", tmp, errno);
    if (::fsync(fd.get()) != 0) return FileError("fsync", tmp, errno);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return FileError("rename", tmp, errno);
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view data,
                                 Durability durability) {
  const std::string tmp = TempPathFor(path);
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
  if (fd.get() < 0) return FileError("cannot create", tmp, errno);
  auto fail = [&](const char* what, int err) {
    fd.Close();
    ::unlink(tmp.c_str());
    return FileError(what, tmp, err);
  };
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("write", errno);
    }
    done += static_cast<size_t>(n);
  }
  if (durability == Durability::kFsync && ::fsync(fd.get()) != 0) return fail("fsync", errno);
  if (fd.Close() != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return FileError("write", tmp, err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return FileError("rename", tmp, err);
  }
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat(dir, ": cannot create directory: ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace ablate::util
