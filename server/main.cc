// ablate-server: the coordinator (serve), its schema (migrate), its tokens (token ...) and its
// checkpoint store's garbage (gc).
#include <chrono>
#include <csignal>
#include <cstdio>

#include "CLI/CLI.hpp"
#include "common/cli/edge.h"
#include "server/flags.h"
#include "server/gc_command.h"
#include "server/server.h"
#include "server/token_command.h"
#include "spdlog/spdlog.h"

namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "ablate-server: %s\n", std::string(s.message()).c_str());
  return 1;
}

// Blocks SIGTERM/SIGINT in every thread (call before any thread starts), then waits for one.
int WaitForSignal(const sigset_t& set) {
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ablate::server;
  CLI::App app{"ablate-server: sweeps and a lease-based run queue in PostgreSQL, over gRPC"};
  app.require_subcommand(1);
  ServerOptions options;
  std::string log_level = "info", auth_mode = "token", role, name;
  bool no_migrate = false;
  int64_t token_id = 0;

  auto* serve = app.add_subcommand("serve", "Serve SweepService and WorkerService");
  AddDatabaseFlag(serve, &options.database_url);
  AddServeFlags(serve, &options, &auth_mode, &no_migrate);
  AddLogFlag(serve, &log_level);
  auto* migrate = app.add_subcommand("migrate", "Apply pending schema migrations and exit");
  AddDatabaseFlag(migrate, &options.database_url);
  auto* gc = app.add_subcommand(
      "gc", "Remove checkpoint-store files no run references (refused or interrupted uploads)");
  AddDatabaseFlag(gc, &options.database_url);
  gc->add_option("--store-dir", options.store_dir, "Content-addressed checkpoint store directory")
      ->envname("ABLATE_STORE_DIR")
      ->capture_default_str();
  int64_t min_age_seconds = 3600;
  bool dry_run = false;
  gc->add_option("--min-age-seconds", min_age_seconds,
                 "Keep files younger than this (an upload in flight)")
      ->capture_default_str();
  gc->add_flag("--dry-run", dry_run, "List what would be removed; remove nothing");
  auto* token = app.add_subcommand("token", "Manage bearer tokens");
  token->require_subcommand(1);
  auto* create = token->add_subcommand("create", "Create a token; prints it once");
  AddDatabaseFlag(create, &options.database_url);
  create->add_option("--role", role, "worker | user | admin")->required();
  create->add_option("--name", name, "Label, e.g. the worker's host");
  auto* list = token->add_subcommand("list", "List tokens (never their secrets)");
  AddDatabaseFlag(list, &options.database_url);
  auto* revoke = token->add_subcommand("revoke", "Revoke a token by id");
  AddDatabaseFlag(revoke, &options.database_url);
  revoke->add_option("ID", token_id, "Token id (see token list)")->required();
  auto* version = ablate::cli_edge::AddVersion(app, "ablate-server");
  if (auto code = ablate::cli_edge::Parse(app, argc, argv, "ablate-server")) return *code;

  if (version->parsed()) {
    std::printf("%s\n", ablate::cli_edge::VersionText("ablate-server").c_str());
    return 0;
  }
  if (migrate->parsed()) {
    auto s = RunMigrations(options.database_url);
    return s.ok() ? 0 : Fail(s);
  }
  if (gc->parsed()) {
    auto s = RunGc(options.database_url, options.store_dir, min_age_seconds, dry_run);
    return s.ok() ? 0 : Fail(s);
  }
  if (create->parsed()) {
    auto s = TokenCreate(options.database_url, role, name);
    return s.ok() ? 0 : Fail(s);
  }
  if (list->parsed()) {
    auto s = TokenList(options.database_url);
    return s.ok() ? 0 : Fail(s);
  }
  if (revoke->parsed()) {
    auto s = TokenRevoke(options.database_url, token_id);
    return s.ok() ? 0 : Fail(s);
  }

  SetUpLogging(log_level);
  options.auth = auth_mode == "token";
  options.migrate = !no_migrate;
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto server = Server::Start(options);
  if (!server.ok()) return Fail(server.status());
  const int sig = WaitForSignal(signals);
  spdlog::info("signal received signal={}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  (*server)->Shutdown(std::chrono::seconds(10));
  spdlog::info("stopped");
  return 0;
}
