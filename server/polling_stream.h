// A server-streaming RPC that re-reads the database when poked (NOTIFY via WatchHub) or, as a
// fallback, every `idle_poll`, writes what it read, and ends when the read says so. Built on the
// gRPC callback API: an open stream holds no thread while it waits.
//
// Lifetime: gRPC owns the reactor (Shell) until OnDone; the logic lives in a shared Core that
// executor tasks and timers keep alive, and pokes reach through a weak_ptr, so nothing touches
// a reactor after gRPC has released it.
#pragma once

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
#include "server/watch_hub.h"

namespace ablate::server {

inline grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

template <typename Resp>
class PollingStream {
 public:
  struct Batch {
    std::vector<Resp> messages;  // written in order
    bool last = false;           // finish the stream after writing these
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

  struct Core : std::enable_shared_from_this<Core> {
    std::mutex mu;
    Shell* shell = nullptr;  // null once gRPC called OnDone
    Executor* executor = nullptr;
    WatchHub* hub = nullptr;
    uint64_t sub = 0;
    Fetch fetch;
    std::chrono::milliseconds min_interval{0}, idle_poll{0};
    std::deque<Resp> outbox;
    Resp current;
    bool last = false, writing = false, finishing = false, finish_sent = false;
    bool dirty = false, scheduled = false, timer_is_idle = false;
    uint64_t timer = 0;
    Clock::time_point next_allowed = Clock::now();
    grpc::Status finish_status;

    void Begin(const Setup& setup) {
      auto plan = setup();
      if (!plan.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        FinishLocked(ToGrpc(plan.status()));
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
      dirty = true;
      ScheduleLocked(false);
    }

    // Schedules a read no sooner than min_interval after the last write (or after idle_poll).
    void ScheduleLocked(bool idle) {
      if (finishing || writing) return;
      if (scheduled) {
        if (idle || !timer_is_idle || !executor->Cancel(timer)) return;
        scheduled = false;  // replace the slow fallback poll with a prompt read
      }
      scheduled = true;
      timer_is_idle = idle;
      auto self = this->shared_from_this();
      auto when = idle ? Clock::now() + idle_poll : std::max(Clock::now(), next_allowed);
      timer = executor->RunAt(when, [self] { self->Read(); });
    }

    void Read() {
      {
        std::lock_guard<std::mutex> lock(mu);
        scheduled = false;
        if (finishing) return;
        dirty = false;
      }
      auto batch = fetch();
      std::lock_guard<std::mutex> lock(mu);
      if (finishing) return;
      if (!batch.ok()) {
        FinishLocked(ToGrpc(batch.status()));
        return;
      }
      for (auto& m : batch->messages) outbox.push_back(std::move(m));
      last = batch->last;
      if (!outbox.empty()) {
        WriteNextLocked();
      } else if (last) {
        FinishLocked(grpc::Status::OK);
      } else {
        ScheduleLocked(!dirty);
      }
    }

    void WriteNextLocked() {
      current = std::move(outbox.front());
      outbox.pop_front();
      writing = true;
      shell->StartWrite(&current);
    }

    void WriteDone(bool ok) {
      std::lock_guard<std::mutex> lock(mu);
      writing = false;
      if (!ok) {
        FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
        return;
      }
      if (finishing) {
        FinishLocked(finish_status);
        return;
      }
      if (!outbox.empty()) {
        WriteNextLocked();
        return;
      }
      if (last) {
        FinishLocked(grpc::Status::OK);
        return;
      }
      next_allowed = Clock::now() + min_interval;
      ScheduleLocked(!dirty);
    }

    void FinishLocked(grpc::Status status) {
      if (!finishing) {
        finishing = true;
        finish_status = std::move(status);
        if (scheduled) executor->Cancel(timer);
      }
      // gRPC wants Finish after the outstanding write completes; WriteDone comes back here.
      if (!writing && !finish_sent && shell != nullptr) {
        finish_sent = true;
        shell->Finish(finish_status);
      }
    }

    void Cancelled() {
      std::lock_guard<std::mutex> lock(mu);
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
    }

    void Done() {
      uint64_t id;
      {
        std::lock_guard<std::mutex> lock(mu);
        shell = nullptr;
        finishing = true;
        if (scheduled) executor->Cancel(timer);
        id = sub;
      }
      if (id != 0) hub->Unsubscribe(id);  // outside mu: the hub calls Poke under its own lock
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
