// What a worker process leaves in its work dir of the runs it holds and of how it ended, so that
// the next process on that work dir can tell the server (docs/server.md#failures-the-runs-the-
// workers-or-a-preemption). To the server a worker that died and a box that was preempted look
// alike (the lease expires); only the box knows the difference:
//
//   WORK/held/process         this process: pid, boot id, the cgroup's OOM-kill count at start;
//                             a crash appends how it ended (signal=N, terminate=WHAT), written by
//                             async-signal-safe handlers through a descriptor opened at start
//   WORK/held/run-R-aA        one per attempt held (RunLease: run, attempt, token), removed when
//                             the attempt's session ends however it ends
//   WORK/held/report          what the previous process(es) left, until the server has it
//
// The next process (Open) reads them: attempts still held by a process that died on this boot are
// reported at Register (RegisterRequest.crashed) with the cause, read in this order: a signal or
// std::terminate the handlers recorded; the cgroup's OOM-kill count having grown; else a death
// that left no trace (SIGKILL: the OOM killer, a container's limit, kill -9). A process of an
// earlier boot went with the machine (a preemption, as the server already counts it): nothing is
// reported. A clean stop leaves nothing held. Another live ablate-worker on the same work dir is
// refused (they would share a spool).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"
#include "worker/host.h"
#include "worker/run_lease.h"

namespace ablate::worker {

class CrashRecord {
 public:
  // Reads what the previous process left in `work_dir` (FAILED_PRECONDITION if it is still
  // running), then starts this process's record. `install_handlers`: the signal and terminate
  // handlers that complete the record on a crash (the daemon; tests check the files alone).
  static absl::StatusOr<std::unique_ptr<CrashRecord>> Open(const std::string& work_dir,
                                                           bool install_handlers = true,
                                                           const HostPaths& paths = {});
  ~CrashRecord();

  // The attempts the previous process held when it died on this boot, each with its cause; what
  // the first Register sends. Empty when there was none, it stopped cleanly, or it went with the
  // machine.
  const std::vector<v1::CrashedAttempt>& previous() const { return previous_; }
  // One line for the log on what the previous process left ("" when nothing).
  const std::string& previous_note() const { return note_; }
  // The server has the report (Register answered): it is forgotten.
  void Reported();

  // This process holds `lease` (from the Lease reply until its session ends).
  void Hold(const RunLease& lease);
  void Drop(const RunLease& lease);

  // A clean exit: nothing is held, so nothing of this process is left to report.
  void Close();

 private:
  explicit CrashRecord(std::string dir) : dir_(std::move(dir)) {}
  std::string RunPath(const RunLease& lease) const;
  void CloseFd();  // with mu_ held

  int fd_ = -1;  // this process's record, which the crash handlers append to

  std::string dir_;
  std::vector<v1::CrashedAttempt> previous_;
  std::string note_;
  std::mutex mu_;
  bool closed_ = false;
};

}  // namespace ablate::worker
