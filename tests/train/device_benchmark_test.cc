// The worker's startup benchmark (worker/train/device_benchmark.h) on the CPU: what it reports
// and that a restarted worker reads it back instead of measuring again. Speed itself is never
// asserted here (CONTRIBUTING: speed lives in bench/), only that the figures are usable.
#include "worker/train/device_benchmark.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "common/util/file.h"

namespace ablate::train {
namespace {

namespace fs = std::filesystem;

class DeviceBenchmarkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ablate-device-benchmark-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    options_.device = "cpu";
    options_.threads = 1;
    options_.cache_file = (dir_ / "device-benchmark.json").string();
    options_.ablate_version = "test";
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  DeviceBenchmarkOptions options_;
};

TEST_F(DeviceBenchmarkTest, MeasuresFloat32OnTheCpuThenReadsTheCache) {
  auto first = RunDeviceBenchmark(options_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->cached);
  // fp32 only on a CPU (device_benchmark.cc says why).
  ASSERT_EQ(first->benchmarks.size(), 1u);
  const auto& b = first->benchmarks[0];
  EXPECT_EQ(b.dtype(), "float32");
  EXPECT_TRUE(std::isfinite(b.flops_per_second()) && b.flops_per_second() > 0);
  EXPECT_TRUE(std::isfinite(b.tokens_per_second()) && b.tokens_per_second() > 0);
  EXPECT_TRUE(std::isfinite(b.seconds()) && b.seconds() > 0);
  // FLOPs per token of the reference model lie between 6N and a generous bound above it.
  EXPECT_GT(b.flops_per_second() / b.tokens_per_second(), 1e6);
  EXPECT_LT(b.flops_per_second() / b.tokens_per_second(), 1e8);
  EXPECT_NE(b.model().find("n_layer 2"), std::string::npos) << b.model();
  ASSERT_TRUE(fs::exists(options_.cache_file));
  const std::string description = DescribeBenchmarks(*first);
  EXPECT_NE(description.find("fp32 (n_layer 2"), std::string::npos) << description;
  EXPECT_EQ(description.find("cached"), std::string::npos) << description;

  // A second start with the same key reads the file: the very figures, marked cached.
  auto second = RunDeviceBenchmark(options_);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->cached);
  ASSERT_EQ(second->benchmarks.size(), 1u);
  EXPECT_EQ(second->benchmarks[0].SerializeAsString(), b.SerializeAsString());
  EXPECT_NE(DescribeBenchmarks(*second).find("(cached)"), std::string::npos);

  // Another ablate version (or thread count, device, torch) is another key: measured again.
  options_.ablate_version = "test-2";
  auto third = RunDeviceBenchmark(options_);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_FALSE(third->cached);
}

TEST_F(DeviceBenchmarkTest, CorruptCacheIsMeasuredAgainAndRewritten) {
  ASSERT_TRUE(util::WriteFileAtomically(options_.cache_file, "{not json").ok());
  auto result = RunDeviceBenchmark(options_);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->cached);
  auto again = RunDeviceBenchmark(options_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->cached);
}

TEST_F(DeviceBenchmarkTest, AbsentDeviceIsAnErrorNotACrash) {
  options_.device = "mps";  // never present on a Linux test machine
  auto result = RunDeviceBenchmark(options_);
  EXPECT_FALSE(result.ok());
  // This machine's lack, not a run's (worker/failure_class.h).
  EXPECT_TRUE(absl::IsUnavailable(result.status())) << result.status();
}

// A worker told to stop (SIGTERM) while it measures: the benchmark ends between its steps
// instead of running out its measurement, and says it was stopped, caching nothing.
TEST_F(DeviceBenchmarkTest, StopsBetweenStepsWhenAsked) {
  int asked = 0;
  options_.should_stop = [&] { return ++asked >= 3; };
  auto stopped = RunDeviceBenchmark(options_);
  EXPECT_TRUE(absl::IsCancelled(stopped.status())) << stopped.status();
  EXPECT_EQ(asked, 3) << "asked before the model is built and before each step, then no more";
  EXPECT_FALSE(fs::exists(options_.cache_file));

  // The self-check of a benched worker: no cache file, so measured every time.
  options_.should_stop = nullptr;
  options_.cache_file.clear();
  auto measured = RunDeviceBenchmark(options_);
  ASSERT_TRUE(measured.ok()) << measured.status();
  EXPECT_FALSE(measured->cached);
  EXPECT_FALSE(RunDeviceBenchmark(options_)->cached);
}

}  // namespace
}  // namespace ablate::train
