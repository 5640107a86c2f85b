#include "server/store/notify_batcher.h"

#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/store/channels.h"
#include "server/store/pg_codec.h"

namespace ablate::server {

void NotifyBatcher::Add(const std::string& channel, const std::string& payload) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.emplace(channel, payload);
}

void NotifyBatcher::Start() {
  loop_.Start(std::chrono::milliseconds(20), [this] { Flush(); });
}

void NotifyBatcher::Stop() {
  loop_.Stop();
  Flush();
}

void NotifyBatcher::Flush() {
  std::set<std::pair<std::string, std::string>> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.swap(pending_);
  }
  if (batch.empty()) return;
  std::vector<std::string> channels, payloads;
  for (const auto& [c, p] : batch) {
    channels.push_back(c);
    payloads.push_back(p);
  }
  // A failure loses hints only (see header); watchers fall back to polling.
  (void)db_->Tx<bool>("notify", [&](pqxx::work& tx) -> absl::StatusOr<bool> {
    pg::Exec(tx, "notify_batch", pg::TextArray(channels), pg::TextArray(payloads));
    return true;
  });
}

void Notices::Sweep(int64_t sweep_id) {
  watchers_.emplace(channels::kSweep, absl::StrCat(sweep_id));
}

void Notices::Run(int64_t run_id) { watchers_.emplace(channels::kRun, absl::StrCat(run_id)); }

void Notices::Clear() {
  queue_.clear();
  watchers_.clear();
}

void Notices::SendQueue(pqxx::work& tx) const {
  if (queue_.empty()) return;
  pg::Exec(tx, "notify_payloads", std::string(channels::kQueue),
           pg::TextArray({queue_.begin(), queue_.end()}));
}

void Notices::SendWatchers(NotifyBatcher* batcher) const {
  for (const auto& [channel, payload] : watchers_) batcher->Add(channel, payload);
}

}  // namespace ablate::server
