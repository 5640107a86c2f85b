// Hostile and oversized input: SQL metacharacters in every string field round-trip unchanged
// (all SQL is parameterised), oversized grids and messages are refused with a clear error, and
// data paths are confined to --data-dir.
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/util/sha256.h"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

const std::string kEvil = "x'; DROP TABLE runs; -- \"q\" \\ {a,b} $1 NULL \t ü €";
// Worker and metric names are printable ASCII (util::CheckName): the hostile part without the
// tab and the non-ASCII characters.
const std::string kEvilName = "x'; DROP TABLE runs; -- \"q\" \\ {a,b} $1 NULL";

class InputTest : public ServerFixture {
 protected:
  void Configure(server::ServerOptions* o) override {
    o->max_grid = 10;
    o->max_message_bytes = 1 << 20;
    o->max_spec_bytes = 256 << 10;
    o->max_points_per_report = 1000;
    data_dir_ = (std::filesystem::temp_directory_path() /
                 absl::StrCat("ablate-data-", getpid(), "-", std::rand()))
                    .string();
    std::filesystem::create_directories(data_dir_);
    o->data_dir = data_dir_;
  }
  void TearDown() override {
    ServerFixture::TearDown();
    std::error_code ec;
    std::filesystem::remove_all(data_dir_, ec);
  }
  grpc::Status TrySubmit(const std::string& yaml, v1::SubmitSweepResponse* resp = nullptr) {
    v1::SubmitSweepRequest req;
    req.set_spec_yaml(yaml);
    req.set_file_name("big.yaml");
    v1::SubmitSweepResponse ignored;
    return SweepStub()->SubmitSweep(Ctx().get(), req, resp ? resp : &ignored);
  }
  std::string data_dir_;
};

