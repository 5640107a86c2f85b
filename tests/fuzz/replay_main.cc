// Replays every file of the given directories (or files) through the fuzz entry, in the normal
// build, so CI keeps the corpus -- examples, hostile cases, and inputs the fuzzer found -- passing
// without clang or libFuzzer. Fails if an input takes more than a second.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const auto& e : fs::directory_iterator(argv[i])) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else {
      files.emplace_back(argv[i]);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: spec_fuzz_replay DIR_OR_FILE...  (no inputs found)\n");
    return 2;
  }
  int slow = 0;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto t0 = std::chrono::steady_clock::now();
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 1.0) {
      std::fprintf(stderr, "%s: %.2f s (limit 1 s)\n", f.c_str(), s);
      ++slow;
    }
  }
  std::printf("replayed %zu inputs, %d over 1 s\n", files.size(), slow);
  return slow == 0 ? 0 : 1;
}
