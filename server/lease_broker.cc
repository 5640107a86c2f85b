#include "server/lease_broker.h"

#include <algorithm>
#include <vector>

#include "server/store/channels.h"
#include "spdlog/spdlog.h"

namespace ablate::server {
namespace {

// How many waiters one queue notification wakes. More than one so a submit of many runs starts
// several workers at once; each winner wakes one more, so the fan-out follows the supply.
constexpr int kWakeBatch = 4;

}  // namespace

LeaseBroker::LeaseBroker(RunTransitions* store, Executor* executor, double max_wait_seconds)
    : store_(store), executor_(executor), max_wait_seconds_(max_wait_seconds) {}

LeaseBroker::Handle LeaseBroker::Lease(int64_t worker_id, int64_t token_id, double wait_seconds,
                                       Alive alive, Done done) {
  const double wait = std::clamp(wait_seconds, 0.0, max_wait_seconds_);
  auto w = std::make_shared<Waiter>();
  w->worker_id = worker_id;
  w->token_id = token_id;
  w->deadline =
      Executor::Clock::now() + std::chrono::microseconds(static_cast<int64_t>(wait * 1e6));
  w->alive = std::move(alive);
  w->done = std::move(done);
  executor_->Post([this, w] { Attempt(w, false); });
  return w;
}

void LeaseBroker::Cancel(const Handle& call) {
  if (call == nullptr) return;
  call->cancelled = true;
  // Parked: out of the list now, its timer off. Being attempted: Park sees the flag.
  if (Remove(call)) {
    executor_->Cancel(call->timer);
    executor_->Post([call] { call->done(v1::LeaseResponse()); });
  }
}

void LeaseBroker::Attempt(WaiterPtr w, bool woken) {
  if (w->Gone()) {
    const std::string device = w->device;
    w->done(v1::LeaseResponse());
    // The wake-up that brought it here was meant for a worker that can take a run.
    if (woken) Wake(device, 1);
    return;
  }
  uint64_t seen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seen = seq_;
  }
  auto outcome = store_->Lease(w->worker_id, w->token_id);
  if (!outcome.ok()) {
    w->done(outcome.status());
    return;
  }
  w->device = outcome->device_kind;
  if (outcome->benched.has_value()) {
    // Benched: told at once, not parked (no run would be handed to it anyway).
    w->done(*std::move(outcome->benched));
    return;
  }
  if (outcome->lease.has_value()) {
    granted_.fetch_add(1);
    w->done(*std::move(outcome->lease));
    // There may be more where that came from: pass the baton to one more idle worker.
    Wake(w->device, 1);
    return;
  }
  Park(std::move(w), seen);
}

void LeaseBroker::Park(WaiterPtr w, uint64_t seen_seq) {
  bool retry_now = false;
  bool expired = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A caller gone meanwhile (Cancel found it in flight) is answered rather than parked.
    if (shutdown_ || Executor::Clock::now() >= w->deadline || w->Gone()) {
      expired = true;
    } else if (seq_ != seen_seq) {
      retry_now = true;
    } else {
      waiters_.push_back(w);
      w->timer = executor_->RunAt(w->deadline, [this, w] { Expire(w); });
    }
  }
  if (expired) {
    w->done(v1::LeaseResponse());
  } else if (retry_now) {
    executor_->Post([this, w] { Attempt(w, false); });
  }
}

bool LeaseBroker::Remove(const WaiterPtr& w) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(waiters_.begin(), waiters_.end(), w);
  if (it == waiters_.end()) return false;
  waiters_.erase(it);
  return true;
}

void LeaseBroker::Expire(WaiterPtr w) {
  if (Remove(w)) w->done(v1::LeaseResponse());
}

void LeaseBroker::Wake(const std::string& device, int n) {
  std::vector<WaiterPtr> woken, gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end() && static_cast<int>(woken.size()) < n;) {
      const std::string& d = (*it)->device;
      if ((*it)->Gone()) {
        // Its caller went away (a cancel not yet seen through Cancel): answered, not counted.
        gone.push_back(*it);
        it = waiters_.erase(it);
      } else if (device.empty() || device == "auto" || d.empty() || d == device) {
        woken.push_back(*it);
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& w : gone) {
    executor_->Cancel(w->timer);
    executor_->Post([w] { w->done(v1::LeaseResponse()); });
  }
  for (auto& w : woken) {
    // A timer that already fired has queued Expire, which will find the waiter gone: harmless.
    executor_->Cancel(w->timer);
    executor_->Post([this, w] { Attempt(w, true); });
  }
}

void LeaseBroker::OnNotify(const std::string& channel, const std::string& payload) {
  if (!channel.empty() && channel != channels::kQueue) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++seq_;
  }
  // A resync (listener reconnected) may have missed any number of runs: wake everyone.
  Wake(channel.empty() ? "" : payload, channel.empty() ? 1 << 30 : kWakeBatch);
}

void LeaseBroker::Shutdown() {
  std::list<WaiterPtr> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
    all.swap(waiters_);
  }
  for (auto& w : all) {
    executor_->Cancel(w->timer);
    w->done(v1::LeaseResponse());
  }
}

int LeaseBroker::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(waiters_.size());
}

}  // namespace ablate::server
