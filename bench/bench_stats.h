// What the benchmarks measure with: percentiles, and the CPU time of this process and of
// PostgreSQL (with other work sharing the cores, CPU per operation says more about capacity than
// wall-clock time does).
#pragma once

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ablate::bench {

inline double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

// CPU seconds used so far by this process (server + load generator); ThreadCpu: by the calling
// thread (a load generator's threads add theirs up, so the server's share is what remains).
inline double SelfCpu() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

inline double ThreadCpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// CPU seconds used so far by PostgreSQL: with `postmaster` (a cluster's postmaster pid) by that
// cluster only, its exited backends included (the postmaster's reaped children: pgbench's, once
// it ends); with 0 by every `postgres` process on the machine (an upper bound when other clusters
// run beside).
inline double PostgresCpu(pid_t postmaster = 0) {
  double total = 0;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || line.substr(open + 1, close - open - 1) != "postgres") {
      continue;
    }
    const pid_t pid = static_cast<pid_t>(std::atoll(line.c_str()));
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0, children = 0;
    pid_t ppid = 0;
    for (int i = 3; i <= 17 && rest >> field; ++i) {
      if (i == 4) ppid = static_cast<pid_t>(std::stoll(field));
      if (i == 14) utime = std::stod(field);
      if (i == 15) stime = std::stod(field);
      if (i >= 16) children += std::stod(field);
    }
    if (postmaster != 0 && pid != postmaster && ppid != postmaster) continue;
    if (postmaster != 0 && pid == postmaster) total += children / tick;
    total += (utime + stime) / tick;
  }
  return total;
}

}  // namespace ablate::bench
