// The worker's metric spool: order, acknowledgement, and no loss across partial sends.
#include "worker/spool.h"

#include <filesystem>

#include "gtest/gtest.h"

namespace ablate::worker {
namespace {

std::vector<v1::MetricPoint> Points(int64_t from, int64_t to) {
  std::vector<v1::MetricPoint> out;
  for (int64_t s = from; s <= to; ++s) {
    v1::MetricPoint p;
    p.set_step(s);
    p.set_name("train_loss");
    p.set_value(10.0 / double(s));
    out.push_back(p);
  }
  return out;
}

class SpoolTest : public ::testing::Test {
 protected:
  std::string path_ = (std::filesystem::temp_directory_path() /
                       ("spool-test-" + std::to_string(::getpid()) + ".spool"))
                          .string();
};

TEST_F(SpoolTest, ReplaysInOrderAndOnlyUnacknowledged) {
  auto spool = MetricSpool::Create(path_);
  ASSERT_TRUE(spool.ok()) << spool.status();
  ASSERT_TRUE((*spool)->Append(Points(1, 3)).ok());
  ASSERT_TRUE((*spool)->Append(Points(4, 10)).ok());
  EXPECT_EQ((*spool)->pending(), 10);

  auto batch = (*spool)->Peek(4);
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(batch->size(), 4u);
  EXPECT_EQ((*batch)[0].step(), 1);
  EXPECT_EQ((*batch)[3].step(), 4);
  EXPECT_DOUBLE_EQ((*batch)[1].value(), 5.0);

  // A failed send (no Ack) hands the same points out again.
  auto again = (*spool)->Peek(4);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0].step(), 1);

  (*spool)->Ack(again->size());
  EXPECT_EQ((*spool)->pending(), 6);
  ASSERT_TRUE((*spool)->Append(Points(11, 12)).ok());
  auto rest = (*spool)->Peek(100);
  ASSERT_TRUE(rest.ok());
  ASSERT_EQ(rest->size(), 8u);
  for (size_t i = 0; i < rest->size(); ++i) EXPECT_EQ((*rest)[i].step(), int64_t(5 + i));
  (*spool)->Ack(rest->size());
  EXPECT_EQ((*spool)->pending(), 0);
  auto none = (*spool)->Peek(100);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(SpoolTest, PartialAckKeepsTheRest) {
  auto spool = MetricSpool::Create(path_);
  ASSERT_TRUE(spool.ok());
  ASSERT_TRUE((*spool)->Append(Points(1, 5)).ok());
  auto batch = (*spool)->Peek(5);
  ASSERT_TRUE(batch.ok());
  (*spool)->Ack(2);
  auto rest = (*spool)->Peek(5);
  ASSERT_TRUE(rest.ok());
  ASSERT_EQ(rest->size(), 3u);
  EXPECT_EQ((*rest)[0].step(), 3);
}

TEST_F(SpoolTest, AFullDiskRefusesTheWholeBatchAndKeepsWhatWasSpooled) {
  // /dev/full answers every write with ENOSPC: the spool must say RESOURCE_EXHAUSTED (which the
  // session waits out) and count none of the refused points. Reached through a link, so the
  // spool's destructor removes the link, not the device.
  const std::string link = path_ + ".full";
  std::filesystem::remove(link);
  std::filesystem::create_symlink("/dev/full", link);
  {
    auto spool = MetricSpool::Create(link);
    ASSERT_TRUE(spool.ok()) << spool.status();
    const absl::Status s = (*spool)->Append(Points(1, 3));
    EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
    EXPECT_EQ((*spool)->pending(), 0);
    auto none = (*spool)->Peek(10);
    ASSERT_TRUE(none.ok());
    EXPECT_TRUE(none->empty());
  }
  EXPECT_TRUE(std::filesystem::exists("/dev/full"));
  EXPECT_FALSE(std::filesystem::is_symlink(link));
}

TEST_F(SpoolTest, FileIsRemovedWithTheSpool) {
  {
    auto spool = MetricSpool::Create(path_);
    ASSERT_TRUE(spool.ok());
    ASSERT_TRUE((*spool)->Append(Points(1, 2)).ok());
    EXPECT_TRUE(std::filesystem::exists(path_));
  }
  EXPECT_FALSE(std::filesystem::exists(path_));
}

}  // namespace
}  // namespace ablate::worker
