#include "worker/fleet_data.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"
#include "spdlog/spdlog.h"
#include "worker/data_prep_claim.h"
#include "worker/train/trainer.h"

namespace ablate::worker {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Resp = v1::DataPrepClaimResponse;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool AllPresent(const train::DataPlan& plan) {
  std::error_code ec;
  for (const auto& [role, path] : plan.files) {
    if (!fs::is_regular_file(path, ec)) return false;
  }
  return true;
}

// Renews the claim every third of its period while the files are made and uploaded, so only a
// preparer that died loses it.
class ClaimRenewer {
 public:
  ClaimRenewer(ServerClient* c, int64_t worker_id, const DataPrepClaim& claim)
      : c_(c), worker_id_(worker_id), claim_(claim) {
    const double period = std::max(1.0, (claim.expires_at() - UnixNow()) / 3);
    thread_ = std::thread([this, period] { Loop(period); });
  }
  ~ClaimRenewer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void Loop(double period) {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(int64_t(period * 1000)),
                         [&] { return stop_; })) {
      lock.unlock();
      auto r = c_->RenewDataPrep(worker_id_, claim_);
      if (!r.ok()) {
        // Lost or unreachable: preparing goes on (this worker needs the files anyway); the
        // publish at the end is refused if another worker took the claim over.
        spdlog::warn("data key {}: renewing the preparation claim: {}", claim_.key().substr(0, 16),
                     std::string(r.status().message()));
      }
      lock.lock();
    }
  }

  ServerClient* c_;
  const int64_t worker_id_;
  const DataPrepClaim claim_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

absl::Status Download(ServerClient* c, const train::DataPlan& plan, const Resp& ready) {
  std::set<std::string> done;  // a run without val names the train tokens twice
  for (const auto& [role, path] : plan.files) {
    if (!done.insert(path).second) continue;
    const v1::PreparedFileRef* ref = nullptr;
    for (const auto& f : ready.files()) {
      if (f.role() == role) ref = &f;
    }
    if (ref == nullptr) {
      return absl::NotFoundError(absl::StrCat("the published data set has no ", role, " file"));
    }
    RETURN_IF_ERROR(c->GetPreparedFile(ref->sha256(), path));
  }
  return absl::OkStatus();
}

absl::Status PrepareAndPublish(ServerClient* c, const v1::DataSpec& data,
                               const train::DataPlan& plan, const DataPrepClaim& claim,
                               const FleetDataOptions& o) {
  ClaimRenewer renewer(c, o.worker_id, claim);
  const auto t0 = Clock::now();
  auto times = train::PrepareRunData(data, o.cache_dir);
  if (!times.ok()) {
    if (auto s = c->AbandonDataPrep(claim); !s.ok()) {
      spdlog::warn("data key {}: abandoning the claim: {}", plan.key.substr(0, 16),
                   std::string(s.message()));
    }
    return times.status();
  }
  spdlog::info(
      "run {}: data key {}: prepared in {:.1f}s (tokenizer {:.1f}s; encoded {:.1f} MB in {:.1f}s, "
      "{:.1f} MB/s)",
      o.run_id, plan.key.substr(0, 16), Since(t0), times->tokenizer_seconds,
      times->encoded_bytes / 1e6, times->encode_seconds,
      times->encode_seconds > 0 ? times->encoded_bytes / 1e6 / times->encode_seconds : 0.0);
  const auto t_up = Clock::now();
  std::vector<v1::PreparedFileRef> published;
  int64_t bytes = 0;
  std::map<std::string, v1::PreparedFileRef> uploaded;  // by path: one upload per file
  for (const auto& [role, path] : plan.files) {
    if (auto it = uploaded.find(path); it != uploaded.end()) {
      v1::PreparedFileRef same = it->second;
      same.set_role(role);
      published.push_back(std::move(same));
      continue;
    }
    ASSIGN_OR_RETURN(v1::PreparedFileRef ref, c->PutPreparedFile(claim, role, path));
    bytes += ref.size_bytes();
    uploaded.emplace(path, ref);
    published.push_back(std::move(ref));
  }
  RETURN_IF_ERROR(c->PublishDataPrep(claim, published));
  spdlog::info("run {}: data key {}: published to the fleet ({} files, {:.1f} MB, {:.1f}s)",
               o.run_id, plan.key.substr(0, 16), published.size(), bytes / 1e6, Since(t_up));
  return absl::OkStatus();
}

