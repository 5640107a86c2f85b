// Sends "something changed" notifications (sweep and run channels) outside the transactions
// that caused them, batched and de-duplicated every few tens of milliseconds.
//
// Why: NOTIFY inside a transaction takes a database-wide lock at commit, serialising every hot
// Lease/Complete/ReportMetrics commit behind it. These channels only wake watchers that re-read
// the database anyway, so sending them just after commit is as good; if the process dies in
// between, a watcher sees the change at its next fallback poll instead. The queue channel (new
// leasable runs) stays transactional: it is rare and a lost one would delay a worker.
//
// Store code never calls pg_notify itself: it collects what a transaction announces in a
// Notices and sends it with SendQueue (inside the transaction) and SendWatchers (after commit),
// which apply the rule above (docs/architecture.md#the-run-state-machine, "Why two kinds of
// NOTIFY").
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "server/periodic.h"
#include "server/store/db.h"

namespace ablate::server {

class NotifyBatcher {
 public:
  explicit NotifyBatcher(Db* db) : db_(db) {}
  ~NotifyBatcher() { Stop(); }

  void Add(const std::string& channel, const std::string& payload);
  void Start();
  void Stop();  // flushes what is pending

 private:
  void Flush();

  Db* db_;
  std::mutex mu_;
  std::set<std::pair<std::string, std::string>> pending_;
  Periodic loop_;
};

// What one transaction announces, on channels::kQueue, kSweep and kRun.
class Notices {
 public:
  void Queue(const std::string& device) { queue_.insert(device); }  // runs became leasable
  void Sweep(int64_t sweep_id);  // a sweep's runs or state changed
  void Run(int64_t run_id);      // a run changed state or got points
  // Db::Tx may run a transaction's function again: each attempt starts from nothing.
  void Clear();

  // The queue channel, as the transaction's last statement: PostgreSQL delivers it only if the
  // transaction commits, and then without fail, so a parked Lease cannot miss its run.
  void SendQueue(pqxx::work& tx) const;
  // The sweep and run channels, once the transaction has committed.
  void SendWatchers(NotifyBatcher* batcher) const;

 private:
  std::set<std::string> queue_;
  std::set<std::pair<const char*, std::string>> watchers_;  // (channel, payload)
};

}  // namespace ablate::server
