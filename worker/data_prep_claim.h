// The claim a worker holds while it prepares a data set for the fleet (worker/fleet_data.h), as
// the worker keeps it: the data key and the claim token that the server's one claim check
// (`FenceClaim()` in server/store/prepared_store.cc) tests on every call under the claim. It is
// the data-prep counterpart of RunLease (worker/run_lease.h): fleet_data holds one DataPrepClaim
// and hands it whole to every ServerClient call made under it, and the coordinator puts it into the
// request with Stamp(). So no renewal, upload or publish can go out with the key of one claim and
// the token of another, or without a token.
#pragma once

#include <string>
#include <utility>

#include "ablate/v1/ablate.pb.h"

namespace ablate::worker {

// A WorkerService request made under a data-preparation claim: it names the data key and carries
// the claim token. DataPrepClaimRequest (a renewal), PreparedFileChunk (the header) and
// DataPrepPublishRequest (publish or abandon).
template <typename Request>
concept ClaimedRequest = requires(Request* request, const std::string& text) {
  request->set_key(text);
  request->set_claim_token(text);
};

class DataPrepClaim {
 public:
  // From a CLAIMED DataPrepClaimResponse to a request about `key`.
  DataPrepClaim(std::string key, const v1::DataPrepClaimResponse& claimed)
      : key_(std::move(key)),
        token_(claimed.claim_token()),
        expires_at_(claimed.claim_expires_at()) {}

  const std::string& key() const { return key_; }
  // Unix seconds, as granted: renewals move it on the server, which alone decides when it passed.
  // The worker uses it to pace its renewals.
  double expires_at() const { return expires_at_; }

  // Sets the request's key and claim_token to this claim's, whatever they were. Every request
  // made under the claim gets them here; the token leaves the claim no other way.
  template <ClaimedRequest Request>
  void Stamp(Request* request) const {
    request->set_key(key_);
    request->set_claim_token(token_);
  }

 private:
  std::string key_;
  std::string token_;  // DataPrepClaimResponse.claim_token: 256 random bits, hex
  double expires_at_;
};

}  // namespace ablate::worker
