// Hostile and oversized input: SQL metacharacters in every string field round-trip unchanged
// (all SQL is parameterised), oversized grids and messages are refused with a clear error, and
// data paths are confined to --data-dir.
#include <gmock/gmock.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/util/sha256.h"
#include "server/store/db.h"
#include "server/store/token_store.h"
#include "spdlog/sinks/ringbuffer_sink.h"
#include "spdlog/spdlog.h"
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
  done.set_fault(v1::FAULT_RUN);  // the run's own failure: it ends failed with this error
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
  EXPECT_EQ(s.error_message(), absl::StrCat("big.yaml:2: data.train: file \"nope.txt\" not found "
                                            "under --data-dir (",
                                            data_dir_, ")"));
  // A dry run (ablate submit --dry-run, ablate estimate) refuses it the same way.
  v1::SubmitSweepRequest dry;
  dry.set_spec_yaml(yaml);
  dry.set_file_name("big.yaml");
  dry.set_dry_run(true);
  v1::SubmitSweepResponse dry_resp;
  auto d = SweepStub()->SubmitSweep(Ctx().get(), dry, &dry_resp);
  EXPECT_EQ(d.error_code(), s.error_code());
  EXPECT_EQ(d.error_message(), s.error_message());
  yaml = SweepYaml("escape", 1, 1);
  yaml.replace(yaml.find("\"synthetic:10\""), 14, "../../etc/passwd");
  s = TrySubmit(yaml);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "big.yaml:2: data.val: \"../../etc/passwd\" must not contain \"..\"");
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

TEST_F(InputTest, TrainAndValMayBeTheSameFile) {
  const std::string contents = "Once upon a time there was one file for both.";
  std::ofstream(std::filesystem::path(data_dir_) / "both.txt") << contents;
  std::string yaml = SweepYaml("same", 1, 1);
  yaml.replace(yaml.find("\"synthetic:50\""), 14, "both.txt");
  yaml.replace(yaml.find("\"synthetic:10\""), 14, "both.txt");
  v1::SubmitSweepResponse sub;
  auto s = TrySubmit(yaml, &sub);
  ASSERT_TRUE(s.ok()) << s.error_message();  // was INTERNAL: one data set inserted twice
  const auto lease = Lease(Register("w"));
  ASSERT_TRUE(lease.has_run());
  EXPECT_EQ(lease.spec().data().train_sha256(), Sha256Hex(contents));
  EXPECT_EQ(lease.spec().data().val_sha256(), Sha256Hex(contents));
}

TEST_F(InputTest, NulBytesAreRefusedNotTruncated) {
  v1::SubmitSweepRequest req;
  req.set_spec_yaml(SweepYaml("nul", 1, 1));
  req.set_file_name(std::string("a\0b.yaml", 8));
  v1::SubmitSweepResponse resp;
  auto s = SweepStub()->SubmitSweep(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "file_name: contains a NUL byte at offset 1");
  s = TrySubmit(SweepYaml("nul", 1, 1) + std::string("# a\0b\n", 6));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "big.yaml:7: text: contains a NUL byte at offset 3");
  s = TrySubmit(SweepYaml("nul", 1, 1) + "description: \"a\\0b\"\n");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "big.yaml:7: description: contains a NUL byte at offset 1");
  v1::ListSweepsResponse list;
  ASSERT_TRUE(SweepStub()->ListSweeps(Ctx().get(), {}, &list).ok());
  EXPECT_EQ(list.sweeps_size(), 0);
}

TEST_F(InputTest, HugeNamesGetAShortInvalidArgument) {
  // 200 KB (the fixture's spec cap is 256 KB): PostgreSQL refused it with INTERNAL ("index row
  // requires ...") and a bad character made the error echo the whole name.
  const std::string name(200 << 10, 'n');
  std::string yaml = SweepYaml("NAME", 1, 1);
  yaml.replace(yaml.find("NAME"), 4, name);
  auto s = TrySubmit(yaml);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "big.yaml:1: name: 204800 bytes is too long (at most 1024)");
  yaml = SweepYaml("NAME", 1, 1);
  yaml.replace(yaml.find("NAME"), 4, std::string(1000, 'n') + "\x01");
  s = TrySubmit(yaml);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(s.error_message().size(), 200u) << s.error_message();
  // Every string of the sweep: data paths too.
  yaml = SweepYaml("paths", 1, 1);
  yaml.replace(yaml.find("\"synthetic:50\""), 14, std::string(5000, 'p'));
  s = TrySubmit(yaml);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "big.yaml:2: data.train: 5000 bytes is too long (at most 1024)");
  v1::SubmitSweepRequest req;
  req.set_spec_yaml(SweepYaml("f", 1, 1));
  req.set_file_name(std::string(5000, 'f'));
  v1::SubmitSweepResponse resp;
  s = SweepStub()->SubmitSweep(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "file_name: 5000 bytes is too long (at most 1024)");
}

