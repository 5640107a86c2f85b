// common/util's file helpers.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/util/file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ablate::util {
namespace {

using ::testing::HasSubstr;

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
