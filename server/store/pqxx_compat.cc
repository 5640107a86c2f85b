#include "server/store/pqxx_compat.h"

#include <mutex>
#include <set>
#include <unordered_map>

namespace ablate::server::pg {
namespace {

std::mutex& PreparedMu() {
  static std::mutex mu;
  return mu;
}
// connection -> names prepared on it. Entries are keyed by address; see ForgetConnection.
std::unordered_map<const Connection*, std::set<std::string>>& Prepared() {
  static auto* prepared = new std::unordered_map<const Connection*, std::set<std::string>>;
  return *prepared;
}

#if PQXX_VERSION_MAJOR < 7
class Receiver : public pqxx::notification_receiver {
 public:
  Receiver(pqxx::connection_base& c, const std::string& channel, NotifyFn fn)
      : pqxx::notification_receiver(c, channel), fn_(std::move(fn)) {}
  void operator()(const std::string& payload, int /*backend_pid*/) override {
    fn_(channel(), payload);
  }

 private:
  NotifyFn fn_;
};
#endif

}  // namespace

bool IsPrepared(const Connection& conn, const std::string& name) {
  std::lock_guard<std::mutex> lock(PreparedMu());
  auto it = Prepared().find(&conn);
  return it != Prepared().end() && it->second.count(name) > 0;
}

void MarkPrepared(const Connection& conn, const std::string& name) {
  std::lock_guard<std::mutex> lock(PreparedMu());
  Prepared()[&conn].insert(name);
}

void ForgetConnection(const Connection& conn) {
  std::lock_guard<std::mutex> lock(PreparedMu());
  Prepared().erase(&conn);
}

void RegisterAll([[maybe_unused]] Connection& conn) {
#if PQXX_VERSION_MAJOR < 7
  for (const sql::Statement& statement : sql::kStatements) {
    const std::string id(statement.name);
    if (IsPrepared(conn, id)) continue;
    conn.prepare(id, std::string(statement.text));
    MarkPrepared(conn, id);
  }
#endif
}

std::shared_ptr<void> Listen(pqxx::connection& conn, const std::string& channel, NotifyFn fn) {
#if PQXX_VERSION_MAJOR >= 7
  conn.listen(channel, [fn = std::move(fn)](pqxx::notification n) {
    fn(std::string(n.channel), std::string(n.payload));
  });
  return nullptr;  // the connection owns the subscription
#else
  return std::make_shared<Receiver>(conn, channel, std::move(fn));
#endif
}

}  // namespace ablate::server::pg
