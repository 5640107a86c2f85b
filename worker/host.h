// What the worker knows of the box it runs on, beyond its device: the memory it may use (a
// container's or a ulimit's cap, not the machine's RAM), which boot of the machine this is (a
// process that died on the same boot crashed; one from an earlier boot went with the machine),
// and a key for the box and work dir that survives restarts and renames (WorkerInfo.host_key).
// No torch, no server: tests/worker/host_test.cc reads fake /proc and /sys trees.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ablate::worker {

// Where the readers below look; tests point them at a directory of their own.
struct HostPaths {
  std::string proc = "/proc";
  std::string cgroup = "/sys/fs/cgroup";
  std::string machine_id = "/etc/machine-id";
};

// The memory this process may use, when something caps it below the machine's: the cgroup's
// (v2 memory.max, or v1 memory.limit_in_bytes, of the cgroup /proc/self/cgroup names, and of
// its parents up to the mount's root), RLIMIT_AS and RLIMIT_DATA; the smallest of them.
// nullopt: no cap ("max", unlimited, or nothing to read).
std::optional<int64_t> MemoryLimitBytes(const HostPaths& paths = {});
// The cgroup's part of that (the smallest limit of its cgroup and its parents), and what the
// cgroup holds now (v2 memory.current, v1 memory.usage_in_bytes); nullopt when not read.
std::optional<int64_t> CgroupMemoryLimitBytes(const HostPaths& paths = {});
std::optional<int64_t> CgroupMemoryUsedBytes(const HostPaths& paths = {});

// How many processes of this process's cgroup the kernel's OOM killer has killed so far
// (memory.events oom_kill of cgroup v2, memory.oom_control oom_kill of v1); nullopt when the
// kernel does not say.
std::optional<int64_t> OomKills(const HostPaths& paths = {});

// The machine's boot id (/proc/sys/kernel/random/boot_id), "" when unknown.
std::string BootId(const HostPaths& paths = {});

// WorkerInfo.host_key: SHA-256 (hex) of the machine id (else the host name) and the work dir's
// absolute path.
std::string HostKey(const std::string& work_dir, const HostPaths& paths = {});

}  // namespace ablate::worker