TEST_F(InputTest, SqlMetacharactersRoundTripInEveryStringField) {
  // A data file whose name is hostile too.
  const std::string file = "it's \"data\" {1,2}.txt";
  const std::string contents = "Once upon a time " + kEvil;
  std::ofstream(std::filesystem::path(data_dir_) / file) << contents;
  std::string yaml = SweepYaml("meta", 1, 1);
  yaml.replace(yaml.find("\"synthetic:50\""), 14, "'it''s \"data\" {1,2}.txt'");
  yaml += "# " + kEvil + "\n";
  v1::SubmitSweepRequest req;
  req.set_spec_yaml(yaml);
  req.set_file_name(kEvil);
  v1::SubmitSweepResponse sub;
  auto s = SweepStub()->SubmitSweep(Ctx().get(), req, &sub);
  ASSERT_TRUE(s.ok()) << s.error_message();
  auto got = GetSweep(sub.sweep().id());
  EXPECT_EQ(got.sweep().spec_yaml(), yaml);
  EXPECT_EQ(got.sweep().file_name(), kEvil);

  v1::RegisterRequest reg;
  reg.mutable_info()->set_name(kEvilName);
  reg.mutable_info()->set_device_kind("cpu");
  reg.mutable_info()->set_hostname(kEvil);
  v1::RegisterResponse worker;
  ASSERT_TRUE(WorkerStub()->Register(Ctx().get(), reg, &worker).ok());
  auto lease = Lease(worker.worker_id());
  ASSERT_TRUE(lease.has_run());
  const int64_t run = lease.spec().run_id();
  EXPECT_EQ(lease.spec().data().train(), file);
  EXPECT_EQ(lease.spec().data().train_sha256(), Sha256Hex(contents));

  // The worker fetches the data set by hash and gets the same bytes.
  v1::GetDatasetRequest ds;
  ds.set_sha256(lease.spec().data().train_sha256());
  auto ctx = Ctx();
  auto reader = WorkerStub()->GetDataset(ctx.get(), ds);
  std::string fetched;
  v1::DataChunk chunk;
  int64_t total = -1;
  while (reader->Read(&chunk)) {
    if (total < 0) total = chunk.total_bytes();
    fetched += chunk.data();
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(fetched, contents);
  EXPECT_EQ(total, static_cast<int64_t>(contents.size()));

  v1::ReportMetricsRequest rep;
  rep.set_run_id(run);
  rep.set_attempt(1);
  rep.set_lease_token(lease.lease().token());
  auto* p = rep.add_points();
  p->set_name(kEvilName);
  p->set_step(3);
  p->set_value(std::numeric_limits<double>::infinity());
  v1::ReportMetricsResponse accepted;
  ASSERT_TRUE(WorkerStub()->ReportMetrics(Ctx().get(), rep, &accepted).ok());
  auto points = Points(run);
  ASSERT_EQ(points.size(), 1u);
  EXPECT_EQ(points[0].name(), kEvilName);
  EXPECT_TRUE(std::isinf(points[0].value()));

  v1::CompleteRequest done;
  done.set_run_id(run);
  done.set_attempt(1);
  done.set_lease_token(lease.lease().token());
  done.set_state(v1::FAILED);
  done.set_error(kEvil);
  done.mutable_result()->set_device(kEvil);
  (*done.mutable_result()->mutable_final_probes())[kEvil] = 2.5;
  v1::CompleteResponse cr;
  ASSERT_TRUE(WorkerStub()->Complete(Ctx().get(), done, &cr).ok());
  auto after = GetSweep(sub.sweep().id());
  ASSERT_EQ(after.runs_size(), 1);
  EXPECT_EQ(after.runs(0).error(), kEvil);
  EXPECT_EQ(after.runs(0).result().device(), kEvil);
  EXPECT_EQ(after.runs(0).result().final_probes().at(kEvil), 2.5);
  EXPECT_EQ(after.runs(0).worker(), kEvilName);

  v1::ListWorkersRequest lw;
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(SweepStub()->ListWorkers(Ctx().get(), lw, &workers).ok());
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_EQ(workers.workers(0).info().hostname(), kEvil);

  v1::GetSweepRequest by_name;
  by_name.mutable_sweep()->set_name(kEvil);
  v1::GetSweepResponse none;
  auto nf = SweepStub()->GetSweep(Ctx().get(), by_name, &none);
  EXPECT_EQ(nf.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(nf.error_message(), absl::StrCat("no sweep named \"", kEvil, "\""));
}

TEST_F(InputTest, OversizedGridIsRefusedWithTheLimit) {
  auto s = TrySubmit(SweepYaml("huge", 4, 3));  // 12 runs, limit 10
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("big.yaml:"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("more than 10 runs"), std::string::npos) << s.error_message();
  v1::SubmitSweepResponse ok;
  ASSERT_TRUE(TrySubmit(SweepYaml("fits", 5, 2), &ok).ok());
  EXPECT_EQ(ok.runs(), 10);
}

TEST_F(InputTest, OversizedMessagesAreRefused) {
  std::string padded = SweepYaml("padded", 1, 1) + "# " + std::string(300 << 10, 'x') + "\n";
  auto s = TrySubmit(padded);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("the server accepts at most 262144"), std::string::npos)
      << s.error_message();
  std::string huge = SweepYaml("huge", 1, 1) + "# " + std::string(2 << 20, 'x') + "\n";
  s = TrySubmit(huge);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("larger than max"), std::string::npos) << s.error_message();

  Submit(SweepYaml("points", 1, 1));
  const int64_t w = Register("w");
  auto l = Lease(w);
  v1::ReportMetricsRequest rep;
  rep.set_run_id(l.spec().run_id());
  rep.set_attempt(1);
  rep.set_lease_token(l.lease().token());
  for (int i = 0; i < 1001; ++i) {
    auto* p = rep.add_points();
    p->set_name("train_loss");
    p->set_step(i);
  }
  v1::ReportMetricsResponse resp;
  auto r = WorkerStub()->ReportMetrics(Ctx().get(), rep, &resp);
  EXPECT_EQ(r.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(r.error_message(),
            "points: 1001 points in one report; the limit is 1000 (send smaller batches)");
}

TEST_F(InputTest, DataPathsMustExistInsideTheDataDir) {
  std::string yaml = SweepYaml("missing", 1, 1);
  yaml.replace(yaml.find("\"synthetic:50\""), 14, "nope.txt");
  auto s = TrySubmit(yaml);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), absl::StrCat("big.yaml: data.train: file \"nope.txt\" not found "
                                            "under --data-dir (",
                                            data_dir_, ")"));
  yaml = SweepYaml("escape", 1, 1);
  yaml.replace(yaml.find("\"synthetic:10\""), 14, "../../etc/passwd");
  s = TrySubmit(yaml);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "big.yaml: data.val: \"../../etc/passwd\" must not contain \"..\"");
  yaml = SweepYaml("absolute", 1, 1);
  yaml.replace(yaml.find("\"synthetic:10\""), 14, "/etc/passwd");
  s = TrySubmit(yaml);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::GetDatasetRequest ds;
  ds.set_sha256(std::string(64, 'a'));
  auto ctx = Ctx();
  auto reader = WorkerStub()->GetDataset(ctx.get(), ds);
  v1::DataChunk c;
  EXPECT_FALSE(reader->Read(&c));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(InputTest, DryRunExpandsWithoutStoring) {
  v1::SubmitSweepRequest req;
  req.set_spec_yaml(SweepYaml("dry", 2, 2));
  req.set_dry_run(true);
  v1::SubmitSweepResponse resp;
  ASSERT_TRUE(SweepStub()->SubmitSweep(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.runs(), 4);
  EXPECT_EQ(resp.expanded_size(), 4);
  v1::ListSweepsRequest ls;
  v1::ListSweepsResponse list;
  ASSERT_TRUE(SweepStub()->ListSweeps(Ctx().get(), ls, &list).ok());
  EXPECT_EQ(list.sweeps_size(), 0);
}

}  // namespace
}  // namespace ablate::testing
