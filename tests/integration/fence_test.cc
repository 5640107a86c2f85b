// The lease fence, written once as the SQL function lease_held (migrations/0018_lease_held.sql),
// as every fenced statement uses it: each is refused for a wrong attempt, a wrong token digest
// and a run no longer leased or running, accepted for the holder, and still finds its run by the
// primary key once PostgreSQL has inlined the function (a prepared statement's generic plan: the
// one the server runs). The RPC-level refusals are in trust_test and queue_test; this covers the
// statements the RPCs do not all reach (attempt_faulted, checkpoint_fence, report_logs, every
// wrong part for each) and the plans.
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util/sha256.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "server/store/pqxx_compat.h"
#include "server/store/statements.h"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

// One fenced statement: its name, its parameters after $1..$3 (run, attempt, token digest) as
// SQL literals, and whether a result says the fence let it through.
struct Fenced {
  server::sql::Name name;
  std::vector<std::string> rest;  // $4.. as text, in order
  std::function<bool(const pqxx::result&)> passed;
  bool batch = false;  // ingest_fence: $1..$3 are arrays of one element
};

bool AnyRow(const pqxx::result& r) { return !r.empty(); }

const std::vector<Fenced>& Statements() {
  static const std::vector<Fenced> kAll = {
      {"check_fence", {}, AnyRow},
      {"checkpoint_fence", {}, AnyRow},
      {"report_metrics_total_steps", {}, AnyRow},
      {"report_logs",
       {"{7}", "{1.5}", "{\"a line\"}"},
       [](const pqxx::result& r) { return r[0][0].as<int64_t>() == 1; }},
      {"complete", {"succeeded", "{}", "", "7", ""}, AnyRow},
      {"release", {"100"}, AnyRow},
      {"attempt_faulted", {"worker", "boom", "{}", "7", "3", "3", "60", "3600", "600"}, AnyRow},
      {"heartbeat_run", {}, [](const pqxx::result& r) { return r[0][3].as<bool>(); }},
      {"ingest_fence",
       {"{t}", "{1.0}", "{f}", "{0}", "{f}", "{0}", "{0}", "{\"{}\"}", "{0}", "{-1}", "{-1}",
        "{-1}"},
       AnyRow,
       true},
  };
  return kAll;
}

class FenceTest : public ServerFixture {
 protected:
  void SetUp() override {
    ServerFixture::SetUp();
    // Enough runs that a scan of the table costs more than the index: the plans below are the
    // ones a real queue gets.
    Submit(SweepYaml("fenced", 40, 50));
    const int64_t worker = Register("w");
    auto lease = Lease(worker);
    ASSERT_TRUE(lease.has_run());
    run_ = lease.spec().run_id();
    digest_ = Sha256Hex(lease.lease().token());
    pqxx::connection conn(url_);
    pqxx::nontransaction analyze(conn);
    analyze.exec("ANALYZE runs");
  }

  // `f`'s parameters for (run, attempt, digest), each as the text of its SQL literal.
  std::vector<std::string> Params(const Fenced& f, int64_t run, int attempt,
                                  const std::string& digest) const {
    std::vector<std::string> out;
    if (f.batch) {
      out = {absl::StrCat("{", run, "}"), absl::StrCat("{", attempt, "}"),
             absl::StrCat("{\"", digest, "\"}")};
    } else {
      out = {absl::StrCat(run), absl::StrCat(attempt), digest};
    }
    out.insert(out.end(), f.rest.begin(), f.rest.end());
    return out;
  }

  // Runs `f` in a transaction that is rolled back, after `setup` (SQL on run $1, or empty).
  bool Passes(const Fenced& f, int attempt, const std::string& digest,
              const std::string& setup = "") {
    pqxx::connection conn(url_);
    pqxx::work tx(conn);
    if (!setup.empty()) server::pg::ExecText(tx, setup, run_);
    std::string args;
    for (const std::string& p : Params(f, run_, attempt, digest)) {
      absl::StrAppend(&args, args.empty() ? "" : ", ", "'", tx.esc(p), "'");
    }
    tx.exec(absl::StrCat("PREPARE fenced AS ", std::string(f.name.text())));
    return f.passed(tx.exec(absl::StrCat("EXECUTE fenced(", args, ")")));
  }

  int64_t run_ = 0;
  std::string digest_;
};

TEST_F(FenceTest, EveryFencedStatementRefusesAllButTheHolder) {
  for (const Fenced& f : Statements()) {
    SCOPED_TRACE(f.name.name());
    EXPECT_TRUE(Passes(f, 1, digest_));
    EXPECT_TRUE(Passes(f, 1, digest_, "UPDATE runs SET state = 'running' WHERE id = $1"));
    EXPECT_FALSE(Passes(f, 2, digest_));                    // a stale or future attempt
    EXPECT_FALSE(Passes(f, 1, Sha256Hex("someone else")));  // another token
    EXPECT_FALSE(Passes(f, 1, ""));                         // none
    for (const char* state : {"queued", "succeeded", "failed", "cancelled", "skipped"}) {
      SCOPED_TRACE(state);
      EXPECT_FALSE(Passes(f, 1, digest_,
                          absl::StrCat("UPDATE runs SET state = '", state, "' WHERE id = $1")));
    }
  }
}

// Heartbeat tells the holder of a cancelled run to cancel and anyone else that the lease is lost:
// lease_holder without the state.
TEST_F(FenceTest, HeartbeatKnowsTheHolderOfACancelledRun) {
  const auto holder = [](const pqxx::result& r) { return r[0][2].as<bool>(); };
  const std::string cancel = "UPDATE runs SET state = 'cancelled' WHERE id = $1";
  EXPECT_TRUE(Passes({"heartbeat_run", {}, holder}, 1, digest_, cancel));
  EXPECT_FALSE(Passes({"heartbeat_run", {}, holder}, 2, digest_, cancel));
  EXPECT_FALSE(Passes({"heartbeat_run", {}, holder}, 1, "", cancel));
}

TEST_F(FenceTest, EveryFencedStatementFindsItsRunByThePrimaryKey) {
  for (const Fenced& f : Statements()) {
    SCOPED_TRACE(f.name.name());
    pqxx::connection conn(url_);
    pqxx::work tx(conn);
    // The server prepares each statement once per connection; the generic plan is the one it
    // settles on, and the one where an uninlined function would show.
    tx.exec("SET LOCAL plan_cache_mode = force_generic_plan");
    tx.exec(absl::StrCat("PREPARE fenced AS ", std::string(f.name.text())));
    std::string args;
    for (const std::string& p : Params(f, run_, 1, digest_)) {
      absl::StrAppend(&args, args.empty() ? "" : ", ", "'", tx.esc(p), "'");
    }
    std::string plan;
    for (const auto& row : tx.exec(absl::StrCat("EXPLAIN EXECUTE fenced(", args, ")"))) {
      absl::StrAppend(&plan, row[0].as<std::string>(), "\n");
    }
    // By runs_pkey, or, while few runs are held, by the partial index of held runs
    // (runs_held_by_sweep) that the inlined state condition makes usable: never a scan of runs.
    EXPECT_TRUE(plan.find("using runs_pkey on runs") != std::string::npos ||
                plan.find("using runs_held_by_sweep on runs") != std::string::npos)
        << plan;
    EXPECT_EQ(plan.find("Seq Scan on runs"), std::string::npos) << plan;
    EXPECT_EQ(plan.find("lease_held"), std::string::npos) << "not inlined:\n" << plan;
  }
}

}  // namespace
}  // namespace ablate::testing
