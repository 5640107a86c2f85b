#include "worker/spool.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/util/file.h"

namespace ablate::worker {

// Record format: 4-byte little-endian length, then a serialized MetricPoint.

absl::StatusOr<std::unique_ptr<MetricSpool>> MetricSpool::Create(const std::string& path) {
  if (auto s = util::MakeDirs(std::filesystem::path(path).parent_path().string()); !s.ok()) {
    return s;
  }
  std::unique_ptr<MetricSpool> spool(new MetricSpool(path));
  spool->fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (spool->fd_ < 0) return util::FileError("cannot create spool", path, errno);
  spool->in_.open(path, std::ios::binary);
  if (!spool->in_) return absl::InternalError(absl::StrCat("cannot read spool ", path));
  return spool;
}

MetricSpool::MetricSpool(std::string path) : path_(std::move(path)) {}

MetricSpool::~MetricSpool() {
  if (fd_ >= 0) ::close(fd_);
  in_.close();
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

absl::Status MetricSpool::Append(const std::vector<v1::MetricPoint>& points) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string buf;
  for (const auto& p : points) {
    std::string rec = p.SerializeAsString();
    const uint32_t n = static_cast<uint32_t>(rec.size());
    const char len[4] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                         static_cast<char>((n >> 16) & 0xff), static_cast<char>(n >> 24)};
    buf.append(len, 4);
    buf.append(rec);
  }
  size_t done = 0;
  while (done < buf.size()) {
    const ssize_t n = ::pwrite(fd_, buf.data() + done, buf.size() - done, end_ + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      // The next Append writes at end_ again, over whatever part of this batch reached the
      // file, and a reader never looks past the points counted in appended_; cutting the part
      // off only gives its space back (a failure to is harmless).
      [[maybe_unused]] const int cut = ::ftruncate(fd_, end_);
      return util::FileError("spool write", path_, err);
    }
    done += static_cast<size_t>(n);
  }
  end_ += static_cast<std::streamoff>(buf.size());
  appended_ += static_cast<int64_t>(points.size());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::MetricPoint>> MetricSpool::Peek(size_t max_points) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::MetricPoint> out;
  peeked_ends_.clear();
  const int64_t available = appended_ - acked_;
  in_.clear();
  in_.seekg(read_offset_);
  std::string rec;
  while (static_cast<int64_t>(out.size()) < available && out.size() < max_points) {
    unsigned char len[4];
    if (!in_.read(reinterpret_cast<char*>(len), 4)) break;
    const uint32_t n =
        len[0] | (len[1] << 8) | (len[2] << 16) | (static_cast<uint32_t>(len[3]) << 24);
    rec.resize(n);
    if (!in_.read(rec.data(), n)) break;
    v1::MetricPoint p;
    if (!p.ParseFromString(rec)) {
      return absl::DataLossError(absl::StrCat("corrupt spool record in ", path_));
    }
    out.push_back(std::move(p));
    peeked_ends_.push_back(in_.tellg());
  }
  return out;
}

void MetricSpool::Ack(size_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  if (count == 0 || peeked_ends_.empty()) return;
  count = std::min(count, peeked_ends_.size());
  read_offset_ = peeked_ends_[count - 1];
  acked_ += static_cast<int64_t>(count);
  peeked_ends_.clear();
}

int64_t MetricSpool::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return appended_ - acked_;
}

}  // namespace ablate::worker
