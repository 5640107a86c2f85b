#include "server/store/notifier.h"

#include <chrono>
#include <memory>

#include "common/util/backoff.h"
#include "pqxx/pqxx"
#include "server/store/channels.h"
#include "server/store/pqxx_compat.h"
#include "spdlog/spdlog.h"

namespace ablate::server {
namespace {

// Reconnecting the listener: soon after a blip, then no more than every 5 s while PostgreSQL
// is away. No jitter: there is one listener per server process, nothing to spread out.
constexpr util::BackoffPolicy kReconnectBackoff{std::chrono::milliseconds(100),
                                                std::chrono::seconds(5), 2, 0};

}  // namespace

Notifier::Notifier(std::string database_url) : url_(std::move(database_url)) {}

Notifier::~Notifier() { Stop(); }

void Notifier::AddHandler(Handler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  handlers_.push_back(std::move(handler));
}

void Notifier::Start() {
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void Notifier::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void Notifier::Dispatch(const std::string& channel, const std::string& payload) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& h : handlers_) h(channel, payload);
}

void Notifier::Loop() {
  util::Backoff backoff(kReconnectBackoff);
  bool was_connected = false;
  bool first_failure = true;  // since start or the last connection: the one worth a warning
  while (!stop_) {
    try {
      pqxx::connection conn(url_);
      pg::ForgetConnection(conn);  // nothing is prepared on a new connection
      auto fn = [this](const std::string& c, const std::string& p) { Dispatch(c, p); };
      auto queue = pg::Listen(conn, channels::kQueue, fn);
      auto sweep = pg::Listen(conn, channels::kSweep, fn);
      auto run = pg::Listen(conn, channels::kRun, fn);
      // LISTEN is issued lazily by libpqxx; a statement makes it happen now, so the resync below
      // cannot race a change that commits before we are listening.
      {
        pqxx::nontransaction ping(conn);
        pg::Exec(ping, "ping");
      }
      connected_ = true;
      backoff.Reset();
      first_failure = true;
      if (was_connected) spdlog::info("notify listener reconnected");
      was_connected = true;
      Dispatch("", "");
      while (!stop_) {
        conn.await_notification(0, 200000);
        if (!conn.is_open()) throw pqxx::broken_connection("listener connection closed");
      }
    } catch (const std::exception& e) {
      if (connected_.exchange(false) || first_failure) {
        spdlog::warn("notify listener: {}; reconnecting", e.what());
      }
      first_failure = false;
    }
    connected_ = false;
    util::SleepUnless(backoff.Next(), [this] { return stop_.load(); });
  }
}

}  // namespace ablate::server
