#include "worker/slots.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/util/threads.h"

namespace ablate::worker {

absl::StatusOr<int> ThreadsPerSlot(int threads, int slots, int cores) {
  if (slots < 1 || slots > kMaxSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("--slots must be between 1 and ", kMaxSlots, " (got ", slots, ")"));
  }
  if (threads > 0 && threads < slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads ", threads, " cannot give each of --slots ", slots,
                     " a thread; --threads is the worker's total (0: all cores)"));
  }
  return util::ShareOf(util::ThreadsOrAll(threads, cores), slots);
}

SlotScheduler::SlotScheduler(int slots, int max_runs)
    : busy_(static_cast<size_t>(std::max(1, slots)), false), max_runs_(max_runs) {}

bool SlotScheduler::WantLeaseIgnoringSlots() const {
  return !stopped_ && (max_runs_ <= 0 || started_ < max_runs_);
}

bool SlotScheduler::WantLease() const { return busy() < slots() && WantLeaseIgnoringSlots(); }

int SlotScheduler::Acquire() {
  auto free = std::find(busy_.begin(), busy_.end(), false);
  if (free == busy_.end()) return -1;
  *free = true;
  ++started_;
  return static_cast<int>(free - busy_.begin());
}

void SlotScheduler::Release(int slot) {
  if (slot >= 0 && slot < slots()) busy_[static_cast<size_t>(slot)] = false;
}

int SlotScheduler::busy() const {
  return static_cast<int>(std::count(busy_.begin(), busy_.end(), true));
}

}  // namespace ablate::worker
