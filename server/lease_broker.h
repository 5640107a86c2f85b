// Long-polling Lease without a thread per waiting worker.
//
// A Lease call first tries the database. If nothing is queued for the worker's device it becomes
// a waiter: an entry in a list plus a timer, holding no thread. A NOTIFY on the queue channel
// (from any replica: a submit, a requeue, a release, the reaper) wakes a few waiters of that
// device, oldest first; each that wins a run wakes one more, so a burst of new runs fans out to
// idle workers without a thundering herd of 1,000 queries for one run. Waiters that find nothing
// wait again until their deadline, then answer has_run = false and the worker asks again.
//
// Lost wake-ups: a NOTIFY that lands between a waiter's empty query and its registration is
// caught by a sequence number (the waiter re-queries at once). Notifications lost while the
// listener reconnects are covered by the listener's resync, which wakes everyone.
//
// Callers that went away: a cancelled call leaves the list at once (Cancel, from the reactor's
// OnCancel), and a wake-up never counts one that is gone; a woken waiter that turns out gone
// passes its wake-up on. Otherwise a worker that parks and cancels hundreds of polls would fill
// the head of the list with waiters that take wake-ups and hand them to no one, and a live
// worker behind them would hear of a new run only at its deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "server/executor.h"
#include "server/store/run_transitions.h"

namespace ablate::server {

class LeaseBroker {
 public:
  using Done = std::function<void(absl::StatusOr<v1::LeaseResponse>)>;
  using Alive = std::function<bool()>;  // false once the caller has gone away

  // One Lease call, for Cancel.
  struct Waiter;
  using Handle = std::shared_ptr<Waiter>;

  LeaseBroker(RunTransitions* store, Executor* executor, double max_wait_seconds);

  // Calls `done` exactly once, on an executor thread. A caller that
  // is no longer `alive` when its turn comes is answered empty without touching the queue.
  // `token_id` is the caller's (RunTransitions::Lease checks the worker is its own).
  Handle Lease(int64_t worker_id, int64_t token_id, double wait_seconds, Alive alive, Done done);

  // The caller of `call` went away: a parked call leaves the list now and is answered empty; a
  // call being attempted is answered when the attempt ends, and never parks.
  void Cancel(const Handle& call);

  // Notifier handler.
  void OnNotify(const std::string& channel, const std::string& payload);

  // Answers every waiter with has_run = false (graceful shutdown must not wait out long-polls).
  void Shutdown();

  int waiting() const;
  uint64_t granted() const { return granted_.load(); }

  struct Waiter {
    int64_t worker_id;
    int64_t token_id;
    std::string device;  // "" until the first query tells us
    Executor::Clock::time_point deadline;
    Alive alive;
    Done done;
    uint64_t timer = 0;
    std::atomic<bool> cancelled{false};  // Cancel was called
    bool Gone() const { return cancelled.load() || !alive(); }
  };

 private:
  using WaiterPtr = Handle;

  // `woken`: a wake-up brought it here; if its caller is gone, the wake-up goes to the next.
  void Attempt(WaiterPtr w, bool woken);
  void Park(WaiterPtr w, uint64_t seen_seq);
  void Expire(WaiterPtr w);
  // Removes up to `n` live waiters matching `device` ("auto" or "": any) and re-attempts them;
  // waiters whose caller is gone are answered on the way and not counted.
  void Wake(const std::string& device, int n);
  bool Remove(const WaiterPtr& w);  // false if someone else already took it

  RunTransitions* store_;
  Executor* executor_;
  double max_wait_seconds_;
  mutable std::mutex mu_;
  std::list<WaiterPtr> waiters_;  // oldest first
  uint64_t seq_ = 0;              // bumped on every queue notification
  bool shutdown_ = false;
  std::atomic<uint64_t> granted_{0};
};

}  // namespace ablate::server
