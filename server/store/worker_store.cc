#include "server/store/worker_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/store/pg_codec.h"

namespace ablate::server {

absl::StatusOr<WorkerStore::Registered> WorkerStore::Register(const v1::WorkerInfo& info,
                                                              int64_t token_id, int max_names) {
  if (info.name().empty()) return absl::InvalidArgumentError("register: info.name is empty");
  const std::string& kind = info.device_kind();
  if (kind != "cpu" && kind != "cuda" && kind != "mps") {
    return absl::InvalidArgumentError(
        absl::StrCat("register: info.device_kind must be cpu, cuda or mps (got \"", kind, "\")"));
  }
  return db_->Tx<Registered>("register", [&](pqxx::work& tx) -> absl::StatusOr<Registered> {
    // Every per-worker limit (slots, data claims, benching) is per name: one token registering
    // names without end would lift them all. Its registrations take turns, and a new name is
    // refused once the token has max_names others live.
    pg::Exec(tx, "worker_names_lock", token_id);
    const int64_t live =
        pg::Exec1(tx, "worker_names_live", token_id, info.name(), lease_seconds_)["live"]
            .as<int64_t>();
    if (live >= max_names) {
      return absl::ResourceExhaustedError(absl::StrCat("register: this token already has ", live,
                                                       " live workers, the most one token may "
                                                       "register (--max-worker-names ",
                                                       max_names,
                                                       "); stop one (it deregisters on SIGTERM), "
                                                       "wait until one has been silent for ",
                                                       lease_seconds_, " s, or use another token"));
    }
    // Re-registering under the same name with the same token (a restarted daemon) keeps the id;
    // the leases the old process held are released by the caller (RunTransitions::
    // WorkerRestarted). Another token may take the name only once its worker has been silent
    // for a lease period: otherwise any worker token could hijack a live worker's row (and its
    // current run's bookkeeping).
    pqxx::result row = pg::Exec(tx, "worker_register", info.name(), kind, pg::ToJson(info),
                                token_id, lease_seconds_);
    if (row.empty()) {
      pqxx::row held = pg::Exec1(tx, "worker_name_free_at", info.name(), lease_seconds_);
      return absl::AlreadyExistsError(absl::StrCat(
          "register: worker name \"", info.name(),
          "\" belongs to a live worker registered with another token; the name is free at ",
          held["free_at"].as<std::string>(), " (in ", held["free_in"].as<int64_t>(),
          " s) if that worker stays silent. Choose another --name, or use that worker's token"));
    }
    Registered out;
    out.id = row[0]["id"].as<int64_t>();
    // The same box and work dir under a new name keeps its bench: renaming does not lift it.
    pqxx::result inherited =
        pg::Exec(tx, "worker_inherit_bench", out.id, info.host_key(), token_id);
    if (!inherited.empty()) out.inherited_from = inherited[0]["name"].as<std::string>();
    return out;
  });
}

absl::Status WorkerStore::Deregister(int64_t worker_id, int64_t token_id) {
  return db_
      ->Tx<bool>("deregister",
                 [&](pqxx::work& tx) -> absl::StatusOr<bool> {
                   // Only the token that registered the worker may stop it; any other gets the
                   // same answer as an unknown id, so a probe learns nothing.
                   pqxx::result r = pg::Exec(tx, "worker_deregister", worker_id, token_id);
                   if (r.empty()) {
                     return absl::NotFoundError(absl::StrCat("deregister: worker ", worker_id,
                                                             " is not registered with this token"));
                   }
                   return true;
                 })
      .status();
}

absl::StatusOr<v1::CheckpointRef> WorkerStore::FindCheckpoint(int64_t run_id,
                                                              const std::string& sha256) {
  return db_->Tx<v1::CheckpointRef>(
      "find checkpoint", [&](pqxx::work& tx) -> absl::StatusOr<v1::CheckpointRef> {
        pqxx::result r = pg::Exec(tx, "checkpoint_find", run_id, sha256);
        if (r.empty()) {
          return absl::NotFoundError(
              sha256.empty() ? absl::StrCat("run ", run_id, " has no checkpoint")
                             : absl::StrCat("run ", run_id, " has no checkpoint ", sha256));
        }
        v1::CheckpointRef ref;
        const pqxx::row checkpoint = r.front();
        ref.set_step(checkpoint["step"].as<int64_t>());
        ref.set_sha256(checkpoint["sha256"].as<std::string>());
        ref.set_size_bytes(checkpoint["size_bytes"].as<int64_t>());
        return ref;
      });
}

absl::StatusOr<std::pair<std::string, int64_t>> WorkerStore::DatasetPath(const std::string& sha) {
  using Out = std::pair<std::string, int64_t>;
  return db_->Tx<Out>("get dataset", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "dataset_path", sha);
    if (r.empty()) return absl::NotFoundError(absl::StrCat("no data set with sha256 ", sha));
    return Out(r[0]["path"].as<std::string>(), r[0]["size_bytes"].as<int64_t>());
  });
}

}  // namespace ablate::server
