#include "worker/train/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace ablate::train {
namespace {

absl::Status Errno(const char* what, const std::string& path) {
  return absl::InternalError(absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

}  // namespace

std::string TempPathFor(const std::string& path) {
  static std::atomic<int> counter{0};
  return absl::StrCat(path, ".tmp.", getpid(), ".", counter.fetch_add(1));
}

absl::Status CommitFile(const std::string& tmp, const std::string& path) {
  int fd = open(tmp.c_str(), O_RDONLY);
  if (fd < 0) return Errno("open", tmp);
  const int rc = fsync(fd);
  close(fd);
  if (rc != 0) return Errno("fsync", tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Errno("rename", tmp);
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view data) {
  const std::string tmp = TempPathFor(path);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Errno("cannot create", tmp);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.flush();
    if (!out) return Errno("write", tmp);
  }
  return CommitFile(tmp, path);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

absl::Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InternalError(absl::StrCat(dir, ": cannot create directory: ", ec.message()));
  return absl::OkStatus();
}

}  // namespace ablate::train
