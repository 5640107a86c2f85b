// What the worker knows of its box (worker/host.h), its crash record (worker/crash_record.h) and
// its self-check (worker/self_check.h), against directories of the test's own: fake /proc and
// cgroup trees, a work dir whose `runs` is a file, a previous process's record.
#include "worker/host.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/util/file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/crash_record.h"
#include "worker/failure_class.h"
#include "worker/self_check.h"

namespace ablate::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class Tree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            absl::StrCat("ablate-host-", getpid(), "-",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    paths_.proc = (root_ / "proc").string();
    paths_.cgroup = (root_ / "cgroup").string();
    paths_.machine_id = (root_ / "machine-id").string();
    Write("proc/sys/kernel/random/boot_id", "boot-1\n");
  }
  void TearDown() override { fs::remove_all(root_); }

  void Write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }

  fs::path root_;
  HostPaths paths_;
};

TEST_F(Tree, CgroupV2MemoryMaxOfTheCgroupOrAParentIsTheLimit) {
  Write("proc/self/cgroup", "0::/workers/w1\n");
  Write("cgroup/workers/w1/memory.max", "max\n");
  Write("cgroup/workers/memory.max", "2147483648\n");
  Write("cgroup/memory.max", "max\n");
  EXPECT_EQ(CgroupMemoryLimitBytes(paths_), int64_t{2} << 30);
  Write("cgroup/workers/w1/memory.current", "1073741824\n");
  EXPECT_EQ(CgroupMemoryUsedBytes(paths_), int64_t{1} << 30);
  Write("cgroup/workers/w1/memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 3\n");
  EXPECT_EQ(OomKills(paths_), 3);
}

