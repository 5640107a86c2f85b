#include "server/store/retention_store.h"

#include "absl/strings/str_cat.h"
#include "server/store/pg_codec.h"
#include "server/store/pqxx_compat.h"

namespace ablate::server {

absl::StatusOr<DeletedSweep> RetentionStore::DeleteSweep(int64_t id, bool dry_run) {
  return db_->Tx<DeletedSweep>("delete sweep", [&](pqxx::work& tx) -> absl::StatusOr<DeletedSweep> {
    pqxx::result check = pg::Exec(tx, "sweep_delete_check", id);
    if (check.empty()) return absl::NotFoundError(absl::StrCat("no sweep with id ", id));
    DeletedSweep out;
    out.id = id;
    out.name = check[0][0].as<std::string>();
    const auto state = check[0][1].as<std::string>();
    const auto unfinished = check[0][2].as<int64_t>();
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
    out.runs = tally[0].as<int64_t>();
    out.metric_points = tally[1].as<int64_t>();
    out.checkpoints = tally[2].as<int64_t>();
    out.checkpoint_bytes = tally[3].as<int64_t>();
    if (dry_run) return out;
    for (const auto& row : pg::Exec(tx, "sweep_delete", id)) {
      out.checkpoint_sha256.push_back(row[0].as<std::string>());
    }
    return out;
  });
}

absl::StatusOr<std::vector<std::string>> RetentionStore::Unreferenced(
    const std::vector<std::string>& sha256) {
  using Out = std::vector<std::string>;
  if (sha256.empty()) return Out{};
  return db_->Tx<Out>("find unreferenced blobs", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    Out out;
    for (const auto& row : pg::Exec(tx, "blob_unreferenced", pg::TextArray(sha256))) {
      out.push_back(row[0].as<std::string>());
    }
    return out;
  });
}

}  // namespace ablate::server