TEST_F(InputTest, DatabaseErrorsReachClientsAsAnIdOnly) {
  // Every store call converts pqxx exceptions in Db::Tx: a failing statement on the real
  // database must come back without PostgreSQL's text, and the log must carry it under the id.
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  spdlog::default_logger()->sinks().push_back(sink);
  server::Db db(url_, 1);
  auto r = db.Tx<bool>("probe", [](pqxx::work& tx) -> absl::StatusOr<bool> {
    tx.exec("SELECT secret_column FROM no_such_table_x");
    return true;
  });
  spdlog::default_logger()->sinks().pop_back();
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInternal);
  const std::string message(r.status().message());
  EXPECT_THAT(message,
              ::testing::MatchesRegex("probe: internal database error \\(error id [0-9a-f]{8}\\)"));
  EXPECT_EQ(message.find("no_such_table_x"), std::string::npos);
  const std::string id = message.substr(message.size() - 9, 8);
  bool logged = false;
  for (const auto& line : sink->last_formatted()) {
    if (line.find(absl::StrCat("id=", id)) != std::string::npos &&
        line.find("no_such_table_x") != std::string::npos &&
        line.find("error") != std::string::npos) {
      logged = true;
    }
  }
  EXPECT_TRUE(logged) << "no log line with id " << id;
}

TEST_F(InputTest, UserTextInLogLinesIsQuoted) {
  server::Db db(url_, 1);
  server::TokenStore tokens(&db);
  auto bad = tokens.Create(server::Role::kUser, "evil\nts=now level=error msg=forged");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::HasSubstr("token name: only printable ASCII is allowed"));

  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  spdlog::default_logger()->sinks().push_back(sink);
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::info);
  v1::SubmitSweepRequest req;
  req.set_spec_yaml(SweepYaml("logged", 1, 1));
  req.set_file_name("x.yaml\nts=now level=error msg=\"forged\"");
  v1::SubmitSweepResponse resp;
  auto s = SweepStub()->SubmitSweep(Ctx().get(), req, &resp);
  spdlog::set_level(level);
  spdlog::default_logger()->sinks().pop_back();
  ASSERT_TRUE(s.ok()) << s.error_message();
  bool found = false;
  for (const auto& line : sink->last_formatted()) {
    if (line.find("sweep submitted") == std::string::npos) continue;
    found = true;
    EXPECT_EQ(line.find("\nts=now"), std::string::npos) << line;
    EXPECT_NE(line.find("file=\"x.yaml\\nts=now level=error msg=\\\"forged\\\"\""),
              std::string::npos)
        << line;
  }
  EXPECT_TRUE(found);
}

// A server with the default grid limit and one parse slot, for the memory-amplification cases.
class BigInputTest : public InputTest {
 protected:
  void Configure(server::ServerOptions* o) override {
    InputTest::Configure(o);
    o->max_grid = 100000;
    o->max_concurrent_parses = 1;
    o->parse_wait_seconds = 0.05;
  }
  // A file of ~250 bytes that expands to `runs` runs.
  static std::string Seeds(const std::string& name, int runs) {
    std::string yaml = SweepYaml(name, 1, 1);
    return yaml.replace(
        yaml.find("seed: [0]"), 9,
        absl::StrCat("seed: {linspace: {min: 0, max: ", runs - 1, ", num: ", runs, "}}"));
  }
};

