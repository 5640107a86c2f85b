// Data prepared once per fleet over real gRPC + PostgreSQL: one worker claims a data key, a
// second finds it being prepared and waits, the first uploads and publishes, the second
// downloads the same bytes; an expired claim is taken over and the old holder fenced off; an
// abandoned claim frees the key; sizes and inputs are checked.
#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util/sha256.h"
#include "pqxx/pqxx"
#include "server/store/pqxx_compat.h"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

using Resp = v1::DataPrepClaimResponse;

constexpr int64_t kCap = 1 << 20;

class PreparedTest : public ServerFixture {
 protected:
  void Configure(server::ServerOptions* o) override {
    o->max_prepared_bytes = kCap;
    o->prepare_claim_seconds = 60;
  }

  // `as`: the worker token calling (admin when empty).
  grpc::Status Claim(int64_t worker, const std::string& key, Resp* resp,
                     const std::string& token = "", const std::string& as = "") {
    v1::DataPrepClaimRequest req;
    req.set_worker_id(worker);
    req.set_key(key);
    req.set_description("vocab 4096 on test text");
    req.set_claim_token(token);
    return WorkerStub()->ClaimDataPrep(Ctx(as.empty() ? admin_ : as).get(), req, resp);
  }

  grpc::Status Put(const std::string& key, const std::string& token, const std::string& role,
                   const std::string& data, v1::PreparedFileRef* stored,
                   int64_t announced_size = -1, const std::string& as = "") {
    auto ctx = Ctx(as.empty() ? admin_ : as);
    auto writer = WorkerStub()->PutPreparedFile(ctx.get(), stored);
    v1::PreparedFileChunk header;
    header.set_key(key);
    header.set_claim_token(token);
    header.mutable_ref()->set_role(role);
    header.mutable_ref()->set_sha256(Sha256Hex(data));
    header.mutable_ref()->set_size_bytes(announced_size >= 0 ? announced_size
                                                             : static_cast<int64_t>(data.size()));
    writer->Write(header);
    for (size_t off = 0; off < data.size(); off += 65536) {
      v1::PreparedFileChunk c;
      c.set_data(data.substr(off, 65536));
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  grpc::Status Publish(const std::string& key, const std::string& token,
                       const std::vector<v1::PreparedFileRef>& files, bool abandon = false,
                       const std::string& as = "") {
    v1::DataPrepPublishRequest req;
    req.set_key(key);
    req.set_claim_token(token);
    req.set_abandon(abandon);
    for (const auto& f : files) *req.add_files() = f;
    v1::DataPrepPublishResponse resp;
    return WorkerStub()->PublishDataPrep(Ctx(as.empty() ? admin_ : as).get(), req, &resp);
  }

  grpc::Status Get(const std::string& sha, std::string* out, const std::string& as = "") {
    auto ctx = Ctx(as.empty() ? admin_ : as);
    v1::PreparedFileRequest req;
    req.set_sha256(sha);
    auto reader = WorkerStub()->GetPreparedFile(ctx.get(), req);
    v1::DataChunk chunk;
    out->clear();
    while (reader->Read(&chunk)) *out += chunk.data();
    return reader->Finish();
  }

  int64_t RegisterAs(const std::string& token, const std::string& name) {
    v1::RegisterRequest req;
    req.mutable_info()->set_name(name);
    req.mutable_info()->set_device_kind("cpu");
    v1::RegisterResponse resp;
    auto s = WorkerStub()->Register(Ctx(token).get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.worker_id();
  }

  void ExpireClaim(const std::string& key) {
    pqxx::connection conn(url_);
    pqxx::work tx(conn);
    server::pg::ExecText(tx,
                         "UPDATE prepared_data SET claim_expires_at = now() - interval '1 second' "
                         "WHERE key = $1",
                         key);
    tx.commit();
  }

  // A prepared data set: what a worker's cache would hold.
  std::map<std::string, std::string> Files() {
    return {{"tokenizer_model", std::string(5000, 'm') + "model"},
            {"tokenizer_vocab", "<unk>\t0\n<s>\t0\n</s>\t0\n"},
            {"tokens_train", std::string(300000, '\x01') + "train"},
            {"tokens_val", std::string(70000, '\x02') + "val"}};
  }
};

TEST_F(PreparedTest, OneClaimsTheOtherWaitsThenDownloads) {
  const int64_t w1 = Register("prep-1");
  const int64_t w2 = Register("prep-2");
  const std::string key = Sha256Hex("data key 1");

  Resp first;
  ASSERT_TRUE(Claim(w1, key, &first).ok());
  ASSERT_EQ(first.state(), Resp::CLAIMED);
  ASSERT_EQ(first.claim_token().size(), 64u);

  Resp second;
  ASSERT_TRUE(Claim(w2, key, &second).ok());
  EXPECT_EQ(second.state(), Resp::PREPARING);
  EXPECT_EQ(second.preparer(), "prep-1");
  EXPECT_GT(second.claim_expires_at(), 0);
  EXPECT_TRUE(second.claim_token().empty());

  // The second worker waits as a worker does: asks again until the key is ready, then downloads.
  std::map<std::string, std::string> downloaded;
  int preparing_answers = 0;
  std::thread waiter([&] {
    for (int i = 0; i < 600; ++i) {
      Resp r;
      auto s = Claim(w2, key, &r);
      ASSERT_TRUE(s.ok()) << s.error_message();
      ASSERT_NE(r.state(), Resp::CLAIMED) << "the waiting worker must never prepare";
      if (r.state() == Resp::READY) {
        for (const auto& f : r.files()) {
          std::string data;
          auto g = Get(f.sha256(), &data);
          ASSERT_TRUE(g.ok()) << g.error_message();
          downloaded[f.role()] = data;
        }
        return;
      }
      ++preparing_answers;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  // The preparer renews its claim (same token) while it works.
  Resp renewed;
  ASSERT_TRUE(Claim(w1, key, &renewed, first.claim_token()).ok());
  EXPECT_EQ(renewed.state(), Resp::CLAIMED);
  EXPECT_EQ(renewed.claim_token(), first.claim_token());
  EXPECT_GE(renewed.claim_expires_at(), first.claim_expires_at());

  std::vector<v1::PreparedFileRef> refs;
  for (const auto& [role, data] : Files()) {
    v1::PreparedFileRef stored;
    auto s = Put(key, first.claim_token(), role, data, &stored);
    ASSERT_TRUE(s.ok()) << role << ": " << s.error_message();
    EXPECT_EQ(stored.sha256(), Sha256Hex(data));
    refs.push_back(stored);
  }
  // Not ready until published: the waiter is still waiting.
  std::string data;
  EXPECT_EQ(Get(refs[0].sha256(), &data).error_code(), grpc::StatusCode::NOT_FOUND);
  auto p = Publish(key, first.claim_token(), refs);
  ASSERT_TRUE(p.ok()) << p.error_message();
  waiter.join();
  EXPECT_GT(preparing_answers, 0);
  EXPECT_EQ(downloaded, Files());

  // A repeated publish (reply lost) is accepted; a third worker gets READY at once.
  EXPECT_TRUE(Publish(key, first.claim_token(), refs).ok());
  Resp third;
  ASSERT_TRUE(Claim(Register("prep-3"), key, &third).ok());
  EXPECT_EQ(third.state(), Resp::READY);
  EXPECT_EQ(third.files_size(), 4);
}

TEST_F(PreparedTest, ExpiredClaimIsTakenOverAndTheOldHolderFenced) {
  const int64_t w1 = Register("dead-preparer");
  const int64_t w2 = Register("next-preparer");
  const std::string key = Sha256Hex("data key 2");
  Resp first;
  ASSERT_TRUE(Claim(w1, key, &first).ok());
  ASSERT_EQ(first.state(), Resp::CLAIMED);
  ExpireClaim(key);
  Resp second;
  ASSERT_TRUE(Claim(w2, key, &second).ok());
  ASSERT_EQ(second.state(), Resp::CLAIMED);
  EXPECT_NE(second.claim_token(), first.claim_token());

  // The first holder can neither renew, upload nor publish any more.
  Resp r;
  auto renew = Claim(w1, key, &r, first.claim_token());
  EXPECT_EQ(renew.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(renew.error_message().find("claim lost"), std::string::npos);
  v1::PreparedFileRef stored;
  EXPECT_EQ(Put(key, first.claim_token(), "tokens_train", "x", &stored).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  // The new holder can upload; the old one cannot publish even a complete set.
  std::vector<v1::PreparedFileRef> refs;
  for (const auto& [role, data] : Files()) {
    ASSERT_TRUE(Put(key, second.claim_token(), role, data, &stored).ok());
    refs.push_back(stored);
  }
  auto stale = Publish(key, first.claim_token(), refs);
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(stale.error_message().find("claim lost"), std::string::npos);
  EXPECT_TRUE(Publish(key, second.claim_token(), refs).ok());
}

TEST_F(PreparedTest, AbandonedClaimFreesTheKey) {
  const int64_t w1 = Register("failing-preparer");
  const int64_t w2 = Register("other");
  const std::string key = Sha256Hex("data key 3");
  Resp first;
  ASSERT_TRUE(Claim(w1, key, &first).ok());
  ASSERT_TRUE(Publish(key, first.claim_token(), {}, /*abandon=*/true).ok());
  Resp second;
  ASSERT_TRUE(Claim(w2, key, &second).ok());
  EXPECT_EQ(second.state(), Resp::CLAIMED);
}

// Every call under a claim goes through the server's one claim check: a wrong token is refused
// by each, with the same words; a claim that expired with nobody taking it over may still be
// renewed, published or abandoned, but not upload (it stops sending bytes at once).
TEST_F(PreparedTest, EveryCallUnderAClaimChecksItsToken) {
  const int64_t w1 = Register("slow-preparer");
  const std::string key = Sha256Hex("data key fenced");
  Resp claim;
  ASSERT_TRUE(Claim(w1, key, &claim).ok());
  ASSERT_EQ(claim.state(), Resp::CLAIMED);
  const std::string wrong = Sha256Hex("a guessed claim token");
  auto lost = [](const grpc::Status& s) {
    return s.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
           s.error_message().find("claim lost") != std::string::npos;
  };
  Resp r;
  v1::PreparedFileRef stored;
  EXPECT_TRUE(lost(Claim(w1, key, &r, wrong)));
  EXPECT_TRUE(lost(Put(key, wrong, "tokens_train", "x", &stored)));
  EXPECT_TRUE(lost(Publish(key, wrong, {}, /*abandon=*/true)));
  // The right token on another key is as wrong.
  EXPECT_TRUE(
      lost(Put(Sha256Hex("another key"), claim.claim_token(), "tokens_train", "x", &stored)));

  std::vector<v1::PreparedFileRef> refs;
  for (const auto& [role, data] : Files()) {
    ASSERT_TRUE(Put(key, claim.claim_token(), role, data, &stored).ok());
    refs.push_back(stored);
  }
  EXPECT_TRUE(lost(Publish(key, wrong, refs)));
  ExpireClaim(key);
  EXPECT_TRUE(lost(Put(key, claim.claim_token(), "tokens_train", "late", &stored)));
  ASSERT_TRUE(Claim(w1, key, &r, claim.claim_token()).ok());  // renewed: live again
  EXPECT_EQ(r.state(), Resp::CLAIMED);
  EXPECT_GE(r.claim_expires_at(), claim.claim_expires_at());
  ExpireClaim(key);
  EXPECT_TRUE(lost(Publish(key, wrong, refs)));
  ASSERT_TRUE(Publish(key, claim.claim_token(), refs).ok());
  EXPECT_TRUE(Publish(key, claim.claim_token(), refs).ok());  // a retried publish
  // Published: the token no longer holds a claim to renew, upload under or abandon.
  ASSERT_TRUE(Claim(w1, key, &r, claim.claim_token()).ok());
  EXPECT_EQ(r.state(), Resp::READY);  // a renewer asking now learns the files are out
  EXPECT_TRUE(lost(Put(key, claim.claim_token(), "tokens_train", "x", &stored)));
  EXPECT_TRUE(lost(Publish(key, claim.claim_token(), {}, /*abandon=*/true)));
}

TEST_F(PreparedTest, InputsAndSizesAreChecked) {
  const int64_t w1 = Register("checked");
  Resp r;
  {
    // WorkerService: a user token may not claim, upload or download.
    v1::DataPrepClaimRequest req;
    req.set_worker_id(w1);
    req.set_key(Sha256Hex("k"));
    auto s = WorkerStub()->ClaimDataPrep(Ctx(Token(server::Role::kUser, "u")).get(), req, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  auto bad = Claim(w1, "not-a-key", &r);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("key must be 64 lower-case hex digits"), std::string::npos);
  auto unregistered = Claim(987654, Sha256Hex("k"), &r);
  EXPECT_EQ(unregistered.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(unregistered.error_message().find("worker_id 987654 is not registered"),
            std::string::npos);

  const std::string key = Sha256Hex("data key 4");
  Resp claim;
  ASSERT_TRUE(Claim(w1, key, &claim).ok());
  v1::PreparedFileRef stored;
  // Over the cap, announced honestly or not: refused while streaming.
  const std::string big(kCap + 1, 'b');
  auto over = Put(key, claim.claim_token(), "tokens_train", big, &stored);
  EXPECT_EQ(over.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(over.error_message().find("--max-prepared-bytes"), std::string::npos);
  auto lying = Put(key, claim.claim_token(), "tokens_train", big, &stored, 10);
  EXPECT_EQ(lying.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(lying.error_message().find("--max-prepared-bytes"), std::string::npos);
  // Publishing needs the required roles, each uploaded with its size.
  std::vector<v1::PreparedFileRef> refs;
  for (const auto& [role, data] : Files()) {
    if (role == "tokenizer_vocab") continue;
    ASSERT_TRUE(Put(key, claim.claim_token(), role, data, &stored).ok());
    refs.push_back(stored);
  }
  auto missing = Publish(key, claim.claim_token(), refs);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(missing.error_message().find("no file with role \"tokenizer_vocab\""),
            std::string::npos);
  v1::PreparedFileRef ghost;
  ghost.set_role("tokenizer_vocab");
  ghost.set_sha256(Sha256Hex("never uploaded"));
  ghost.set_size_bytes(14);
  refs.push_back(ghost);
  auto not_uploaded = Publish(key, claim.claim_token(), refs);
  EXPECT_EQ(not_uploaded.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(not_uploaded.error_message().find("was not uploaded"), std::string::npos);
  // Only published files are served: an uploaded but unpublished blob is not.
  std::string data;
  EXPECT_EQ(Get(refs[0].sha256(), &data).error_code(), grpc::StatusCode::NOT_FOUND);
}

// A published data set is served to every worker token, so it may name only files its own claim
// uploaded: not a hash that is in the store as another run's checkpoint (which only that run's
// lease may read through GetCheckpoint).
TEST_F(PreparedTest, APublishedDataSetCannotNameAnotherRunsCheckpoint) {
  const std::string owner = Token(server::Role::kWorker, "owner");
  const std::string thief = Token(server::Role::kWorker, "thief");
  Submit(SweepYaml("secret", 1, 1));
  const int64_t a = RegisterAs(owner, "owner-1");
  auto lease = Lease(a, 0, 0, owner);
  ASSERT_TRUE(lease.has_run());
  const std::string checkpoint = std::string(4000, 'c') + "the owner's weights";
  {
    v1::PutCheckpointResponse stored;
    auto ctx = Ctx(owner);
    auto writer = WorkerStub()->PutCheckpoint(ctx.get(), &stored);
    v1::CheckpointChunk header;
    header.set_run_id(lease.spec().run_id());
    header.set_attempt(lease.lease().attempt());
    header.set_lease_token(lease.lease().token());
    header.mutable_ref()->set_step(10);
    header.mutable_ref()->set_sha256(Sha256Hex(checkpoint));
    header.mutable_ref()->set_size_bytes(static_cast<int64_t>(checkpoint.size()));
    header.set_data(checkpoint);
    writer->Write(header);
    writer->WritesDone();
    ASSERT_TRUE(writer->Finish().ok());
  }

  const int64_t b = RegisterAs(thief, "thief-1");
  const std::string key = Sha256Hex("a fresh key");
  Resp claim;
  ASSERT_TRUE(Claim(b, key, &claim, "", thief).ok());
  ASSERT_EQ(claim.state(), Resp::CLAIMED);
  std::vector<v1::PreparedFileRef> refs;
  for (const auto& [role, data] : Files()) {
    if (role == "tokens_train" || role == "tokens_val") continue;
    v1::PreparedFileRef stored;
    ASSERT_TRUE(Put(key, claim.claim_token(), role, data, &stored, -1, thief).ok());
    refs.push_back(stored);
  }
  v1::PreparedFileRef stolen;
  stolen.set_role("tokens_train");
  stolen.set_sha256(Sha256Hex(checkpoint));
  stolen.set_size_bytes(static_cast<int64_t>(checkpoint.size()));
  refs.push_back(stolen);
  auto published = Publish(key, claim.claim_token(), refs, false, thief);
  EXPECT_EQ(published.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(published.error_message().find("was not uploaded under this claim"), std::string::npos)
      << published.error_message();
  std::string bytes;
  EXPECT_EQ(Get(Sha256Hex(checkpoint), &bytes, thief).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(bytes, "");

  // Files uploaded under another (expired, taken-over) claim on the same key do not count
  // either: the new claim publishes only what it uploaded itself.
  ExpireClaim(key);
  Resp taken;
  ASSERT_TRUE(Claim(a, key, &taken, "", owner).ok());
  ASSERT_EQ(taken.state(), Resp::CLAIMED);
  refs.pop_back();
  v1::PreparedFileRef train;
  ASSERT_TRUE(
      Put(key, taken.claim_token(), "tokens_train", Files()["tokens_train"], &train, -1, owner)
          .ok());
  auto reused = Publish(key, taken.claim_token(), {refs[0], refs[1], train}, false, owner);
  EXPECT_EQ(reused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(reused.error_message().find("was not uploaded under this claim"), std::string::npos);
}

// Every call that names a worker id is refused unless the id is the caller's: a claim in
// another worker's name would be recorded as that worker's, and every other worker told so.
TEST_F(PreparedTest, NoCallActsInAnotherWorkersName) {
  const std::string mine = Token(server::Role::kWorker, "mine");
  const std::string theirs = Token(server::Role::kWorker, "theirs");
  const int64_t victim = RegisterAs(theirs, "victim");
  RegisterAs(mine, "impostor");
  const std::string key = Sha256Hex("impersonated key");
  Resp r;
  auto claim = Claim(victim, key, &r, "", mine);
  EXPECT_EQ(claim.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(claim.error_message().find("is not registered with this token"), std::string::npos)
      << claim.error_message();
  {
    pqxx::connection conn(url_);
    pqxx::work tx(conn);
    EXPECT_TRUE(
        server::pg::ExecText(tx, "SELECT 1 FROM prepared_data WHERE key = $1", key).empty());
  }
  Submit(SweepYaml("named", 1, 1));
  v1::LeaseRequest lr;
  lr.set_worker_id(victim);
  v1::LeaseResponse lease;
  auto leased = WorkerStub()->Lease(Ctx(mine).get(), lr, &lease);
  EXPECT_EQ(leased.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_FALSE(lease.has_run());
  v1::HeartbeatRequest hb;
  hb.set_worker_id(victim);
  v1::HeartbeatResponse hr;
  EXPECT_EQ(WorkerStub()->Heartbeat(Ctx(mine).get(), hb, &hr).error_code(),
            grpc::StatusCode::NOT_FOUND);
  v1::CliDeregisterRequest dr;
  dr.set_worker_id(victim);
  v1::CliDeregisterResponse dresp;
  EXPECT_EQ(WorkerStub()->Deregister(Ctx(mine).get(), dr, &dresp).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // The owner's own calls still work.
  EXPECT_TRUE(Claim(victim, key, &r, "", theirs).ok());
  EXPECT_EQ(r.state(), Resp::CLAIMED);
  EXPECT_TRUE(WorkerStub()->Lease(Ctx(theirs).get(), lr, &lease).ok());
  EXPECT_TRUE(lease.has_run());
}

// A worker holds at most kMaxOpenDataClaims (4) live claims, and a claim uploads at most 16
// distinct files; `ablate workers` (ListWorkers) shows the claims a worker holds.
TEST_F(PreparedTest, OpenClaimsAndUploadsPerClaimAreCapped) {
  const int64_t w = Register("greedy");
  std::vector<std::string> tokens;
  for (int i = 0; i < 4; ++i) {
    Resp r;
    ASSERT_TRUE(Claim(w, Sha256Hex(absl::StrCat("greedy key ", i)), &r).ok());
    ASSERT_EQ(r.state(), Resp::CLAIMED);
    tokens.push_back(r.claim_token());
  }
  Resp fifth;
  auto refused = Claim(w, Sha256Hex("greedy key 4"), &fifth);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("already holds 4 open data-preparation claims"),
            std::string::npos)
      << refused.error_message();
  // Renewing a claim it holds is not a new claim.
  Resp renewed;
  EXPECT_TRUE(Claim(w, Sha256Hex("greedy key 0"), &renewed, tokens[0]).ok());
  {
    v1::ListWorkersRequest req;
    v1::ListWorkersResponse resp;
    ASSERT_TRUE(SweepStub()->ListWorkers(Ctx().get(), req, &resp).ok());
    ASSERT_EQ(resp.workers_size(), 1);
    EXPECT_EQ(resp.workers(0).open_data_claims(), 4);
  }
  // Abandoning one frees a place.
  ASSERT_TRUE(Publish(Sha256Hex("greedy key 3"), tokens[3], {}, true).ok());
  EXPECT_TRUE(Claim(w, Sha256Hex("greedy key 4"), &fifth).ok());
  EXPECT_EQ(fifth.state(), Resp::CLAIMED);

  // Uploads: 16 distinct files under one claim, then refused; re-uploading one is not new.
  v1::PreparedFileRef stored;
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(
        Put(Sha256Hex("greedy key 0"), tokens[0], "tokens_train", absl::StrCat("file ", i), &stored)
            .ok())
        << i;
  }
  auto seventeenth = Put(Sha256Hex("greedy key 0"), tokens[0], "tokens_train", "file 16", &stored);
  EXPECT_EQ(seventeenth.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(seventeenth.error_message().find("already uploaded 16 files"), std::string::npos)
      << seventeenth.error_message();
  EXPECT_TRUE(Put(Sha256Hex("greedy key 0"), tokens[0], "tokens_train", "file 3", &stored).ok());
}

// Claims sent at once by one worker cannot pass the cap together: each is counted after the
// others committed (the worker's row is locked while a claim is decided).
TEST_F(PreparedTest, ConcurrentClaimsDoNotPassTheCap) {
  const int64_t w = Register("eager");
  Resp first;
  ASSERT_TRUE(Claim(w, Sha256Hex("eager key held"), &first).ok());
  constexpr int kClaims = 8;
  std::vector<grpc::StatusCode> codes(kClaims);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClaims; ++i) {
    threads.emplace_back([&, i] {
      Resp r;
      codes[i] = Claim(w, Sha256Hex(absl::StrCat("eager key ", i)), &r).error_code();
    });
  }
  for (auto& t : threads) t.join();
  int granted = 0;
  for (const auto code : codes) {
    if (code == grpc::StatusCode::OK) {
      ++granted;
    } else {
      EXPECT_EQ(code, grpc::StatusCode::RESOURCE_EXHAUSTED);
    }
  }
  EXPECT_EQ(granted, 3);  // the cap is 4 and one was held
  v1::ListWorkersRequest req;
  v1::ListWorkersResponse resp;
  ASSERT_TRUE(SweepStub()->ListWorkers(Ctx().get(), req, &resp).ok());
  ASSERT_EQ(resp.workers_size(), 1);
  EXPECT_EQ(resp.workers(0).open_data_claims(), 4);
}

}  // namespace
}  // namespace ablate::testing
