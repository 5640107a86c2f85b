#include "worker/data_prep_claim.h"

#include <gtest/gtest.h>

#include <string>

namespace ablate::worker {
namespace {

// Every request made under a data-preparation claim stamps it; the server's FenceClaim checks
// what the stamp puts there.
static_assert(ClaimedRequest<v1::DataPrepClaimRequest>);
static_assert(ClaimedRequest<v1::PreparedFileChunk>);
static_assert(ClaimedRequest<v1::DataPrepPublishRequest>);
// A request without both fields cannot be stamped (a run's fenced request is not a claim's).
static_assert(!ClaimedRequest<v1::ReleaseRequest>);
static_assert(!ClaimedRequest<v1::PreparedFileRequest>);

const std::string kKey(64, 'a');
const std::string kToken(64, 'b');

DataPrepClaim Claimed() {
  v1::DataPrepClaimResponse r;
  r.set_state(v1::DataPrepClaimResponse::CLAIMED);
  r.set_claim_token(kToken);
  r.set_claim_expires_at(1234.5);
  return DataPrepClaim(kKey, r);
}

// A request someone half-filled with another claim's key and token: the stamp must win.
template <typename Request>
void ExpectStampedOver(Request request) {
  request.set_key(std::string(64, 'c'));
  request.set_claim_token(std::string(64, 'd'));
  Claimed().Stamp(&request);
  EXPECT_EQ(request.key(), kKey);
  EXPECT_EQ(request.claim_token(), kToken);
}

TEST(DataPrepClaim, KeepsTheKeyTokenAndExpiryItWasGranted) {
  const DataPrepClaim claim = Claimed();
  EXPECT_EQ(claim.key(), kKey);
  EXPECT_EQ(claim.expires_at(), 1234.5);
}

TEST(DataPrepClaim, StampsEveryRequestMadeUnderIt) {
  v1::DataPrepClaimRequest renew;
  renew.set_worker_id(7);
  ExpectStampedOver(renew);
  v1::PreparedFileChunk header;
  header.mutable_ref()->set_role("tokens_train");
  ExpectStampedOver(header);
  ExpectStampedOver(v1::DataPrepPublishRequest{});
}

TEST(DataPrepClaim, StampLeavesTheRestOfTheRequestAlone) {
  v1::DataPrepPublishRequest publish;
  publish.set_abandon(true);
  publish.add_files()->set_role("tokenizer_model");
  Claimed().Stamp(&publish);
  EXPECT_TRUE(publish.abandon());
  ASSERT_EQ(publish.files_size(), 1);
  EXPECT_EQ(publish.files(0).role(), "tokenizer_model");
  v1::DataPrepClaimRequest renew;
  renew.set_worker_id(7);
  renew.set_description("vocab 4096");
  Claimed().Stamp(&renew);
  EXPECT_EQ(renew.worker_id(), 7);
  EXPECT_EQ(renew.description(), "vocab 4096");
}

}  // namespace
}  // namespace ablate::worker
