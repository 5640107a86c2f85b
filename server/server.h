// One ablate-server process (or one replica inside a test): wires the store, the listener, the
// broker, the services and the exporter together, and shuts them down in order.
#pragma once

#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "common/util/net.h"
#include "server/options.h"

namespace ablate::server {

class Server {
 public:
  // Migrates (unless options.migrate is false), binds, and starts serving.
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options);
  ~Server();

  int port() const;  // the bound gRPC port (useful with listen port 0)
  // Lease calls parked now, waiting for a run (tests and benchmarks).
  int waiting_leases() const;
  // Stops accepting calls, answers waiting long-polls, lets running calls finish (up to
  // `grace`), then stops the background work.
  void Shutdown(std::chrono::milliseconds grace = std::chrono::seconds(10));

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True for 127.0.0.0/8, ::1, localhost (listening there needs neither TLS nor --insecure).
using util::IsLoopback;

}  // namespace ablate::server
