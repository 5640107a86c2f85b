// Data prepared once per fleet (migration 0005, docs/architecture.md#data-flow): which data keys
// are ready (their files in the content-addressed store) and which are being prepared, by whom
// and until when. A claim is lease-like: a random token (only its SHA-256 is stored) and an
// expiry the preparer renews; the next worker that asks after the expiry takes the claim over,
// so a preparer that died blocks the fleet for at most one claim period.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"
#include "server/store/db.h"

namespace ablate::server {

// Live data-preparation claims one worker may hold at once (a worker prepares one at a time).
inline constexpr int kMaxOpenDataClaims = 4;
// Distinct files one claim may upload (a data set publishes at most 8).
inline constexpr int kMaxUploadsPerClaim = 16;

class PreparedStore {
 public:
  PreparedStore(Db* db, double claim_seconds) : db_(db), claim_seconds_(claim_seconds) {}

  double claim_seconds() const { return claim_seconds_; }

  // READY with the files; PREPARING by another live claim; or CLAIMED for the caller (a new
  // claim, one taken over from an expired claim, or the caller's own claim renewed when
  // request.claim_token is its token). A renewal with a token that no longer holds the claim is
  // FAILED_PRECONDITION ("claim lost"). request fields are checked by the caller.
  // The worker must be registered with the caller's token (`token_id`, 0 without auth) and not
  // stopped (NOT_FOUND), and hold fewer than kMaxOpenDataClaims live claims to take a new one
  // (RESOURCE_EXHAUSTED).
  absl::StatusOr<v1::DataPrepClaimResponse> Claim(const v1::DataPrepClaimRequest& request,
                                                  int64_t token_id);

  // FAILED_PRECONDITION unless `claim_token` holds the live claim on `key`.
  absl::Status CheckClaim(const std::string& key, const std::string& claim_token);

  // Under the live claim (row-locked): `commit` (keep the uploaded blob) runs, then the upload is
  // recorded as this claim's. FAILED_PRECONDITION ("claim lost") without the claim;
  // RESOURCE_EXHAUSTED past kMaxUploadsPerClaim distinct files.
  absl::Status RecordUpload(const std::string& key, const std::string& claim_token,
                            const v1::PreparedFileRef& ref,
                            const std::function<absl::Status()>& commit);

  // Under the claim (row-locked): every file must have been uploaded under this claim
  // (RecordUpload) with that size, and `check_files` (do the blobs still exist with these
  // sizes?) runs; then the key becomes ready with `files`. A publish repeated after success is
  // accepted.
  absl::Status Publish(const std::string& key, const std::string& claim_token,
                       const std::vector<v1::PreparedFileRef>& files,
                       const std::function<absl::Status()>& check_files);

  // Drops the caller's claim so the next worker to ask may prepare.
  absl::Status Abandon(const std::string& key, const std::string& claim_token);

  // Whether `sha256` is a file of a ready key (what GetPreparedFile may serve).
  absl::StatusOr<bool> IsPublishedFile(const std::string& sha256);

 private:
  Db* db_;
  double claim_seconds_;
};

}  // namespace ablate::server
