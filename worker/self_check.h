// What a benched worker tests before it registers again (docs/server.md#failures-the-runs-the-
// workers-or-a-preemption): the part of the machine its failures pointed at (FaultArea), not only
// its device. Without it a worker whose work dir could not be written passed the device
// benchmark, registered, failed its next attempts the same way and was benched again, for twice
// as long each time. The device benchmark itself stays in the daemon (it needs the trainer).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "worker/host.h"

namespace ablate::worker {

// The directories a run writes under the work dir (spool, runs, checkpoints, cache, data sets,
// the crash record) can each be created, written to disk, read back and cleaned up. The error
// names the path and the system's reason.
absl::Status CheckWorkDir(const std::string& work_dir);

// At least `need_bytes` of memory are available to this process now: the system's MemAvailable
// and, under a memory cgroup, its limit less its usage. RESOURCE_EXHAUSTED saying both figures
// otherwise; OK when nothing can be read (nothing to compare).
absl::Status CheckMemory(int64_t need_bytes, const HostPaths& paths = {});

}  // namespace ablate::worker
