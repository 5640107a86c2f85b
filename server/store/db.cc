#include "server/store/db.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ablate::server {

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
  // reactivate it, but a fresh one is simpler to reason about after a PostgreSQL restart.
  if (broken) slot->reset();
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(slot);
  cv_.notify_one();
}

absl::Status Db::Ping() {
  return Tx<bool>("ping",
                  [](pqxx::work& tx) -> absl::StatusOr<bool> {
                    tx.exec("SELECT 1");
                    return true;
                  })
      .status();
}

absl::Status Db::Convert(const std::string& what, bool* retry, bool* broken) {
  try {
    throw;
  } catch (const pqxx::broken_connection& e) {
    // Commit failures surface as in_doubt_error, so a broken connection here means nothing was
    // committed and one more try on a fresh connection is safe (a pooled connection goes stale
    // whenever PostgreSQL restarts).
    *broken = true;
    *retry = true;
    return absl::UnavailableError(absl::StrCat(what, ": database unavailable: ", e.what()));
  } catch (const pqxx::in_doubt_error& e) {
    *broken = true;
    return absl::UnavailableError(absl::StrCat(what, ": commit outcome unknown: ", e.what()));
  } catch (const pqxx::statement_completion_unknown& e) {
    *broken = true;
    return absl::UnavailableError(absl::StrCat(what, ": database unavailable: ", e.what()));
  } catch (const pqxx::transaction_rollback& e) {
    *retry = true;
    return absl::UnavailableError(absl::StrCat(what, ": transaction conflict: ", e.what()));
  } catch (const pqxx::unique_violation& e) {
    return absl::AlreadyExistsError(absl::StrCat(what, ": ", e.what()));
  } catch (const pqxx::sql_error& e) {
    // Class 57 (operator intervention: admin shutdown) and 08 (connection exception) arrive as
    // plain sql_errors when PostgreSQL restarts under a live session.
    const std::string& state = e.sqlstate();
    if (state.rfind("57", 0) == 0 || state.rfind("08", 0) == 0) {
      *broken = true;
      return absl::UnavailableError(absl::StrCat(what, ": database unavailable: ", e.what()));
    }
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(what, ": unknown error"));
  }
}

}  // namespace ablate::server