absl::StatusOr<FleetDataSource> PrepareLocally(const v1::DataSpec& data, const FleetDataOptions& o,
                                               const std::string& why) {
  spdlog::warn("run {}: preparing data on this worker only: {}", o.run_id, why);
  RETURN_IF_ERROR(train::PrepareRunData(data, o.cache_dir).status());
  return FleetDataSource::kLocalOnly;
}

}  // namespace

const char* FleetDataSourceName(FleetDataSource source) {
  switch (source) {
    case FleetDataSource::kCache:
      return "cache";
    case FleetDataSource::kDownloaded:
      return "downloaded";
    case FleetDataSource::kPrepared:
      return "prepared";
    case FleetDataSource::kLocalOnly:
      return "prepared locally";
  }
  return "?";
}

void CountFleetData(FleetDataSource source, SessionStats* stats) {
  switch (source) {
    case FleetDataSource::kCache:
      ++stats->data_from_cache;
      return;
    case FleetDataSource::kDownloaded:
      ++stats->data_downloaded;
      return;
    case FleetDataSource::kPrepared:
      ++stats->data_prepared;
      return;
    case FleetDataSource::kLocalOnly:
      ++stats->data_prepared_locally;
      return;
  }
}

absl::StatusOr<FleetDataSource> EnsureFleetData(ServerClient* c, const v1::DataSpec& data,
                                                const FleetDataOptions& o) {
  ASSIGN_OR_RETURN(const train::DataPlan plan, train::PlanRunData(data, o.cache_dir));
  const std::string short_key = plan.key.substr(0, 16);
  if (AllPresent(plan)) {
    spdlog::info("run {}: data key {}: in the local cache", o.run_id, short_key);
    return FleetDataSource::kCache;
  }
  v1::DataPrepClaimRequest ask;
  ask.set_worker_id(o.worker_id);
  ask.set_key(plan.key);
  ask.set_description(plan.description);
  const auto t0 = Clock::now();
  std::string waiting_for;
  while (true) {
    if (o.should_stop && o.should_stop()) {
      return absl::CancelledError("stopped while waiting for prepared data");
    }
    auto r = c->ClaimDataPrep(ask);
    if (!r.ok()) {
      // The fleet is an optimisation: a server without it (UNIMPLEMENTED) or out of reach must
      // not stop this worker from training on data it can make itself.
      return PrepareLocally(data, o, std::string(r.status().message()));
    }
    switch (r->state()) {
      case Resp::READY: {
        const auto t_down = Clock::now();
        if (auto s = Download(c, plan, *r); !s.ok()) {
          return PrepareLocally(data, o, absl::StrCat("downloading prepared data: ", s.message()));
        }
        int64_t bytes = 0;
        for (const auto& f : r->files()) bytes += f.size_bytes();
        spdlog::info(
            "run {}: data key {}: downloaded prepared data from the fleet ({} files, {:.1f} MB, "
            "{:.1f}s; {:.1f}s since asking)",
            o.run_id, short_key, r->files_size(), bytes / 1e6, Since(t_down), Since(t0));
        return FleetDataSource::kDownloaded;
      }
      case Resp::CLAIMED:
        spdlog::info("run {}: data key {}: preparing it for the fleet ({})", o.run_id, short_key,
                     plan.description);
        RETURN_IF_ERROR(PrepareAndPublish(c, data, plan, DataPrepClaim(plan.key, *r), o));
        return FleetDataSource::kPrepared;
      case Resp::PREPARING:
        if (waiting_for != r->preparer()) {
          waiting_for = r->preparer();
          spdlog::info(
              "run {}: data key {}: worker {} is preparing it (claim for {:.0f}s more); "
              "waiting",
              o.run_id, short_key, waiting_for, r->claim_expires_at() - UnixNow());
        }
        break;
      default:
        return PrepareLocally(data, o, absl::StrCat("unexpected claim state ", r->state()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(int64_t(o.poll_seconds * 1000)));
  }
}

}  // namespace ablate::worker
