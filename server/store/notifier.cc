#include "server/store/notifier.h"

#include <chrono>
#include <memory>

#include "pqxx/pqxx"
#include "server/store/channels.h"
#include "server/store/pqxx_compat.h"
#include "spdlog/spdlog.h"

namespace ablate::server {
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
  auto backoff = std::chrono::milliseconds(100);
  bool was_connected = false;
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
      backoff = std::chrono::milliseconds(100);
      if (was_connected) spdlog::info("notify listener reconnected");
      was_connected = true;
      Dispatch("", "");
      while (!stop_) {
        conn.await_notification(0, 200000);
        if (!conn.is_open()) throw pqxx::broken_connection("listener connection closed");
      }
    } catch (const std::exception& e) {
      if (connected_.exchange(false) || backoff == std::chrono::milliseconds(100)) {
        spdlog::warn("notify listener: {}; reconnecting", e.what());
      }
    }
    connected_ = false;
    auto until = std::chrono::steady_clock::now() + backoff;
    while (!stop_ && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  }
}

}  // namespace ablate::server
