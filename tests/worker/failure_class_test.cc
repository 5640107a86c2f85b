// Whose fault ended an attempt: one test per class and cause (worker/failure_class.h), with the
// messages the sources really produce, and the fault file of the hidden --test-fault-file flag.
#include "worker/failure_class.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace ablate::worker {
namespace {

v1::FaultClass InTraining(const absl::Status& s) { return ClassifyFailure(s, FaultStage::kTrain); }

TEST(FailureClass, ASpecTheTrainerRefusesIsTheRuns) {
  EXPECT_EQ(InTraining(absl::InvalidArgumentError(
                "invalid run spec: n_embd 100 is not divisible by n_head 3")),
            v1::FAULT_RUN);
  EXPECT_EQ(InTraining(absl::InvalidArgumentError(
                "dtype: bfloat16 needs a CUDA or CPU device; this run resolved to mps")),
            v1::FAULT_RUN);
}

TEST(FailureClass, DataTheRunNamesThatIsNotValidIsTheRuns) {
  // Served with a matching SHA-256: every machine reads the same bytes.
  EXPECT_EQ(
      InTraining(absl::InvalidArgumentError("/w/cache/abc.tok: not a token file (size 3 bytes)")),
      v1::FAULT_RUN);
  EXPECT_EQ(InTraining(absl::InvalidArgumentError(
                "data.train: /w/datasets/x.txt has only 12 tokens; block_size 64 needs more than "
                "65")),
            v1::FAULT_RUN);
  EXPECT_EQ(
      ClassifyFailure(absl::FailedPreconditionError(
                          "data file corpus.txt has no content hash; the server must serve it"),
                      FaultStage::kFetchInputs),
      v1::FAULT_RUN);
  // A CUDA kernel's index check: a token id past the vocabulary, the same on every GPU.
  EXPECT_EQ(
      InTraining(absl::InternalError("training failed: CUDA error: device-side assert triggered")),
      v1::FAULT_RUN);
}

TEST(FailureClass, OutOfMemoryIsTheWorkers) {
  EXPECT_EQ(InTraining(absl::ResourceExhaustedError(
                "out of memory on cuda:0: CUDA out of memory. Tried to allocate 2.00 GiB")),
            v1::FAULT_WORKER);
  // The same text under a code some source got wrong still blames the machine.
  EXPECT_EQ(
      InTraining(absl::InvalidArgumentError("ckpt.pt: unreadable checkpoint: std::bad_alloc")),
      v1::FAULT_WORKER);
  EXPECT_EQ(InTraining(absl::InternalError("training failed: MPS backend out of memory")),
            v1::FAULT_WORKER);
}

TEST(FailureClass, DeviceRuntimeErrorsAreTheWorkers) {
  EXPECT_EQ(InTraining(absl::InternalError(
                "training failed: CUDA error: an illegal memory access was encountered")),
            v1::FAULT_WORKER);
  EXPECT_EQ(
      InTraining(absl::InternalError("training failed: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR")),
      v1::FAULT_WORKER);
  EXPECT_EQ(InTraining(absl::InternalError(
                "training failed: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling "
                "cublasSgemm")),
            v1::FAULT_WORKER);
  EXPECT_EQ(InTraining(absl::UnavailableError(
                "device cuda requested, but no CUDA GPU is visible to this process")),
            v1::FAULT_WORKER);
}

TEST(FailureClass, DiskIsTheWorkers) {
  EXPECT_EQ(InTraining(absl::ResourceExhaustedError(
                "writing checkpoint /w/runs/7-a1/x.tmp: No space left on device")),
            v1::FAULT_WORKER);
  EXPECT_EQ(InTraining(absl::InternalError(
                "/w/runs/7-a1/checkpoints: cannot create directory: Read-only file system")),
            v1::FAULT_WORKER);
  EXPECT_EQ(InTraining(absl::InternalError(
                "/w/runs/7-a1/checkpoints: cannot create directory: Permission denied")),
            v1::FAULT_WORKER);
}

TEST(FailureClass, AMissingLibraryIsTheWorkers) {
  EXPECT_EQ(InTraining(absl::InternalError(
                "training failed: libcudnn_cnn_infer.so.8: cannot open shared object file: No "
                "such file or directory")),
            v1::FAULT_WORKER);
  EXPECT_EQ(InTraining(absl::InternalError("training failed: dlopen libnvrtc.so failed")),
            v1::FAULT_WORKER);
}

TEST(FailureClass, AThreadThatCannotStartIsTheWorkers) {
  EXPECT_EQ(InTraining(absl::InternalError("training failed: Resource temporarily unavailable")),
            v1::FAULT_WORKER);
  EXPECT_EQ(ClassifyFailure(absl::InternalError("cannot start the heartbeat thread: whatever"),
                            FaultStage::kThread),
            v1::FAULT_WORKER);
}

TEST(FailureClass, TheSpoolAndRunDirAreTheWorkersWhateverTheCode) {
  EXPECT_EQ(ClassifyFailure(
                absl::InternalError("spool: cannot create directory: Operation not permitted"),
                FaultStage::kSpool),
            v1::FAULT_WORKER);
  EXPECT_EQ(ClassifyFailure(absl::InvalidArgumentError("anything"), FaultStage::kRunDir),
            v1::FAULT_WORKER);
  EXPECT_EQ(ClassifyFailure(absl::DataLossError("corrupt spool record"), FaultStage::kSpool),
            v1::FAULT_WORKER);
}

TEST(FailureClass, ATrainerCrashIsTheWorkersByWhatItsSourceAttached) {
  EXPECT_EQ(InTraining(WithFault(absl::AbortedError("the trainer crashed: unknown exception"),
                                 v1::FAULT_WORKER)),
            v1::FAULT_WORKER);
  // What train::Train returns for an exception of no known type: no class attached, the text
  // says it.
  EXPECT_EQ(InTraining(absl::AbortedError("the trainer crashed: an exception of unknown type")),
            v1::FAULT_WORKER);
  // The attached class wins over the code and the stage.
  EXPECT_EQ(ClassifyFailure(WithFault(absl::InternalError("x"), v1::FAULT_RUN), FaultStage::kSpool),
            v1::FAULT_RUN);
}

TEST(FailureClass, WhatCannotBeToldIsUnknown) {
  EXPECT_EQ(InTraining(absl::InternalError(
                "training failed: mat1 and mat2 shapes cannot be multiplied (4x8 and 9x8)")),
            v1::FAULT_UNKNOWN);
  EXPECT_EQ(ClassifyFailure(absl::DataLossError("data set: sha256 mismatch (got a, want b)"),
                            FaultStage::kFetchInputs),
            v1::FAULT_UNKNOWN);
  EXPECT_EQ(InTraining(absl::UnknownError("?")), v1::FAULT_UNKNOWN);
  EXPECT_EQ(InTraining(absl::OkStatus()), v1::FAULT_UNKNOWN);
}

TEST(FailureClass, Names) {
  EXPECT_STREQ(FaultClassName(v1::FAULT_RUN), "run");
  EXPECT_STREQ(FaultClassName(v1::FAULT_WORKER), "worker");
  EXPECT_STREQ(FaultClassName(v1::FAULT_UNKNOWN), "unknown");
  EXPECT_STREQ(FaultClassName(v1::FAULT_CLASS_UNSPECIFIED), "unknown");
}

class InjectedFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::path(::testing::TempDir()) /
             ("fault-" + std::to_string(::getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    std::filesystem::remove(path_);
  }
  void TearDown() override { std::filesystem::remove(path_); }
  void Write(const std::string& text) { std::ofstream(path_) << text; }
  std::string path_;
};

TEST_F(InjectedFaultTest, NoFileNoFault) {
  EXPECT_FALSE(InjectedFault(path_).has_value());
  EXPECT_FALSE(InjectedFault("").has_value());
}

TEST_F(InjectedFaultTest, AnEmptyFileIsTheDefaultDeviceError) {
  Write("");
  auto fault = InjectedFault(path_);
  ASSERT_TRUE(fault.has_value());
  EXPECT_EQ(fault->message(), kDefaultInjectedFault);
  EXPECT_EQ(InTraining(*fault), v1::FAULT_WORKER);
}

TEST_F(InjectedFaultTest, TheFilesTextIsTheErrorAndTheWorkersWhateverItSays) {
  Write("token file invalid but not marked\n");
  auto fault = InjectedFault(path_);
  ASSERT_TRUE(fault.has_value());
  EXPECT_EQ(fault->message(), "token file invalid but not marked");
  EXPECT_EQ(InTraining(*fault), v1::FAULT_WORKER);
}

TEST_F(InjectedFaultTest, ARunPrefixBlamesTheRun) {
  Write("run: token file invalid (injected)\n");
  auto fault = InjectedFault(path_);
  ASSERT_TRUE(fault.has_value());
  EXPECT_EQ(fault->message(), "token file invalid (injected)");
  EXPECT_EQ(InTraining(*fault), v1::FAULT_RUN);
  // Removing the file heals the worker.
  std::filesystem::remove(path_);
  EXPECT_FALSE(InjectedFault(path_).has_value());
}

}  // namespace
}  // namespace ablate::worker