TEST_F(Tree, CgroupV1LimitInBytesIsTheLimitAndItsUnlimitedIsNone) {
  Write("proc/self/cgroup", "4:memory:/process_api/abc\n3:cpuset:/\n0::/\n");
  Write("cgroup/memory/process_api/abc/memory.limit_in_bytes", "536870912\n");
  Write("cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  Write("cgroup/memory/process_api/abc/memory.oom_control", "oom_kill_disable 0\noom_kill 2\n");
  EXPECT_EQ(CgroupMemoryLimitBytes(paths_), int64_t{512} << 20);
  EXPECT_EQ(OomKills(paths_), 2);
  Write("cgroup/memory/process_api/abc/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(CgroupMemoryLimitBytes(paths_), std::nullopt);
}

TEST_F(Tree, AnRlimitBelowEverythingElseIsTheLimit) {
  // In a child, so the test process keeps its own limits.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    struct rlimit rl {};
    getrlimit(RLIMIT_DATA, &rl);
    rl.rlim_cur = rlim_t{3} << 30;
    if (setrlimit(RLIMIT_DATA, &rl) != 0) _exit(2);
    const auto limit = MemoryLimitBytes(paths_);
    _exit(limit && *limit <= (int64_t{3} << 30) ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "MemoryLimitBytes did not see RLIMIT_DATA";
}

TEST_F(Tree, TheHostKeyIsTheMachineAndTheWorkDir) {
  Write("machine-id", "0123456789abcdef\n");
  const std::string a = HostKey("/w/a", paths_), b = HostKey("/w/b", paths_);
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a, HostKey("/w/./a", paths_));
  Write("machine-id", "fedcba9876543210\n");
  EXPECT_NE(a, HostKey("/w/a", paths_));
}

v1::Lease LeaseOf(int64_t run, int attempt) {
  v1::Lease l;
  l.set_run_id(run);
  l.set_attempt(attempt);
  l.set_token(std::string(64, 'a'));
  return l;
}

// A previous process's record as a crash leaves it: its pid (not running), this boot, and what
// the handlers appended.
void PreviousProcess(const fs::path& work, const std::string& boot, const std::string& extra) {
  fs::create_directories(work / "held");
  std::ofstream(work / "held" / "process") << "pid=999999999\nboot=" << boot << "\noom_kills=1\n"
                                           << extra;
}

TEST_F(Tree, AnAbortInTrainingIsReportedWithItsCause) {
  const fs::path work = root_ / "work";
  {
    auto first = CrashRecord::Open(work.string(), false, paths_);
    ASSERT_TRUE(first.ok()) << first.status();
    (*first)->Hold(RunLease(LeaseOf(12, 3)));
    (*first)->Hold(RunLease(LeaseOf(13, 1)));
    (*first)->Drop(RunLease(LeaseOf(13, 1)));  // its session ended
  }
  // As the handlers leave it: std::terminate, then abort's SIGABRT.
  std::ofstream(work / "held" / "process", std::ios::app)
      << "terminate=no active exception\nsignal=6\n";
  auto next = CrashRecord::Open(work.string(), false, paths_);
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_EQ((*next)->previous().size(), 1u);
  const v1::CrashedAttempt& c = (*next)->previous()[0];
  EXPECT_EQ(c.run_id(), 12);
  EXPECT_EQ(c.attempt(), 3);
  EXPECT_EQ(c.lease_token(), std::string(64, 'a'));
  EXPECT_THAT(c.cause(), HasSubstr("signal 6 (SIGABRT: aborted) in std::terminate: no active"));
  EXPECT_THAT((*next)->previous_note(), HasSubstr("died holding 1 run(s)"));
  // Not reported yet: a process that dies before it registers leaves it for the next one.
  auto again = CrashRecord::Open(work.string(), false, paths_);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ((*again)->previous().size(), 1u);
  (*again)->Reported();
  auto after = CrashRecord::Open(work.string(), false, paths_);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE((*after)->previous().empty());
}

TEST_F(Tree, ADeathWithoutATraceIsAKillAndAGrownOomCountTheOomKiller) {
  Write("proc/self/cgroup", "0::/\n");
  Write("cgroup/memory.events", "oom_kill 1\n");
  const fs::path work = root_ / "work";
  PreviousProcess(work, "boot-1", "");
  v1::CrashedAttempt held;
  RunLease(LeaseOf(7, 2)).Stamp(&held);
  ASSERT_TRUE(
      util::WriteFileAtomically((work / "held" / "run-7-a2").string(), held.SerializeAsString())
          .ok());
  auto killed = CrashRecord::Open(work.string(), false, paths_);
  ASSERT_TRUE(killed.ok());
  ASSERT_EQ((*killed)->previous().size(), 1u);
  EXPECT_THAT((*killed)->previous()[0].cause(), HasSubstr("killed by SIGKILL"));
  (*killed)->Reported();
  (*killed)->Close();

  PreviousProcess(work, "boot-1", "");
  ASSERT_TRUE(
      util::WriteFileAtomically((work / "held" / "run-7-a2").string(), held.SerializeAsString())
          .ok());
  Write("cgroup/memory.events", "oom_kill 2\n");
  auto oom = CrashRecord::Open(work.string(), false, paths_);
  ASSERT_TRUE(oom.ok());
  ASSERT_EQ((*oom)->previous().size(), 1u);
  EXPECT_THAT((*oom)->previous()[0].cause(), HasSubstr("OOM killer"));
}

TEST_F(Tree, AProcessOfAnEarlierBootWentWithTheMachineAndACleanStopLeavesNothing) {
  const fs::path work = root_ / "work";
  PreviousProcess(work, "boot-0", "");
  v1::CrashedAttempt held;
  RunLease(LeaseOf(7, 2)).Stamp(&held);
  ASSERT_TRUE(
      util::WriteFileAtomically((work / "held" / "run-7-a2").string(), held.SerializeAsString())
          .ok());
  auto rebooted = CrashRecord::Open(work.string(), false, paths_);
  ASSERT_TRUE(rebooted.ok());
  EXPECT_TRUE((*rebooted)->previous().empty());
  EXPECT_THAT((*rebooted)->previous_note(), HasSubstr("another boot"));
  (*rebooted)->Close();
  auto clean = CrashRecord::Open(work.string(), false, paths_);
  ASSERT_TRUE(clean.ok());
  EXPECT_TRUE((*clean)->previous().empty());
  EXPECT_EQ((*clean)->previous_note(), "");
}

TEST_F(Tree, TheSelfCheckWritesEveryRunDirectoryOfTheWorkDir) {
  const fs::path work = root_ / "work";
  EXPECT_TRUE(CheckWorkDir(work.string()).ok());
  // A work dir the worker can no longer write where a run writes (a file where its runs go; as
  // root, permissions would not stop it): the check fails, naming the path.
  fs::remove_all(work / "runs");
  std::ofstream(work / "runs") << "not a directory";
  const absl::Status s = CheckWorkDir(work.string());
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr((work / "runs").string()));
  fs::remove(work / "runs");
  EXPECT_TRUE(CheckWorkDir(work.string()).ok());
}

TEST_F(Tree, TheSelfCheckNeedsTheMemoryTheFailedRunNeeds) {
  Write("proc/meminfo", "MemTotal:       8000000 kB\nMemAvailable:    1048576 kB\n");
  EXPECT_TRUE(CheckMemory(int64_t{512} << 20, paths_).ok());
  const absl::Status s = CheckMemory(int64_t{2} << 30, paths_);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("1024 MiB available, less than the 2048 MiB"));
  // Under a cgroup: its limit less its usage counts when it is the smaller.
  Write("proc/meminfo", "MemAvailable:    8388608 kB\n");
  Write("proc/self/cgroup", "0::/\n");
  Write("cgroup/memory.max", "1073741824\n");
  Write("cgroup/memory.current", "805306368\n");
  EXPECT_TRUE(absl::IsResourceExhausted(CheckMemory(int64_t{512} << 20, paths_)));
}

TEST(FaultArea, WhatAFailurePointsAtIsWhatTheSelfCheckTests) {
  EXPECT_EQ(AreaOf(absl::InternalError("mkdir /w/runs/1-a1: Not a directory"), FaultStage::kRunDir),
            FaultArea::kDisk);
  EXPECT_EQ(AreaOf(absl::ResourceExhaustedError("spool: /w/spool/1.spool: No space left on device"),
                   FaultStage::kTrain),
            FaultArea::kDisk);
  EXPECT_EQ(AreaOf(absl::ResourceExhaustedError("CUDA out of memory. Tried to allocate 2 GiB"),
                   FaultStage::kTrain),
            FaultArea::kMemory);
  EXPECT_EQ(AreaOf(absl::InternalError("cannot start a thread"), FaultStage::kThread),
            FaultArea::kMemory);
  EXPECT_EQ(AreaOf(absl::InternalError("CUDA error: an illegal memory access was encountered"),
                   FaultStage::kTrain),
            FaultArea::kDevice);
  EXPECT_EQ(AreaOf(absl::UnknownError("something else"), FaultStage::kTrain), FaultArea::kOther);
}

}  // namespace
}  // namespace ablate::worker
