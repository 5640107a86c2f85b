// What the benchmarks that talk to PostgreSQL share: a shell helper, and the database they run
// against — `--database-url URL` when given, else a throwaway cluster that scripts/dev-postgres
// starts here and stops when the benchmark ends. Needs ABLATE_SOURCE_DIR (the target defines it).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace ablate::bench {

// Runs `cmd` through the shell; its stdout without trailing white space ("" if it cannot run).
inline std::string Shell(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  pclose(p);
  return std::string(absl::StripTrailingAsciiWhitespace(out));
}

class BenchDatabase {
 public:
  // `prog` names the benchmark in the error printed when no database can be had (url() empty).
  BenchDatabase(int argc, char** argv, const char* prog) {
    for (int i = 1; i + 1 < argc; ++i) {
      if (std::string(argv[i]) == "--database-url") url_ = argv[i + 1];
    }
    if (!url_.empty()) return;
    pg_dir_ =
        (std::filesystem::temp_directory_path() / absl::StrCat("ablate-", prog, "-pg-", getpid()))
            .string();
    url_ = Shell(absl::StrCat(ABLATE_SOURCE_DIR, "/scripts/dev-postgres start ", pg_dir_));
    if (url_.empty()) {
      std::fprintf(stderr, "%s: could not start PostgreSQL (give --database-url)\n", prog);
    }
  }
  ~BenchDatabase() {
    if (!pg_dir_.empty())
      Shell(absl::StrCat(ABLATE_SOURCE_DIR, "/scripts/dev-postgres stop ", pg_dir_));
  }
  BenchDatabase(const BenchDatabase&) = delete;
  BenchDatabase& operator=(const BenchDatabase&) = delete;

  const std::string& url() const { return url_; }

 private:
  std::string url_;
  std::string pg_dir_;  // set when this process started the cluster
};

}  // namespace ablate::bench
