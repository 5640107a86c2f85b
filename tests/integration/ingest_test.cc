// Metric ingest (server/store/ingest_store.h): concurrent ReportMetrics calls share batches (one
// fence, one binary COPY, one commit), and still each point is stored exactly once per
// (run, name, step), a re-sent report replaces its own points, and a refused request in a batch
// leaves the others stored.
#include <atomic>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "pqxx/pqxx"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

class IngestTest : public ServerFixture {
 protected:
  // Leases `runs` runs of a fresh sweep, each to a worker of its own.
  std::vector<v1::LeaseResponse> LeaseRuns(int runs) {
    Submit(SweepYaml("ingest", runs, 1));
    std::vector<v1::LeaseResponse> out;
    for (int i = 0; i < runs; ++i) {
      const int64_t worker = Register(absl::StrCat("w", i));
      out.push_back(Lease(worker));
      EXPECT_TRUE(out.back().has_run());
    }
    return out;
  }

  v1::ReportMetricsRequest Report(const v1::LeaseResponse& lease, int64_t first_step, int steps,
                                  double value) {
    v1::ReportMetricsRequest req;
    req.set_run_id(lease.lease().run_id());
    req.set_attempt(lease.lease().attempt());
    req.set_lease_token(lease.lease().token());
    for (int64_t s = first_step; s < first_step + steps; ++s) {
      for (const char* name : {"train_loss", "lr", "grad_norm"}) {
        auto* p = req.add_points();
        p->set_step(s);
        p->set_name(name);
        p->set_value(value + s);
        p->set_time(1.7e9 + s);
      }
    }
    return req;
  }

  grpc::Status Send(const v1::ReportMetricsRequest& req, int* accepted = nullptr) {
    v1::ReportMetricsResponse resp;
    grpc::Status s = WorkerStub()->ReportMetrics(Ctx().get(), req, &resp);
    if (accepted != nullptr) *accepted = resp.accepted();
    return s;
  }

  int64_t Count(const std::string& where) {
    pqxx::connection c(url_);
    pqxx::work tx(c);
    return tx.exec("SELECT count(*) FROM metric_points WHERE " + where)[0][0].as<int64_t>();
  }
};

