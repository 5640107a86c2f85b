#include "worker/self_check.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/util/file.h"

namespace ablate::worker {
namespace {

namespace fs = std::filesystem;

// The directories a run's attempt writes (worker/run_session.cc, fleet_data.cc, crash_record.h).
constexpr const char* kRunDirs[] = {"spool", "runs", "checkpoints", "cache", "datasets", "held"};
// Written, synced and read back in each: enough to meet a full or read-only disk, small enough
// to cost nothing.
constexpr size_t kProbeBytes = 64 << 10;

std::optional<int64_t> MemAvailable(const HostPaths& paths) {
  auto text = util::ReadFile(paths.proc + "/meminfo");
  if (!text.ok()) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, " kB");
    int64_t kb = 0;
    if (absl::SimpleAtoi(line, &kb)) return kb * 1024;
  }
  return std::nullopt;
}

}  // namespace

absl::Status CheckWorkDir(const std::string& work_dir) {
  const std::string probe(kProbeBytes, 's');
  for (const char* sub : kRunDirs) {
    const std::string dir = (fs::path(work_dir) / sub).string();
    if (auto s = util::MakeDirs(dir); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("work dir: ", s.message()));
    }
    const std::string path = (fs::path(dir) / ".self-check").string();
    if (auto s = util::WriteFileAtomically(path, probe, util::Durability::kFsync); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("work dir: ", s.message()));
    }
    auto back = util::ReadFile(path);
    std::error_code ec;
    fs::remove(path, ec);
    if (!back.ok())
      return absl::Status(back.status().code(),
                          absl::StrCat("work dir: ", back.status().message()));
    if (*back != probe) {
      return absl::DataLossError(
          absl::StrCat("work dir: ", path, " read back other bytes than were written"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMemory(int64_t need_bytes, const HostPaths& paths) {
  if (need_bytes <= 0) return absl::OkStatus();
  std::optional<int64_t> available = MemAvailable(paths);
  if (const auto limit = CgroupMemoryLimitBytes(paths)) {
    const int64_t used = CgroupMemoryUsedBytes(paths).value_or(0);
    const int64_t headroom = std::max<int64_t>(0, *limit - used);
    if (!available || headroom < *available) available = headroom;
  }
  if (!available || *available >= need_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("memory: ", *available >> 20, " MiB available, less than the ", need_bytes >> 20,
                   " MiB the run that failed for lack of memory needs (its estimate)"));
}

}  // namespace ablate::worker
