// The lifecycle of one PollingStream, as an explicit state machine with no gRPC call, timer or
// database in it, so that every transition (cancellation and finish races included) can be
// driven and checked in a unit test (tests/unit/stream_lifecycle_test.cc). PollingStream holds
// its mutex around every call and carries out the Do each call returns.
//
// Transitions (event: from -> to):
//   BeginRead (setup done, or an armed read fired): kSetup | kIdleWait | kPromptWait -> kReading
//   ReadDone with messages:                          kReading -> kWriting
//   WriteDone with more queued:                      kWriting -> kWriting
//   ReadDone / WriteDone, nothing left, not last:    -> kPromptWait if poked since the read
//                                                       began, else kIdleWait
//   Poke:                                            kIdleWait -> kPromptWait; elsewhere it
//                                                       only marks the stream dirty
//   Finish (error, cancel, last batch written):      kWriting -> kFinishOwed; any other live
//                                                       phase -> kFinished
//   WriteDone:                                       kFinishOwed -> kFinished
//   Done (gRPC's OnDone):                            any -> kDone
//
// Rules the phases enforce:
// - At most one read in flight or armed: a poke while reading or writing only marks the
//   stream dirty, and the read is armed when that work ends. (Arming a second read from a poke
//   while one was running let two fetches run at once on the executor's threads.)
// - gRPC allows Finish only with no write outstanding: a finish during a write is owed and sent
//   from WriteDone, with the first status given (a later cancel or error does not replace it).
// - Finish is sent once; after Done (gRPC released the reactor) nothing is sent at all.
#pragma once

#include <string>
#include <utility>

#include "grpcpp/grpcpp.h"

namespace ablate::server {

class StreamLifecycle {
 public:
  enum class Phase {
    kSetup,       // the setup (authorize, resolve, subscribe) is running; nothing read yet
    kReading,     // fetch() is running on an executor thread
    kWriting,     // one message is with gRPC; more may wait in the outbox
    kIdleWait,    // a fallback read is armed for idle_poll from now
    kPromptWait,  // a read is armed for the next allowed time (a poke arrived)
    kFinishOwed,  // Finish is decided but a write is outstanding; WriteDone sends it
    kFinished,    // Finish has been sent; gRPC will call OnDone
    kDone,        // OnDone ran: the reactor is gone
  };

  // What the caller must do after a transition.
  enum class Do {
    kNothing,
    kArmIdleRead,    // arm a read for idle_poll from now
    kArmPromptRead,  // arm a read for max(now, next allowed)
    kRearmPrompt,    // cancel the armed idle read; if that succeeds, arm a prompt read
    kWrite,          // write the next message of the outbox
    kFinish,         // send Finish(finish_status()); cancel an armed read if one is
  };

  Phase phase() const { return phase_; }
  bool dirty() const { return dirty_; }
  const grpc::Status& finish_status() const { return finish_status_; }

  // A read may start (after setup, or when an armed read fires). False once the stream is
  // finishing: the caller then does nothing.
  bool BeginRead() {
    if (phase_ != Phase::kSetup && phase_ != Phase::kIdleWait && phase_ != Phase::kPromptWait) {
      return false;
    }
    phase_ = Phase::kReading;
    dirty_ = false;
    return true;
  }

  // A successful read ended: `messages` says whether it queued any, `last` whether the stream
  // ends once they are written. Only meaningful while reading; otherwise (the stream finished
  // meanwhile) the read's result is dropped.
  Do ReadDone(bool messages, bool last) {
    if (phase_ != Phase::kReading) return Do::kNothing;
    last_ = last;
    if (messages) {
      phase_ = Phase::kWriting;
      return Do::kWrite;
    }
    if (last_) return FinishNow(grpc::Status::OK);
    return Wait();
  }

  // gRPC finished a write; `more` says whether the outbox holds another message.
  Do WriteDone(bool ok, bool more) {
    if (phase_ == Phase::kFinishOwed) {
      phase_ = Phase::kFinished;
      return Do::kFinish;
    }
    if (phase_ != Phase::kWriting) return Do::kNothing;
    // The write is over, so Finish may go out now.
    if (!ok) return FinishNow(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
    if (more) return Do::kWrite;
    if (last_) return FinishNow(grpc::Status::OK);
    return Wait();
  }

  // A NOTIFY for what the stream watches.
  Do Poke() {
    switch (phase_) {
      case Phase::kSetup:
      case Phase::kReading:
      case Phase::kWriting:
        dirty_ = true;  // read again promptly when the current work ends
        return Do::kNothing;
      case Phase::kIdleWait:
        // If the idle read cannot be cancelled it is already firing, which serves as well.
        dirty_ = true;
        phase_ = Phase::kPromptWait;
        return Do::kRearmPrompt;
      default:
        return Do::kNothing;
    }
  }

  // Ends the stream with `status` (an error, the client's cancel, or OK after the last batch).
  // The first status given is the one sent.
  Do Finish(grpc::Status status) {
    switch (phase_) {
      case Phase::kFinishOwed:
      case Phase::kFinished:
      case Phase::kDone:
        return Do::kNothing;
      case Phase::kWriting:
        finish_status_ = std::move(status);
        phase_ = Phase::kFinishOwed;
        return Do::kNothing;
      default:
        return FinishNow(std::move(status));
    }
  }

  // gRPC's OnCancel: the client went away or the deadline passed.
  Do Cancelled() { return Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled")); }

  // gRPC's OnDone. Returns true when a read is still armed and must be cancelled.
  bool Done() {
    const bool armed = phase_ == Phase::kIdleWait || phase_ == Phase::kPromptWait;
    phase_ = Phase::kDone;
    return armed;
  }

 private:
  // Finish with no write outstanding.
  Do FinishNow(grpc::Status status) {
    finish_status_ = std::move(status);
    phase_ = Phase::kFinished;
    return Do::kFinish;
  }

  // Nothing to write and not the end: wait for a poke, or read promptly if one came meanwhile.
  Do Wait() {
    if (dirty_) {
      phase_ = Phase::kPromptWait;
      return Do::kArmPromptRead;
    }
    phase_ = Phase::kIdleWait;
    return Do::kArmIdleRead;
  }

  Phase phase_ = Phase::kSetup;
  bool dirty_ = false;  // a poke arrived since the last read began
  bool last_ = false;   // the stream ends once the outbox is written
  grpc::Status finish_status_;
};

}  // namespace ablate::server
