#include "worker/host.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/util/file.h"
#include "common/util/sha256.h"

namespace ablate::worker {
namespace {

namespace fs = std::filesystem;

// A cgroup v1 limit this large is "no limit" (the kernel's default is 2^63 rounded to a page).
constexpr int64_t kNoLimit = int64_t{1} << 62;

std::optional<int64_t> ReadNumber(const std::string& path) {
  auto text = util::ReadFile(path);
  if (!text.ok()) return std::nullopt;
  int64_t v = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &v) || v <= 0 || v >= kNoLimit) {
    return std::nullopt;  // "max", unlimited, or unreadable
  }
  return v;
}

// A number on the line `key N` of a flat-keyed file (memory.events, memory.oom_control).
std::optional<int64_t> ReadKey(const std::string& path, absl::string_view key) {
  auto text = util::ReadFile(path);
  if (!text.ok()) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t v = 0;
    if (parts.size() == 2 && parts[0] == key && absl::SimpleAtoi(parts[1], &v)) return v;
  }
  return std::nullopt;
}

// This process's cgroups: the directories that hold its memory controller's files, its own
// first, then its parents up to the mount's root (a container sees its own cgroup as the root).
std::vector<std::string> MemoryCgroupDirs(const HostPaths& paths, bool* v2) {
  std::vector<std::string> out;
  auto self = util::ReadFile(paths.proc + "/self/cgroup");
  if (!self.ok()) return out;
  std::string root, relative;
  for (absl::string_view line : absl::StrSplit(*self, '\n')) {
    // "hierarchy-id:controllers:path"; v2 is "0::path".
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    const std::vector<absl::string_view> controllers = absl::StrSplit(f[1], ',');
    if (std::find(controllers.begin(), controllers.end(), "memory") != controllers.end()) {
      root = paths.cgroup + "/memory";
      relative = std::string(f[2]);
      *v2 = false;
      break;
    }
    if (f[0] == "0" && f[1].empty()) {
      root = paths.cgroup;
      relative = std::string(f[2]);
      *v2 = true;
    }
  }
  if (root.empty()) return out;
  std::error_code ec;
  fs::path dir = fs::path(root + relative).lexically_normal();
  // Within a cgroup namespace the path read may not exist under this mount: its root is ours.
  if (!fs::is_directory(dir, ec)) dir = root;
  const fs::path top = fs::path(root).lexically_normal();
  for (;;) {
    out.push_back(dir.string());
    if (dir == top || !dir.has_parent_path() || dir.parent_path() == dir) break;
    dir = dir.parent_path();
    if (dir.string().size() < top.string().size()) break;
  }
  return out;
}

}  // namespace

std::optional<int64_t> CgroupMemoryLimitBytes(const HostPaths& paths) {
  std::optional<int64_t> limit;
  bool v2 = false;
  for (const auto& dir : MemoryCgroupDirs(paths, &v2)) {
    auto v = ReadNumber(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
    if (v && (!limit || *v < *limit)) limit = v;
  }
  return limit;
}

std::optional<int64_t> CgroupMemoryUsedBytes(const HostPaths& paths) {
  bool v2 = false;
  const std::vector<std::string> dirs = MemoryCgroupDirs(paths, &v2);
  if (dirs.empty()) return std::nullopt;
  return ReadNumber(dirs.front() + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
}

std::optional<int64_t> MemoryLimitBytes(const HostPaths& paths) {
  std::optional<int64_t> limit = CgroupMemoryLimitBytes(paths);
  auto lower = [&](std::optional<int64_t> v) {
    if (v && (!limit || *v < *limit)) limit = v;
  };
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    struct rlimit rl {};
    if (getrlimit(resource, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < static_cast<rlim_t>(kNoLimit)) {
      lower(static_cast<int64_t>(rl.rlim_cur));
    }
  }
  return limit;
}

std::optional<int64_t> OomKills(const HostPaths& paths) {
  bool v2 = false;
  const std::vector<std::string> dirs = MemoryCgroupDirs(paths, &v2);
  if (dirs.empty()) return std::nullopt;
  return ReadKey(dirs.front() + (v2 ? "/memory.events" : "/memory.oom_control"), "oom_kill");
}

std::string BootId(const HostPaths& paths) {
  auto text = util::ReadFile(paths.proc + "/sys/kernel/random/boot_id");
  return text.ok() ? std::string(absl::StripAsciiWhitespace(*text)) : "";
}

std::string HostKey(const std::string& work_dir, const HostPaths& paths) {
  std::string machine;
  if (auto id = util::ReadFile(paths.machine_id); id.ok()) {
    machine = std::string(absl::StripAsciiWhitespace(*id));
  }
  if (machine.empty()) {
    char name[256] = {0};
    if (gethostname(name, sizeof(name) - 1) == 0) machine = name;
  }
  std::error_code ec;
  const fs::path abs = fs::absolute(work_dir, ec).lexically_normal();
  return Sha256Hex(machine + '\0' + (ec ? work_dir : abs.string()));
}

}  // namespace ablate::worker
