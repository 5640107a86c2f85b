#include "server/store/statements.h"

#include <atomic>
#include <cstdlib>

namespace ablate::server::sql {
namespace {

std::atomic<bool> executed[kStatementCount];

}  // namespace

void UnknownStatementName() { std::abort(); }

void MarkExecuted(size_t index) {
  // Read first: the hot statements run on every thread, and a store each time would bounce the
  // cache line between them.
  if (!executed[index].load(std::memory_order_relaxed)) {
    executed[index].store(true, std::memory_order_relaxed);
  }
}

bool Executed(size_t index) { return executed[index].load(std::memory_order_relaxed); }

}  // namespace ablate::server::sql
