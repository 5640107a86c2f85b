// A server-streaming RPC that re-reads the database when poked (NOTIFY via WatchHub) or, as a
// fallback, every `idle_poll`, writes what it read, and ends when the read says so. Built on the
// gRPC callback API: an open stream holds no thread while it waits.
//
// Lifetime: gRPC owns the reactor (Shell) until OnDone; the logic lives in a shared Core that
// executor tasks and timers keep alive, and pokes reach through a weak_ptr, so nothing touches
// a reactor after gRPC has released it. The stream's phases (setup, reading, writing, waiting,
// finishing, done) and every transition between them are StreamLifecycle's
// (server/stream_lifecycle.h), a pure state machine with its own unit test.
#pragma once

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "server/executor.h"
#include "server/grpc_status.h"
#include "server/stream_lifecycle.h"
#include "server/watch_hub.h"

namespace ablate::server {

template <typename Resp>
class PollingStream {
 public:
  struct Batch {
    std::vector<Resp> messages;  // written in order
    bool last = false;           // finish the stream after writing these
    // More is ready to read (a page of a longer read): read again as soon as these are
    // written, without waiting for a poke or min_interval.
    bool more = false;
  };
  using Fetch = std::function<absl::StatusOr<Batch>()>;
  struct Plan {
    std::string channel, key;  // what to subscribe to
    Fetch fetch;
  };
  using Setup = std::function<absl::StatusOr<Plan>()>;

  static grpc::ServerWriteReactor<Resp>* Start(Executor* executor, WatchHub* hub,
                                               std::chrono::milliseconds min_interval,
                                               std::chrono::milliseconds idle_poll, Setup setup) {
    auto core = std::make_shared<Core>();
    auto* shell = new Shell(core);
    core->shell = shell;
    core->executor = executor;
    core->hub = hub;
    core->min_interval = min_interval;
    core->idle_poll = idle_poll;
    executor->Post([core, setup = std::move(setup)] { core->Begin(setup); });
    return shell;
  }

 private:
  using Clock = Executor::Clock;
  class Shell;

  // Every method takes `mu` and hands the lifecycle's answer to Apply; the lifecycle decides,
  // Core carries out (timers, writes, Finish). Phases and transitions: stream_lifecycle.h.
  struct Core : std::enable_shared_from_this<Core> {
    using Do = StreamLifecycle::Do;

    std::mutex mu;
    Shell* shell = nullptr;  // null once gRPC called OnDone
    Executor* executor = nullptr;
    WatchHub* hub = nullptr;
    uint64_t sub = 0;
    Fetch fetch;
    std::chrono::milliseconds min_interval{0}, idle_poll{0};
    std::deque<Resp> outbox;
    Resp current;
    StreamLifecycle life;
    uint64_t timer = 0;  // the armed read, if any (cancelling a fired one is harmless)
    Clock::time_point next_allowed = Clock::now();
    bool more = false;  // the last read said more is ready: the next read is not held back

    void Begin(const Setup& setup) {
      auto plan = setup();
      if (!plan.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        Apply(life.Finish(ToGrpc(plan.status())));
        return;
      }
      std::weak_ptr<Core> weak = this->shared_from_this();
      uint64_t id = hub->Subscribe(plan->channel, plan->key, [weak] {
        if (auto c = weak.lock()) c->Poke();
      });
      {
        std::lock_guard<std::mutex> lock(mu);
        sub = id;
        fetch = std::move(plan->fetch);
        if (shell == nullptr) {
          // The call ended during setup; OnDone already ran and could not unsubscribe.
          hub->Unsubscribe(id);
          return;
        }
      }
      Read();
    }

    void Poke() {
      std::lock_guard<std::mutex> lock(mu);
      Apply(life.Poke());
    }

    void Read() {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!life.BeginRead()) return;
      }
      auto batch = fetch();  // outside mu: it queries the database
      std::lock_guard<std::mutex> lock(mu);
      if (!batch.ok()) {
        Apply(life.Finish(ToGrpc(batch.status())));
        return;
      }
      if (life.phase() != StreamLifecycle::Phase::kReading) return;  // finished meanwhile
      for (auto& m : batch->messages) outbox.push_back(std::move(m));
      more = batch->more && !batch->last;
      if (more) life.Poke();  // reading: marks the stream dirty, so the next read is prompt
      Apply(life.ReadDone(!outbox.empty(), batch->last));
    }

    void WriteDone(bool ok) {
      std::lock_guard<std::mutex> lock(mu);
      const Do next = life.WriteDone(ok, !outbox.empty());
      if (next == Do::kArmIdleRead || next == Do::kArmPromptRead) {
        next_allowed = Clock::now() + (more ? std::chrono::milliseconds(0) : min_interval);
        more = false;
      }
      Apply(next);
    }

    void Cancelled() {
      std::lock_guard<std::mutex> lock(mu);
      Apply(life.Cancelled());
    }

    void Done() {
      uint64_t id;
      {
        std::lock_guard<std::mutex> lock(mu);
        shell = nullptr;
        if (life.Done()) executor->Cancel(timer);
        id = sub;
      }
      if (id != 0) hub->Unsubscribe(id);  // outside mu: the hub calls Poke under its own lock
    }

    // Called with mu held.
    void Apply(Do what) {
      auto self = this->shared_from_this();
      auto arm = [&](Clock::time_point when) {
        timer = executor->RunAt(when, [self] { self->Read(); });
      };
      switch (what) {
        case Do::kNothing:
          break;
        case Do::kArmIdleRead:
          arm(Clock::now() + idle_poll);
          break;
        case Do::kArmPromptRead:
          arm(std::max(Clock::now(), next_allowed));
          break;
        case Do::kRearmPrompt:
          // Replace the slow fallback poll with a prompt read; if it is already firing, that
          // read serves the poke.
          if (executor->Cancel(timer)) arm(std::max(Clock::now(), next_allowed));
          break;
        case Do::kWrite:
          current = std::move(outbox.front());
          outbox.pop_front();
          shell->StartWrite(&current);
          break;
        case Do::kFinish:
          if (timer != 0) executor->Cancel(timer);
          if (shell != nullptr) shell->Finish(life.finish_status());
          break;
      }
    }
  };

  class Shell : public grpc::ServerWriteReactor<Resp> {
   public:
    explicit Shell(std::shared_ptr<Core> core) : core_(std::move(core)) {}
    void OnWriteDone(bool ok) override { core_->WriteDone(ok); }
    void OnCancel() override { core_->Cancelled(); }
    void OnDone() override {
      core_->Done();
      delete this;
    }

   private:
    std::shared_ptr<Core> core_;
  };
};

}  // namespace ablate::server
