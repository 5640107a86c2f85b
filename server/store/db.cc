#include "server/store/db.h"

#include <openssl/rand.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/util/fields.h"
#include "spdlog/spdlog.h"

namespace ablate::server {
namespace {

// 8 hex characters: enough to find one log line among a day's errors.
std::string NewErrorId() {
  unsigned char bytes[4];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    // No randomness: a process-wide counter still tells errors apart.
    static std::atomic<uint32_t> counter{0};
    const uint32_t n = ++counter;
    for (int i = 0; i < 4; ++i) bytes[i] = static_cast<unsigned char>(n >> (8 * i));
  }
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(bytes), 4));
}

}  // namespace

// PostgreSQL's text names constraints, echoes values (a 1 MB sweep name, in full) and sometimes
// SQL: it goes to the server log under a short random id, and the client gets `summary` and the
// id to quote when reporting the problem.
absl::Status HiddenDatabaseError(absl::StatusCode code, const std::string& what,
                                 absl::string_view summary, absl::string_view detail) {
  const std::string id = NewErrorId();
  spdlog::error("database error id={} op={} code={} detail={}", id, util::LogQuote(what),
                absl::StatusCodeToString(code), util::LogQuote(detail, 2000));
  return absl::Status(code, absl::StrCat(what, ": ", summary, " (error id ", id, ")"));
}

Db::Db(std::string url, int pool_size)
    : url_(std::move(url)), slots_(pool_size > 0 ? pool_size : 1) {
  for (auto& slot : slots_) free_.push_back(&slot);
}

Db::~Db() = default;

std::unique_ptr<pqxx::connection>* Db::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !free_.empty(); });
  auto* slot = free_.back();
  free_.pop_back();
  return slot;
}

void Db::Release(std::unique_ptr<pqxx::connection>* slot, bool broken) {
  // A connection that broke mid-transaction is dropped rather than reused: libpqxx would try to
  // reactivate it, but a fresh one is simpler to reason about after a PostgreSQL restart. Its
  // record of prepared statements goes with it (a new connection may not reuse its address).
  if (broken && *slot != nullptr) {
    pg::ForgetConnection(**slot);
    slot->reset();
  }
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(slot);
  cv_.notify_one();
}

absl::Status Db::Fill() {
  // Every slot at once: the pool is this call's until it returns.
  std::vector<std::unique_ptr<pqxx::connection>*> taken;
  for (size_t i = 0; i < slots_.size(); ++i) taken.push_back(Acquire());
  absl::Status first;
  for (auto* slot : taken) {
    bool broken = false;
    try {
      if (*slot == nullptr) {
        *slot = std::make_unique<pqxx::connection>(url_);
        pg::ForgetConnection(**slot);
      }
      pg::RegisterAll(**slot);
    } catch (...) {
      bool retry = false;
      absl::Status s = Convert("open the connection pool", &retry, &broken);
      broken = true;
      if (first.ok()) first = s;
    }
    Release(slot, broken);
  }
  return first;
}

absl::Status Db::Ping() {
  return Tx<bool>("ping",
                  [](pqxx::work& tx) -> absl::StatusOr<bool> {
                    pg::Exec(tx, "ping");
                    return true;
                  })
      .status();
}

absl::Status Db::Convert(const std::string& what, bool* retry, bool* broken) {
  using absl::StatusCode;
  try {
    throw;
  } catch (const pqxx::broken_connection& e) {
    // Commit failures surface as in_doubt_error, so a broken connection here means nothing was
    // committed and one more try on a fresh connection is safe (a pooled connection goes stale
    // whenever PostgreSQL restarts).
    *broken = true;
    *retry = true;
    return HiddenDatabaseError(StatusCode::kUnavailable, what, "database unavailable", e.what());
  } catch (const pqxx::in_doubt_error& e) {
    *broken = true;
    return HiddenDatabaseError(StatusCode::kUnavailable, what, "commit outcome unknown", e.what());
  } catch (const pqxx::statement_completion_unknown& e) {
    *broken = true;
    return HiddenDatabaseError(StatusCode::kUnavailable, what, "database unavailable", e.what());
  } catch (const pqxx::transaction_rollback& e) {
    *retry = true;
    return HiddenDatabaseError(StatusCode::kUnavailable, what, "transaction conflict", e.what());
  } catch (const pqxx::unique_violation& e) {
    return HiddenDatabaseError(StatusCode::kAlreadyExists, what, "already exists", e.what());
  } catch (const pqxx::sql_error& e) {
    // Class 57 (operator intervention: admin shutdown) and 08 (connection exception) arrive as
    // plain sql_errors when PostgreSQL restarts under a live session.
    const std::string& state = e.sqlstate();
    if (state.rfind("57", 0) == 0 || state.rfind("08", 0) == 0) {
      *broken = true;
      return HiddenDatabaseError(StatusCode::kUnavailable, what, "database unavailable", e.what());
    }
    return HiddenDatabaseError(StatusCode::kInternal, what, "internal database error",
                               absl::StrCat(e.what(), " [sqlstate ", state, "]"));
  } catch (const std::exception& e) {
    return HiddenDatabaseError(StatusCode::kInternal, what, "internal error", e.what());
  } catch (...) {
    return HiddenDatabaseError(StatusCode::kInternal, what, "internal error", "unknown exception");
  }
}

}  // namespace ablate::server