TEST_F(IngestTest, ConcurrentReportsOfManyRunsAreEachStoredOnceInOrder) {
  constexpr int kRuns = 8, kBatches = 10, kSteps = 10;  // steps 0..99 of 100
  const auto leases = LeaseRuns(kRuns);
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (const auto& lease : leases) {
    threads.emplace_back([&, lease] {
      for (int b = 0; b < kBatches; ++b) {
        int accepted = 0;
        if (!Send(Report(lease, b * kSteps, kSteps, 0.5), &accepted).ok() ||
            accepted != kSteps * 3) {
          ++failed;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  for (const auto& lease : leases) {
    const int64_t run = lease.lease().run_id();
    EXPECT_EQ(Count(absl::StrCat("run_id = ", run)), kBatches * kSteps * 3);
    const auto points = Points(run);
    std::set<std::pair<std::string, int64_t>> keys;
    for (const auto& p : points) {
      EXPECT_TRUE(keys.insert({p.name(), p.step()}).second) << p.name() << " " << p.step();
      EXPECT_DOUBLE_EQ(p.value(), 0.5 + p.step());
    }
    EXPECT_EQ(keys.size(), static_cast<size_t>(kBatches * kSteps * 3));
  }
  // The latest losses are the newest step's, whichever batch carried it.
  const auto sweep = GetSweep(leases[0].spec().sweep_id());
  for (const auto& run : sweep.runs()) {
    EXPECT_DOUBLE_EQ(run.latest_train_loss(), 0.5 + kBatches * kSteps - 1) << run.id();
  }
}

TEST_F(IngestTest, AReSentReportReplacesItsOwnPointsInsteadOfDuplicatingThem) {
  const auto leases = LeaseRuns(1);
  const int64_t run = leases[0].lease().run_id();
  int accepted = 0;
  ASSERT_TRUE(Send(Report(leases[0], 0, 10, 1.0), &accepted).ok());
  EXPECT_EQ(accepted, 30);
  // The same steps again (a worker retrying after a lost answer), new values, and new steps
  // beside them: the COPY meets stored points and the batch is upserted instead.
  ASSERT_TRUE(Send(Report(leases[0], 5, 10, 2.0), &accepted).ok());
  EXPECT_EQ(accepted, 30);
  EXPECT_EQ(Count(absl::StrCat("run_id = ", run)), 45);
  for (const auto& p : Points(run)) {
    EXPECT_DOUBLE_EQ(p.value(), (p.step() < 5 ? 1.0 : 2.0) + p.step()) << p.step();
  }
  // A report that repeats a key within itself keeps its last value.
  v1::ReportMetricsRequest twice = Report(leases[0], 20, 1, 3.0);
  *twice.add_points() = twice.points(0);
  twice.mutable_points(3)->set_value(7.0);
  ASSERT_TRUE(Send(twice, &accepted).ok());
  EXPECT_EQ(accepted, 3);
  EXPECT_EQ(Count(absl::StrCat("run_id = ", run, " AND step = 20 AND value = 7")), 1);
}

TEST_F(IngestTest, ARefusedReportLeavesTheOthersStoredAndSaysWhy) {
  const auto leases = LeaseRuns(4);
  v1::LeaseResponse stale = leases[1];
  stale.mutable_lease()->set_token("not-the-token");
  std::vector<std::thread> threads;
  std::vector<grpc::Status> status(8);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 4; ++i) {
      const int slot = round * 4 + i;
      threads.emplace_back([&, i, slot] {
        if (i == 1) {
          status[slot] = Send(Report(stale, 0, 5, 1.0));
        } else if (i == 2) {
          status[slot] = Send(Report(leases[i], 1000000, 1, 1.0));  // past the last step
        } else {
          status[slot] = Send(Report(leases[i], slot * 5, 5, 1.0));
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  for (int slot = 0; slot < 8; ++slot) {
    const int i = slot % 4;
    if (i == 1) {
      EXPECT_EQ(status[slot].error_code(), grpc::StatusCode::FAILED_PRECONDITION);
      EXPECT_NE(status[slot].error_message().find("lease lost"), std::string::npos);
    } else if (i == 2) {
      EXPECT_EQ(status[slot].error_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_NE(status[slot].error_message().find("beyond the run's last step"), std::string::npos)
          << status[slot].error_message();
    } else {
      EXPECT_TRUE(status[slot].ok()) << status[slot].error_message();
    }
  }
  EXPECT_EQ(Count(absl::StrCat("run_id = ", leases[0].lease().run_id())), 30);
  EXPECT_EQ(Count(absl::StrCat("run_id = ", leases[3].lease().run_id())), 30);
  EXPECT_EQ(Count(absl::StrCat("run_id IN (", leases[1].lease().run_id(), ", ",
                               leases[2].lease().run_id(), ")")),
            0);
}

// metric_points and run_specs have no foreign key to runs, nor runs to sweeps (migrations 0010,
// 0015): statement-level triggers delete what the keys' cascades did.
TEST_F(IngestTest, DeletingRunsTakesTheirPointsWithoutAForeignKey) {
  const auto leases = LeaseRuns(2);
  ASSERT_TRUE(Send(Report(leases[0], 0, 4, 1.0)).ok());
  ASSERT_TRUE(Send(Report(leases[1], 0, 4, 1.0)).ok());
  const int64_t gone = leases[0].lease().run_id(), kept = leases[1].lease().run_id();
  auto rows = [&](const std::string& sql) {
    pqxx::connection c(url_);
    pqxx::work tx(c);
    return tx.exec(sql)[0][0].as<int64_t>();
  };
  {
    pqxx::connection c(url_);
    pqxx::work tx(c);
    tx.exec("DELETE FROM runs WHERE id = " + std::to_string(gone));
    tx.commit();
  }
  EXPECT_EQ(Count(absl::StrCat("run_id = ", gone)), 0);
  EXPECT_EQ(Count(absl::StrCat("run_id = ", kept)), 12);
  EXPECT_EQ(rows(absl::StrCat("SELECT count(*) FROM run_specs WHERE run_id = ", gone)), 0);
  EXPECT_EQ(rows(absl::StrCat("SELECT count(*) FROM run_specs WHERE run_id = ", kept)), 1);
  // Deleting the sweep takes its other runs, with their specs and points, and its base spec.
  {
    pqxx::connection c(url_);
    pqxx::work tx(c);
    tx.exec("DELETE FROM sweeps");
    tx.commit();
  }
  for (const char* table : {"runs", "run_specs", "run_spec_base", "metric_points"}) {
    EXPECT_EQ(rows(absl::StrCat("SELECT count(*) FROM ", table)), 0) << table;
  }
}

}  // namespace
}  // namespace ablate::testing
