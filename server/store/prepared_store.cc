#include "server/store/prepared_store.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/util/sha256.h"
#include "common/util/status_macros.h"
#include "server/store/rows.h"

namespace ablate::server {
namespace {

using Resp = v1::DataPrepClaimResponse;

// The same words whichever part did not match (token, expiry, state), as for lease fencing.
absl::Status ClaimLost(const std::string& key) {
  return absl::FailedPreconditionError(
      absl::StrCat("claim lost: data key ", key.substr(0, 16),
                   " is no longer being prepared under this claim (it expired and another "
                   "worker took it over, or it was published or abandoned)"));
}

// What a call made under a claim accepts besides the token itself.
enum class ClaimUse {
  kUpload,   // PutPreparedFile: only a live claim, so an expired holder stops sending bytes
  kHold,     // renew, abandon: also an expired claim that nobody has taken over yet
  kPublish,  // as kHold, and a key already published under this token (a retried publish)
};

struct HeldClaim {
  std::string digest;      // SecretDigest(token): what the statements that follow match on
  bool published = false;  // kPublish only: the key is already ready under this token
};

// The one check of a claim token, as lease_held (migration 0018) is for a run's lease: every call
// under a claim (renew, upload, publish, abandon) passes here first, with the claim's row locked
// for the rest of its transaction. ClaimLost has the same words whether the token is wrong,
// taken over, expired or its key published, so a caller probing another worker's claim learns
// nothing about which.
absl::StatusOr<HeldClaim> FenceClaim(pqxx::work& tx, const std::string& key,
                                     const std::string& claim_token, ClaimUse use) {
  HeldClaim held;
  held.digest = SecretDigest(claim_token);
  pqxx::result r = pg::Exec(tx, "data_claim_fence", key, held.digest);
  if (r.empty()) return ClaimLost(key);
  const bool preparing = r[0]["state"].as<std::string>() == "preparing";
  const bool expired = r[0]["expired"].as<bool>();
  switch (use) {
    case ClaimUse::kUpload:
      if (!preparing || expired) return ClaimLost(key);
      break;
    case ClaimUse::kHold:
      if (!preparing) return ClaimLost(key);
      break;
    case ClaimUse::kPublish:
      held.published = !preparing;
      break;
  }
  return held;
}

absl::StatusOr<Resp> NewClaim(pqxx::work& tx, const std::string& key, int64_t worker_id,
                              double seconds, bool take_over, const std::string& description) {
  auto token = RandomHex(32);
  if (!token.ok()) return token.status();
  pqxx::result r;
  if (take_over) {
    r = pg::Exec(tx, "data_claim_take_over", key, worker_id, SecretDigest(*token), seconds);
  } else {
    r = pg::Exec(tx, "data_claim_insert", key, worker_id, SecretDigest(*token), seconds,
                 description);
  }
  if (r.empty()) return absl::AbortedError("raced");  // someone else inserted: look again
  Resp out;
  out.set_state(Resp::CLAIMED);
  out.set_claim_token(*token);
  out.set_claim_expires_at(r[0]["claim_expires_at"].as<double>());
  return out;
}

// RESOURCE_EXHAUSTED when the worker already holds kMaxOpenDataClaims live claims: a worker
// prepares one data set at a time, and claims it never publishes keep others waiting.
absl::Status CheckOpenClaims(pqxx::work& tx, int64_t worker_id) {
  pqxx::row count = pg::Exec1(tx, "data_open_claims", worker_id);
  const int64_t open = count["open_claims"].as<int64_t>();
  if (open >= kMaxOpenDataClaims) {
    return absl::ResourceExhaustedError(
        absl::StrCat("worker_id ", worker_id, " already holds ", open,
                     " open data-preparation claims (the limit is ", kMaxOpenDataClaims,
                     "); publish or abandon one, or wait for one to expire"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Resp> PreparedStore::Claim(const v1::DataPrepClaimRequest& req, int64_t token_id) {
  return db_->Tx<Resp>("claim data preparation", [&](pqxx::work& tx) -> absl::StatusOr<Resp> {
    // The claim is recorded in the worker's name and every other worker is told who prepares:
    // only the worker's own token may claim for it (another token's worker gets the same answer
    // as an unknown id, as for Deregister), and a stopped worker must register again.
    pqxx::result w = pg::Exec(tx, "data_claim_worker", req.worker_id(), token_id);
    if (w.empty()) {
      return absl::NotFoundError(
          absl::StrCat("worker_id ", req.worker_id(),
                       " is not registered with this token (call Register first)"));
    }
    if (w[0]["stopped"].as<bool>()) {
      return absl::NotFoundError(absl::StrCat(
          "worker_id ", req.worker_id(), " was deregistered (it stopped); call Register again"));
    }
    // Two tries: a concurrent first claim makes our INSERT find the row, which we then read.
    for (int attempt = 0; attempt < 2; ++attempt) {
      pqxx::result r = pg::Exec(tx, "data_claim_row", req.key());
      if (r.empty()) {
        if (!req.claim_token().empty()) return ClaimLost(req.key());
        if (auto s = CheckOpenClaims(tx, req.worker_id()); !s.ok()) return s;
        auto claimed =
            NewClaim(tx, req.key(), req.worker_id(), claim_seconds_, false, req.description());
        if (absl::IsAborted(claimed.status())) continue;
        return claimed;
      }
      const pqxx::row claim = r.front();
      const auto state = claim["state"].as<std::string>();
      if (state == "ready") {
        Resp out;
        out.set_state(Resp::READY);
        pqxx::result files = pg::Exec(tx, "data_files", req.key());
        pg::ByName col(files);
        for (const auto& row : files) {
          auto* f = out.add_files();
          f->set_role(col(row, "role").as<std::string>());
          f->set_sha256(col(row, "sha256").as<std::string>());
          f->set_size_bytes(col(row, "size_bytes").as<int64_t>());
        }
        return out;
      }
      const bool expired = claim["expired"].is_null() || claim["expired"].as<bool>();
      if (!req.claim_token().empty()) {
        RETURN_IF_ERROR(FenceClaim(tx, req.key(), req.claim_token(), ClaimUse::kHold).status());
        pqxx::result renewed = pg::Exec(tx, "data_claim_renew", req.key(), claim_seconds_);
        Resp out;
        out.set_state(Resp::CLAIMED);
        out.set_claim_token(req.claim_token());
        out.set_claim_expires_at(renewed[0]["claim_expires_at"].as<double>());
        return out;
      }
      if (!expired) {
        Resp out;
        out.set_state(Resp::PREPARING);
        out.set_preparer(claim["preparer"].as<std::string>());
        out.set_claim_expires_at(claim["claim_expires_at"].as<double>());
        return out;
      }
      if (auto s = CheckOpenClaims(tx, req.worker_id()); !s.ok()) return s;
      return NewClaim(tx, req.key(), req.worker_id(), claim_seconds_, true, req.description());
    }
    return absl::UnavailableError("claim data preparation: the claim row kept changing; retry");
  });
}

absl::Status PreparedStore::CheckClaim(const std::string& key, const std::string& claim_token) {
  return db_
      ->Tx<bool>("check data claim",
                 [&](pqxx::work& tx) -> absl::StatusOr<bool> {
                   RETURN_IF_ERROR(FenceClaim(tx, key, claim_token, ClaimUse::kUpload).status());
                   return true;
                 })
      .status();
}

absl::Status PreparedStore::RecordUpload(const std::string& key, const std::string& claim_token,
                                         const v1::PreparedFileRef& ref,
                                         const std::function<absl::Status()>& commit) {
  return db_
      ->Tx<bool>(
          "record prepared upload",
          [&](pqxx::work& tx) -> absl::StatusOr<bool> {
            ASSIGN_OR_RETURN(const HeldClaim held,
                             FenceClaim(tx, key, claim_token, ClaimUse::kUpload));
            const std::string& digest = held.digest;
            pqxx::row count = pg::Exec1(tx, "data_upload_count", key, digest, ref.sha256());
            const int64_t uploads = count["uploads"].as<int64_t>();
            if (uploads >= kMaxUploadsPerClaim) {
              return absl::ResourceExhaustedError(absl::StrCat(
                  "prepared file: this claim on data key ", key.substr(0, 16), " already uploaded ",
                  uploads, " files (the limit is ", kMaxUploadsPerClaim, ")"));
            }
            if (auto s = commit(); !s.ok()) return s;
            pg::Exec(tx, "data_upload_record", key, digest, ref.sha256(), ref.size_bytes());
            return true;
          })
      .status();
}

absl::Status PreparedStore::Publish(const std::string& key, const std::string& claim_token,
                                    const std::vector<v1::PreparedFileRef>& files,
                                    const std::function<absl::Status()>& check_files) {
  return db_
      ->Tx<bool>("publish prepared data",
                 [&](pqxx::work& tx) -> absl::StatusOr<bool> {
                   // An expired claim nobody took over may still publish: the files are as good.
                   ASSIGN_OR_RETURN(const HeldClaim held,
                                    FenceClaim(tx, key, claim_token, ClaimUse::kPublish));
                   if (held.published) return true;  // a retried publish
                   const std::string& digest = held.digest;
                   // Only files this claim uploaded: a hash that is in the store for another
                   // reason (another run's checkpoint) must not become readable by every worker.
                   for (size_t i = 0; i < files.size(); ++i) {
                     if (pg::Exec(tx, "data_publish_uploaded", key, digest, files[i].sha256(),
                                  files[i].size_bytes())
                             .empty()) {
                       return absl::FailedPreconditionError(absl::StrCat(
                           "files[", i, "] (", files[i].role(), ", sha256 ", files[i].sha256(),
                           ") was not uploaded under this claim with that size; PutPreparedFile "
                           "it first"));
                     }
                   }
                   if (auto s = check_files(); !s.ok()) return s;
                   for (const auto& f : files) {
                     pg::Exec(tx, "data_publish_file", key, f.role(), f.sha256(), f.size_bytes());
                   }
                   pg::Exec(tx, "data_publish_ready", key);
                   pg::Exec(tx, "data_publish_forget_uploads", key);
                   return true;
                 })
      .status();
}

absl::Status PreparedStore::Abandon(const std::string& key, const std::string& claim_token) {
  return db_
      ->Tx<bool>("abandon data claim",
                 [&](pqxx::work& tx) -> absl::StatusOr<bool> {
                   ASSIGN_OR_RETURN(const HeldClaim held,
                                    FenceClaim(tx, key, claim_token, ClaimUse::kHold));
                   pg::Exec(tx, "data_abandon", key, held.digest);
                   return true;
                 })
      .status();
}

absl::StatusOr<bool> PreparedStore::IsPublishedFile(const std::string& sha256) {
  return db_->Tx<bool>("get prepared file", [&](pqxx::work& tx) -> absl::StatusOr<bool> {
    return !pg::Exec(tx, "data_published_file", sha256).empty();
  });
}

}  // namespace ablate::server
