// The fuzz entry for the sweep-file and run-file parsers (common/sweep), shared by the libFuzzer
// target (bench/fuzz/run, clang + ASan + UBSan) and the corpus replay that ctest runs in the
// normal build. Any input must come back as a Status: no crash, no leak, no exception, and no
// more time than the raw-text caps allow.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/sweep/sweep.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // A small grid limit keeps each input cheap; the walk over the grid is what the server runs.
  ablate::sweep::Limits limits;
  limits.max_runs = 2000;
  auto sweep = ablate::sweep::ParseSweep(text, "fuzz.yaml", limits);
  if (sweep.ok()) {
    int64_t runs = 0;
    auto walked = ablate::sweep::ForEachRun(*sweep, limits, [&](ablate::v1::RunSpec&&) {
      ++runs;
      return absl::OkStatus();
    });
    // ParseSweep already walked the same grid: a second walk must agree.
    if (!walked.ok() || runs != *ablate::sweep::CountRuns(*sweep, limits)) __builtin_trap();
  }
  (void)ablate::sweep::ParseRunFile(text, "fuzz.yaml");
  return 0;
}
