// common/util's back-off and file helpers.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "common/util/backoff.h"
#include "common/util/file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ablate::util {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

TEST(Backoff, DoublesUpToTheCapAndStartsOverAfterReset) {
  BackoffPolicy policy = kRunCallBackoff;
  policy.jitter = 0;
  Backoff b(policy);
  std::vector<int64_t> waits;
  for (int i = 0; i < 9; ++i) waits.push_back(b.Next().count());
  EXPECT_THAT(waits, ::testing::ElementsAre(200, 400, 800, 1600, 3200, 6400, 10000, 10000, 10000));
  b.Reset();
  EXPECT_EQ(b.Next(), milliseconds(200));
}

TEST(Backoff, JitterOnlyShortensAWait) {
  Backoff b(kDaemonBackoff, /*seed=*/42);
  int64_t nominal = 500;
  bool some_shorter = false;
  for (int i = 0; i < 12; ++i) {
    const int64_t wait = b.Next().count();
    EXPECT_LE(wait, nominal);
    EXPECT_GE(wait, static_cast<int64_t>(static_cast<double>(nominal) * 0.9) - 1);
    some_shorter = some_shorter || wait < nominal;
    nominal = std::min<int64_t>(nominal * 2, 30000);
  }
  EXPECT_TRUE(some_shorter);
}

TEST(Retry, RetriesOnlyWhatIsRetryableAndReturnsTheLastResult) {
  const BackoffPolicy quick{milliseconds(1), milliseconds(2), 2, 0, 0};
  int calls = 0;
  std::vector<int64_t> waits;
  auto on_retry = [&](const absl::Status&, milliseconds w) { waits.push_back(w.count()); };
  absl::Status s = Retry(
      quick, [&] { return ++calls < 4 ? absl::UnavailableError("down") : absl::OkStatus(); },
      absl::IsUnavailable, [] { return false; }, on_retry);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(calls, 4);
  EXPECT_THAT(waits, ::testing::ElementsAre(1, 2, 2));

  calls = 0;
  absl::StatusOr<int> r = Retry(
      quick,
      [&]() -> absl::StatusOr<int> {
        ++calls;
        return absl::NotFoundError("gone");
      },
      absl::IsUnavailable, [] { return false; }, on_retry);
  EXPECT_TRUE(absl::IsNotFound(r.status()));
  EXPECT_EQ(calls, 1);
}

TEST(Retry, StopsAtMaxTriesOrWhenToldTo) {
  BackoffPolicy policy = kFenceProbeBackoff;
  policy.initial = policy.max = milliseconds(1);
  int calls = 0;
  auto down = [&] {
    ++calls;
    return absl::UnavailableError("down");
  };
  auto no_log = [](const absl::Status&, milliseconds) {};
  EXPECT_TRUE(absl::IsUnavailable(Retry(
      policy, down, absl::IsUnavailable, [] { return false; }, no_log)));
  EXPECT_EQ(calls, kFenceProbeBackoff.max_tries);

  calls = 0;
  // An hour's back-off: only `stop` can end this retry.
  const BackoffPolicy slow{std::chrono::hours(1), std::chrono::hours(1)};
  EXPECT_TRUE(absl::IsUnavailable(Retry(
      slow, down, absl::IsUnavailable, [] { return true; }, no_log)));
  EXPECT_EQ(calls, 1);
}

TEST(SleepUnless, ReturnsAtOnceWhenStopped) {
  EXPECT_TRUE(SleepUnless(std::chrono::hours(1), [] { return true; }));
  EXPECT_FALSE(SleepUnless(milliseconds(0), [] { return false; }));
}

class FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("util-file-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    ASSERT_TRUE(MakeDirs(dir_.string()).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::vector<std::string> Entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      out.push_back(e.path().filename().string());
    }
    return out;
  }
  std::filesystem::path dir_;
};

TEST_F(FileTest, AtomicWritesReadBackWholeAndLeaveNoTemporaryFile) {
  const std::string path = (dir_ / "data.bin").string();
  const std::string bytes("a\0b\nc", 5);
  for (Durability d : {Durability::kFsync, Durability::kRename}) {
    ASSERT_TRUE(WriteFileAtomically(path, bytes, d).ok());
    auto read = ReadFile(path);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(*read, bytes);
  }
  ASSERT_TRUE(WriteFileAtomically(path, "shorter").ok());
  EXPECT_EQ(ReadFile(path).value_or(""), "shorter");
  EXPECT_THAT(Entries(), ::testing::ElementsAre("data.bin"));
}

TEST_F(FileTest, ErrorsNameThePath) {
  const std::string missing = (dir_ / "missing.txt").string();
  auto read = ReadFile(missing);
  EXPECT_TRUE(absl::IsNotFound(read.status()));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(missing));

  auto dir_read = ReadFile(dir_.string());
  EXPECT_FALSE(dir_read.ok());
  EXPECT_FALSE(absl::IsNotFound(dir_read.status()));

  const std::string nowhere = (dir_ / "no-such-dir" / "f.txt").string();
  absl::Status s = WriteFileAtomically(nowhere, "x");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(nowhere));
  EXPECT_THAT(Entries(), ::testing::IsEmpty());
}

TEST_F(FileTest, CommitFileRenamesACompleteFileIntoPlace) {
  const std::string path = (dir_ / "final").string();
  const std::string tmp = TempPathFor(path);
  EXPECT_NE(tmp, TempPathFor(path)) << "each call gets its own temporary name";
  ASSERT_TRUE(WriteFileAtomically(tmp, "payload", Durability::kRename).ok());
  ASSERT_TRUE(CommitFile(tmp, path).ok());
  EXPECT_EQ(ReadFile(path).value_or(""), "payload");
  EXPECT_FALSE(std::filesystem::exists(tmp));
  EXPECT_FALSE(CommitFile(tmp, path).ok()) << "the temporary file is gone";
}

TEST_F(FileTest, MakeDirsCreatesParentsAndAcceptsAnExistingDirectory) {
  const std::string nested = (dir_ / "a" / "b" / "c").string();
  ASSERT_TRUE(MakeDirs(nested).ok());
  EXPECT_TRUE(std::filesystem::is_directory(nested));
  EXPECT_TRUE(MakeDirs(nested).ok());
  const std::string file = (dir_ / "plain").string();
  ASSERT_TRUE(WriteFileAtomically(file, "x").ok());
  EXPECT_FALSE(MakeDirs(file + "/sub").ok());
}

}  // namespace
}  // namespace ablate::util
