// The sweep files shipped in examples/ parse, validate and expand to the sizes their comments
// promise, so a user's first `ablate submit` never fails on our own example.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/sweep/sweep.h"

namespace ablate::sweep {
namespace {

std::string ExamplesDir() {
  const char* src = std::getenv("ABLATE_SOURCE_DIR");
  return std::string(src ? src : ".") + "/examples";
}

TEST(Examples, EverySweepFileParsesAndExpands) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(ExamplesDir())) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    auto sweep = ParseSweep(text.str(), entry.path().filename().string());
    ASSERT_TRUE(sweep.ok()) << sweep.status();
    auto runs = Expand(*sweep);
    ASSERT_TRUE(runs.ok()) << runs.status();
    EXPECT_FALSE(runs->empty()) << entry.path();
  }
  EXPECT_GT(files, 0) << "no examples/*.yaml under " << ExamplesDir();
}

}  // namespace
}  // namespace ablate::sweep
