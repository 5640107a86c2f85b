#include "server/store/queue_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/store/pg_codec.h"

namespace ablate::server {

absl::StatusOr<int64_t> QueueStore::Register(const v1::WorkerInfo& info, int64_t token_id) {
  if (info.name().empty()) return absl::InvalidArgumentError("register: info.name is empty");
  const std::string& kind = info.device_kind();
  if (kind != "cpu" && kind != "cuda" && kind != "mps") {
    return absl::InvalidArgumentError(
        absl::StrCat("register: info.device_kind must be cpu, cuda or mps (got \"", kind, "\")"));
  }
  return db_->Tx<int64_t>("register", [&](pqxx::work& tx) -> absl::StatusOr<int64_t> {
    // Re-registering under the same name with the same token (a restarted daemon) keeps the id;
    // any run the old process held comes back through lease expiry, not here. Another token may
    // take the name only once its worker has been silent for a lease period: otherwise any
    // worker token could hijack a live worker's row (and its current run's bookkeeping).
    pqxx::result row = pg::Exec(
        tx,
        "INSERT INTO workers (name, device_kind, info, token_id) VALUES ($1, $2, $3::jsonb, $4) "
        "ON CONFLICT (name) DO UPDATE SET device_kind = excluded.device_kind, "
        "info = excluded.info, last_seen_at = now(), current_run_id = NULL, "
        "token_id = excluded.token_id "
        "WHERE workers.token_id IS NOT DISTINCT FROM excluded.token_id "
        "OR workers.last_seen_at <= now() - make_interval(secs => $5) RETURNING id",
        info.name(), kind, pg::ToJson(info), token_id, lease_seconds_);
    if (!row.empty()) return row[0][0].as<int64_t>();
    pqxx::row live = pg::Exec1(
        tx,
        "SELECT ceil(extract(epoch from last_seen_at + make_interval(secs => $2) - now())), "
        "to_char((last_seen_at + make_interval(secs => $2)) AT TIME ZONE 'UTC', "
        "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM workers WHERE name = $1",
        info.name(), lease_seconds_);
    return absl::AlreadyExistsError(absl::StrCat(
        "register: worker name \"", info.name(),
        "\" belongs to a live worker registered with another token; the name is free at ",
        live[1].as<std::string>(), " (in ", live[0].as<int64_t>(),
        " s) if that worker stays silent. Choose another --name, or use that worker's token"));
  });
}

absl::StatusOr<v1::CheckpointRef> QueueStore::FindCheckpoint(int64_t run_id,
                                                             const std::string& sha256) {
  return db_->Tx<v1::CheckpointRef>(
      "find checkpoint", [&](pqxx::work& tx) -> absl::StatusOr<v1::CheckpointRef> {
        pqxx::result r =
            pg::Exec(tx,
                     "SELECT step, sha256, size_bytes FROM checkpoints WHERE run_id = $1 "
                     "AND ($2 = '' OR sha256 = $2) ORDER BY step DESC LIMIT 1",
                     run_id, sha256);
        if (r.empty()) {
          return absl::NotFoundError(
              sha256.empty() ? absl::StrCat("run ", run_id, " has no checkpoint")
                             : absl::StrCat("run ", run_id, " has no checkpoint ", sha256));
        }
        v1::CheckpointRef ref;
        ref.set_step(r[0][0].as<int64_t>());
        ref.set_sha256(r[0][1].as<std::string>());
        ref.set_size_bytes(r[0][2].as<int64_t>());
        return ref;
      });
}

absl::StatusOr<std::pair<std::string, int64_t>> QueueStore::DatasetPath(const std::string& sha) {
  using Out = std::pair<std::string, int64_t>;
  return db_->Tx<Out>("get dataset", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "SELECT path, size_bytes FROM datasets WHERE sha256 = $1", sha);
    if (r.empty()) return absl::NotFoundError(absl::StrCat("no data set with sha256 ", sha));
    return Out(r[0][0].as<std::string>(), r[0][1].as<int64_t>());
  });
}

}  // namespace ablate::server
