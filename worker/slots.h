// How the daemon shares one device between several leased runs (`--slots N`): which slot a new
// run goes to, when to ask the server for another run, when the daemon is done, and how the
// worker's CPU threads are divided. Pure bookkeeping, not thread-safe: the daemon guards it with
// its own mutex. Kept apart from the daemon so it is tested without a server or torch.
#pragma once

#include <vector>

#include "absl/status/statusor.h"

namespace ablate::worker {

inline constexpr int kMaxSlots = 64;

// The training threads of one slot when the worker has `threads` in all (0: `cores`, all of
// them) and `slots` slots: an even share, at least one. INVALID_ARGUMENT naming the flags when
// `threads` cannot give every slot one thread.
absl::StatusOr<int> ThreadsPerSlot(int threads, int slots, int cores);

class SlotScheduler {
 public:
  // `max_runs` 0: no limit on the runs started.
  SlotScheduler(int slots, int max_runs);

  // Whether to ask the server for another run now: a slot is free, leasing has not been stopped
  // and the run limit is not reached.
  bool WantLease() const;
  // Marks the lowest free slot busy and counts a run started; returns the slot, or -1 when none
  // is free.
  int Acquire();
  // The run in `slot` ended; the slot is free again.
  void Release(int slot);
  // No more leases (--exit-when-idle found the queue empty, or a permanent error): the runs held
  // finish, nothing new starts.
  void StopLeasing() { stopped_ = true; }
  // Nothing runs and nothing more will be leased: the daemon may exit.
  bool Done() const { return busy() == 0 && !WantLeaseIgnoringSlots(); }

  int busy() const;
  int slots() const { return static_cast<int>(busy_.size()); }
  int started() const { return started_; }

 private:
  bool WantLeaseIgnoringSlots() const;

  std::vector<bool> busy_;
  const int max_runs_;
  int started_ = 0;
  bool stopped_ = false;
};

}  // namespace ablate::worker
