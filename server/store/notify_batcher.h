// Sends "something changed" notifications (sweep and run channels) outside the transactions
// that caused them, batched and de-duplicated every few tens of milliseconds.
//
// Why: NOTIFY inside a transaction takes a database-wide lock at commit, serialising every hot
// Lease/Complete/ReportMetrics commit behind it. These channels only wake watchers that re-read
// the database anyway, so sending them just after commit is as good; if the process dies in
// between, a watcher sees the change at its next fallback poll instead. The queue channel (new
// leasable runs) stays transactional: it is rare and a lost one would delay a worker.
#pragma once

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

}  // namespace ablate::server
