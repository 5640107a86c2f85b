// Retrying with capped exponential back-off: the one policy the worker's loops share (a run's
// calls while the server is away, the metric sender, the daemon's register and lease loops), the
// server's LISTEN connection when it reconnects (server/store/notifier.cc), and the CLI's
// streams that follow a sweep or run.
// Each caller names its policy, so a cadence is read in one place rather than in a loop body.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <thread>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ablate::util {

struct BackoffPolicy {
  std::chrono::milliseconds initial;
  std::chrono::milliseconds max;
  double multiplier = 2;
  // Each wait is drawn from [(1 - jitter) * d, d]: never longer than the nominal cadence (a lease
  // budget counts on it), a little shorter so that workers cut off together do not all come back
  // in the same instant.
  double jitter = 0.1;
  int max_tries = 0;  // calls in all, for Retry; 0: no limit
};

// A run's calls to the server (downloads, Complete, the end-of-run metric drain): quick first
// retries, since most outages are a blip, and never more than 10 s between tries.
inline constexpr BackoffPolicy kRunCallBackoff{std::chrono::milliseconds(200),
                                               std::chrono::seconds(10)};
// The metric and checkpoint sender while training goes on: it has no hurry, the spool holds the
// points.
inline constexpr BackoffPolicy kSenderBackoff{std::chrono::milliseconds(500),
                                              std::chrono::seconds(10)};
// The daemon between runs (Register, Lease): nothing is at stake but the next lease, so it backs
// off further and loads a recovering server less.
inline constexpr BackoffPolicy kDaemonBackoff{std::chrono::milliseconds(500),
                                              std::chrono::seconds(30)};

// The CLI following a sweep or a run (`ablate watch`, `ablate logs -f`) while the server is away
// (restarted, or a replica gone): try again soon, never more than 10 s apart.
inline constexpr BackoffPolicy kFollowBackoff{std::chrono::milliseconds(500),
                                              std::chrono::seconds(10)};

// A fenced write's follow-up heartbeat: the server answered a moment ago, so a transient failure
// is brief; a few quick tries, then the fence is taken at its word.
inline constexpr BackoffPolicy kFenceProbeBackoff{std::chrono::milliseconds(200),
                                                  std::chrono::milliseconds(200), 1, 0, 5};

class Backoff {
 public:
  explicit Backoff(const BackoffPolicy& policy, uint64_t seed = std::random_device{}())
      : policy_(policy), next_(policy.initial), rng_(seed) {}

  // The wait before the next try, jittered; the one after it grows by the multiplier up to max.
  std::chrono::milliseconds Next() {
    const auto nominal = next_;
    next_ = std::min(policy_.max, std::chrono::milliseconds(static_cast<int64_t>(
                                      static_cast<double>(next_.count()) * policy_.multiplier)));
    if (policy_.jitter <= 0) return nominal;
    std::uniform_real_distribution<double> shrink(1 - policy_.jitter, 1);
    return std::chrono::milliseconds(
        static_cast<int64_t>(static_cast<double>(nominal.count()) * shrink(rng_)));
  }
  // After a success: the next failure starts again from the initial wait.
  void Reset() { next_ = policy_.initial; }

 private:
  BackoffPolicy policy_;
  std::chrono::milliseconds next_;
  std::mt19937_64 rng_;
};

// Sleeps for `duration`, waking every 50 ms to ask `stop`; true when it returned because of stop.
// For threads that have no condition variable to wait on (a signal handler sets the flag).
inline bool SleepUnless(std::chrono::milliseconds duration, const std::function<bool()>& stop) {
  constexpr std::chrono::milliseconds kPoll(50);
  const auto until = std::chrono::steady_clock::now() + duration;
  while (!stop()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return false;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(kPoll, until - now));
  }
  return true;
}

inline const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

// Calls `fn` (returning Status or StatusOr) until it succeeds, fails with an error `retryable`
// does not accept, the policy's tries run out, or `stop()` is true; then returns the last result.
// `on_retry(status, wait)` runs before each wait (to log it). The wait ends early on stop.
template <typename Fn, typename Retryable, typename OnRetry>
std::invoke_result_t<Fn&> Retry(const BackoffPolicy& policy, Fn&& fn, Retryable&& retryable,
                                const std::function<bool()>& stop, OnRetry&& on_retry) {
  Backoff backoff(policy);
  for (int tries = 1;; ++tries) {
    auto result = fn();
    const absl::Status& s = StatusOf(result);
    const bool last = policy.max_tries > 0 && tries >= policy.max_tries;
    if (s.ok() || !retryable(s) || last || stop()) return result;
    const auto wait = backoff.Next();
    on_retry(s, wait);
    if (SleepUnless(wait, stop)) return result;
  }
}

}  // namespace ablate::util
