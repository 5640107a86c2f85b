#include "server/store/retention_store.h"

#include "absl/strings/str_cat.h"
#include "server/store/pg_codec.h"
#include "server/store/pqxx_compat.h"
#include "server/store/rows.h"

namespace ablate::server {

absl::StatusOr<DeletedSweep> RetentionStore::DeleteSweep(int64_t id, bool dry_run) {
  return db_->Tx<DeletedSweep>("delete sweep", [&](pqxx::work& tx) -> absl::StatusOr<DeletedSweep> {
    pqxx::result check = pg::Exec(tx, "sweep_delete_check", id);
    if (check.empty()) return absl::NotFoundError(absl::StrCat("no sweep with id ", id));
    DeletedSweep out;
    out.id = id;
    const pqxx::row sweep = check.front();
    out.name = sweep["name"].as<std::string>();
    const auto state = sweep["state"].as<std::string>();
    const auto unfinished = sweep["unfinished"].as<int64_t>();
    if (unfinished > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sweep ", id, " has ", unfinished,
          " unfinished run(s) (queued, leased or running): only a finished or cancelled "
          "sweep can be deleted; `ablate cancel ",
          id, "` first"));
    }
    if (state == "active") {
      // Its last runs just ended and it is about to be marked finished (or refinement is
      // adding runs): not deletable yet, and soon it will be.
      return absl::FailedPreconditionError(
          absl::StrCat("sweep ", id,
                       " is still active (its last runs just ended); try again "
                       "in a few seconds, or `ablate cancel ",
                       id, "`"));
    }
    pqxx::row tally = pg::Exec1(tx, "sweep_delete_tally", id);
    out.runs = tally["runs"].as<int64_t>();
    out.metric_points = tally["metric_points"].as<int64_t>();
    out.checkpoints = tally["checkpoints"].as<int64_t>();
    out.checkpoint_bytes = tally["checkpoint_bytes"].as<int64_t>();
    if (dry_run) return out;
    pqxx::result deleted = pg::Exec(tx, "sweep_delete", id);
    pg::ByName col(deleted);
    for (const auto& row : deleted)
      out.checkpoint_sha256.push_back(col(row, "sha256").as<std::string>());
    return out;
  });
}

absl::StatusOr<std::vector<std::string>> RetentionStore::Unreferenced(
    const std::vector<std::string>& sha256) {
  using Out = std::vector<std::string>;
  if (sha256.empty()) return Out{};
  return db_->Tx<Out>("find unreferenced blobs", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "blob_unreferenced", pg::TextArray(sha256));
    pg::ByName col(r);
    Out out;
    for (const auto& row : r) out.push_back(col(row, "sha256").as<std::string>());
    return out;
  });
}

}  // namespace ablate::server
