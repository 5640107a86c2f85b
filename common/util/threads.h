// What `--threads` means, in one place: 0 is every core, and runs trained together (`--slots`,
// `train --copies`) get an even share of the total.
#pragma once

#include <algorithm>
#include <thread>

namespace ablate::util {

// The machine's cores as std::thread reports them; at least 1 (it may report 0).
inline int Cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// `threads` when positive, else every core of `cores`.
inline int ThreadsOrAll(int threads, int cores = Cores()) {
  return threads > 0 ? threads : std::max(1, cores);
}

// One of `runs` runs' even share of `total` threads, at least one; a remainder stays idle rather
// than going to one run.
inline int ShareOf(int total, int runs) { return std::max(1, total / std::max(1, runs)); }

}  // namespace ablate::util