TEST_F(BigInputTest, DryRunReturnsTheCountAndTheFirstRowsOnly) {
  v1::SubmitSweepRequest req;
  req.set_spec_yaml(Seeds("dry", 100000));
  req.set_dry_run(true);
  v1::SubmitSweepResponse resp;
  auto s = SweepStub()->SubmitSweep(Ctx().get(), req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.runs(), 100000);
  EXPECT_EQ(resp.sweep().counts().total(), 100000);
  EXPECT_THAT(resp.sweep().axes(), ::testing::ElementsAre("lr", "seed"));
  ASSERT_EQ(resp.expanded_size(), 100);  // was all 100,000 (~40 MB on the wire)
  EXPECT_EQ(resp.expanded(0).config().seed(), 0);
  EXPECT_EQ(resp.expanded(99).config().seed(), 99);
  EXPECT_LT(resp.ByteSizeLong(), 1u << 20);
}

TEST_F(BigInputTest, ConcurrentParsesAreBounded) {
  // One slot, 50 ms of patience: of 8 simultaneous 100k-run dry runs, some must be told to retry.
  std::vector<grpc::Status> results(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] {
      v1::SubmitSweepRequest req;
      req.set_spec_yaml(Seeds(absl::StrCat("c", i), 100000));
      req.set_file_name("c.yaml");
      req.set_dry_run(true);
      v1::SubmitSweepResponse resp;
      results[i] = SweepStub()->SubmitSweep(Ctx().get(), req, &resp);
    });
  }
  for (auto& t : threads) t.join();
  int ok = 0, busy = 0;
  for (const auto& r : results) {
    if (r.ok()) ++ok;
    if (r.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++busy;
      EXPECT_THAT(r.error_message(), ::testing::HasSubstr("c.yaml: the server is busy parsing"));
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(busy, 1);
  EXPECT_EQ(ok + busy, 8);
}

// `ablate runs`: a page, newest first (as ListSweeps), with the count of every matching run.
TEST_F(InputTest, ListRunsPagesNewestFirstWithTheTotal) {
  v1::SubmitSweepResponse first, second;
  ASSERT_TRUE(TrySubmit(SweepYaml("older", 1, 3), &first).ok());
  ASSERT_TRUE(TrySubmit(SweepYaml("newer", 1, 2), &second).ok());
  auto page = [&](int64_t sweep, int limit, int offset, std::vector<v1::RunState> states = {}) {
    v1::ListRunsRequest req;
    if (sweep != 0) req.mutable_sweep()->set_id(sweep);
    req.set_limit(limit);
    req.set_offset(offset);
    for (auto st : states) req.add_states(st);
    v1::ListRunsResponse resp;
    auto st = SweepStub()->ListRuns(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    std::vector<std::string> out;  // "sweep/order", then the total
    for (const auto& r : resp.runs()) {
      out.push_back(
          absl::StrCat(r.sweep_id() == first.sweep().id() ? "old" : "new", "/", r.order_index()));
    }
    out.push_back(absl::StrCat("of ", resp.total()));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(page(0, 3, 0), (V{"new/1", "new/0", "old/2", "of 5"}));
  EXPECT_EQ(page(0, 3, 3), (V{"old/1", "old/0", "of 5"}));
  EXPECT_EQ(page(0, 3, 9), (V{"of 5"}));  // past the end: the count alone
  EXPECT_EQ(page(first.sweep().id(), 2, 0), (V{"old/2", "old/1", "of 3"}));
  EXPECT_EQ(page(first.sweep().id(), 0, 0, {v1::QUEUED}), (V{"old/2", "old/1", "old/0", "of 3"}));
  EXPECT_EQ(page(0, 10, 0, {v1::FAILED}), (V{"of 0"}));
}

TEST_F(BigInputTest, ListRunsLimitIsDefaultedAndCapped) {
  v1::SubmitSweepResponse sub;
  auto s = TrySubmit(Seeds("many", 10500), &sub);
  ASSERT_TRUE(s.ok()) << s.error_message();
  auto count = [&](int limit) {
    v1::ListRunsRequest req;
    req.mutable_sweep()->set_id(sub.sweep().id());
    req.set_limit(limit);
    v1::ListRunsResponse resp;
    auto st = SweepStub()->ListRuns(Ctx(admin_, 60).get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.runs_size();
  };
  EXPECT_EQ(count(0), 1000);
  EXPECT_EQ(count(-7), 1000);
  EXPECT_EQ(count(20), 20);
  EXPECT_EQ(count(std::numeric_limits<int32_t>::max()), 10000);
}

// The server checks each run in the walk that stores it: a run the grid makes invalid past the
// first insert chunk (n_head 4 does not divide n_embd 30) refuses the submit with the error a
// dry run gives, naming the field, and stores nothing of the runs inserted before it.
TEST_F(BigInputTest, ARunTheGridMakesInvalidRefusesTheSubmitAndStoresNothing) {
  const std::string yaml =
      "name: late-bad\n"
      "data: {train: \"synthetic:50\", val: \"synthetic:10\", tokenizer: {type: bpe, vocab: "
      "512}}\n"
      "fixed: {n_embd: 30, block_size: 16, batch_size: 2, steps: 10, warmup: 1}\n"
      "grid:\n  n_head: [2, 4]\n  seed: {linspace: {min: 0, max: 5999, num: 6000}}\n";
  v1::SubmitSweepRequest dry;
  dry.set_spec_yaml(yaml);
  dry.set_file_name("big.yaml");
  dry.set_dry_run(true);
  v1::SubmitSweepResponse dry_resp;
  const grpc::Status dry_status = SweepStub()->SubmitSweep(Ctx(admin_, 60).get(), dry, &dry_resp);
  ASSERT_EQ(dry_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(dry_status.error_message().find("not divisible by n_head (4)"), std::string::npos)
      << dry_status.error_message();
  const grpc::Status s = TrySubmit(yaml);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), dry_status.error_message());
  {
    pqxx::connection conn(url_);
    pqxx::work tx(conn);
    for (const char* table : {"sweeps", "runs", "run_specs", "run_spec_base", "run_counts"}) {
      EXPECT_EQ(server::pg::ExecText(tx, absl::StrCat("SELECT count(*) FROM ", table))[0][0]
                    .as<int64_t>(),
                0)
          << table;
    }
  }
  // The server goes on: the same grid without the bad value is stored whole.
  std::string good = yaml;
  good.replace(good.find("[2, 4]"), 6, "[2, 3]");
  good.replace(good.find("n_embd: 30"), 10, "n_embd: 36");
  v1::SubmitSweepResponse sub;
  const grpc::Status ok = TrySubmit(good, &sub);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(sub.sweep().counts().queued(), 12000);
}

TEST_F(BigInputTest, BigSubmitIsStoredInExpansionOrderAcrossInsertChunks) {
  // The store inserts a few thousand runs per statement; 12,001 runs span several statements
  // and end with a partial one. Every run must be stored once, at its position in the
  // expansion, with ids ascending in that order and its spec attached.
  constexpr int kRuns = 12001;
  v1::SubmitSweepResponse sub;
  auto s = TrySubmit(Seeds("chunks", kRuns), &sub);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(sub.runs(), kRuns);
  EXPECT_EQ(sub.sweep().counts().total(), kRuns);
  EXPECT_EQ(sub.sweep().counts().queued(), kRuns);
  // More runs than GetSweep includes (one ListRuns page): read them page by page, newest first,
  // as the CLI does, and turn them into queue order.
  std::vector<v1::Run> got;
  while (static_cast<int>(got.size()) < kRuns) {
    v1::ListRunsRequest req;
    req.mutable_sweep()->set_id(sub.sweep().id());
    req.set_limit(10000);
    req.set_offset(static_cast<int>(got.size()));
    v1::ListRunsResponse page;
    auto st = SweepStub()->ListRuns(Ctx(admin_, 60).get(), req, &page);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_GT(page.runs_size(), 0);
    for (auto& r : *page.mutable_runs()) got.push_back(std::move(r));
  }
  std::reverse(got.begin(), got.end());
  ASSERT_EQ(static_cast<int>(got.size()), kRuns);
  for (int i = 0; i < kRuns; ++i) {
    const v1::Run& r = got[i];
    ASSERT_EQ(r.order_index(), i);
    ASSERT_EQ(r.seed(), i);
    ASSERT_EQ(r.config().seed(), i);
    if (i > 0) {
      ASSERT_GT(r.id(), got[i - 1].id()) << "run " << i;
    }
  }
}

}  // namespace
}  // namespace ablate::testing
