// hostile_bench: a hostile client against a real ablate-server (token auth) on a throwaway
// PostgreSQL (scripts/dev-postgres).
//   1. Submits: 8 concurrent hostile SubmitSweep requests of each kind; the server's peak RSS
//      (VmHWM) and RSS after each burst from /proc/PID/status. Target: peak < 300 MB.
//   2. The whole RPC surface (surface.cc): one attack per rule and RPC (roles, no or revoked
//      token, another worker's identity or lease, sizes and counts, path-like names,
//      refine/prune input), each with the status code it must get; then bursts that abuse
//      memory, with the RSS after each.
// Prints figures; exits 1 if any attack was not refused as expected.
//
//   hostile_bench [--database-url URL] [--surface-only]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ablate/v1/ablate.grpc.pb.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/bench_db.h"
#include "bench/hostile/surface.h"
#include "grpcpp/grpcpp.h"

namespace {

using namespace ablate;

using ablate::bench::StatusMb;

const char kData[] = "data: {train: \"synthetic:50\", val: \"synthetic:10\"}\n";

struct Kind {
  const char* what;
  std::string yaml;
  bool dry_run;
};

std::vector<Kind> Kinds() {
  std::vector<Kind> kinds;
  // ~256 bytes expanding to 100,000 runs.
  kinds.push_back({"100k-run dry run",
                   absl::StrCat("name: amp\n", kData,
                                "fixed: {n_embd: 32, n_head: 2, steps: 100}\n"
                                "grid:\n  lr: [0.001, 0.002, 0.003, 0.004]\n"
                                "  seed: {linspace: {min: 0, max: 24999, "
                                "num: 25000}}\n"),
                   true});
  kinds.push_back({"800 KB of [[[ nesting",
                   absl::StrCat("name: deep\n", kData, "description: ", std::string(400 << 10, '['),
                                std::string(400 << 10, ']'), "\n"),
                   true});
  kinds.push_back(
      {"1 MB name", absl::StrCat("name: ", std::string((1 << 20) - 200, 'n'), "\n", kData), false});
  kinds.push_back({"100k-run real submit", kinds[0].yaml, false});
  return kinds;
}

}  // namespace

// `ablate-server token create` for `role`: the token's secret ("" on failure).
std::string CreateToken(const std::string& url, const std::string& role, const std::string& name) {
  return ablate::bench::Shell(absl::StrCat(ABLATE_SERVER_BIN, " token create --database-url '", url,
                                           "' --role ", role, " --name ", name, " 2>/dev/null"));
}

int main(int argc, char** argv) {
  ablate::bench::BenchDatabase db(argc, argv, "hostile_bench");
  if (db.url().empty()) return 1;
  bool surface_only = false;
  for (int i = 1; i < argc; ++i) surface_only |= std::string(argv[i]) == "--surface-only";
  const std::string& url = db.url();
  // Tokens need the schema; the revoked one is revoked before the server starts (no cache).
  ablate::bench::Shell(
      absl::StrCat(ABLATE_SERVER_BIN, " migrate --database-url '", url, "' 2>/dev/null"));
  ablate::bench::SurfaceTokens tokens;
  tokens.admin = CreateToken(url, "admin", "hostile-admin");
  tokens.user = CreateToken(url, "user", "hostile-user");
  tokens.worker_a = CreateToken(url, "worker", "hostile-worker-a");
  tokens.worker_b = CreateToken(url, "worker", "hostile-worker-b");
  tokens.revoked = CreateToken(url, "worker", "hostile-revoked");
  const std::string revoked_id = ablate::bench::Shell(
      absl::StrCat(ABLATE_SERVER_BIN, " token list --database-url '", url,
                   "' 2>/dev/null | awk '$NF == \"hostile-revoked\" {print $1}'"));
  ablate::bench::Shell(absl::StrCat(ABLATE_SERVER_BIN, " token revoke --database-url '", url, "' ",
                                    revoked_id, " 2>/dev/null"));
  if (tokens.admin.empty() || tokens.worker_b.empty() || revoked_id.empty()) {
    std::fprintf(stderr, "hostile_bench: could not create tokens with ablate-server token\n");
    return 1;
  }
  const std::string listen = absl::StrCat("127.0.0.1:", 20000 + getpid() % 20000);
  const std::string store =
      (std::filesystem::temp_directory_path() / absl::StrCat("ablate-hostile-store-", getpid()));
  const pid_t server = fork();
  if (server == 0) {
    execl(ABLATE_SERVER_BIN, ABLATE_SERVER_BIN, "serve", "--database-url", url.c_str(), "--listen",
          listen.c_str(), "--metrics-listen", "", "--auth", "token", "--store-dir", store.c_str(),
          "--max-checkpoint-bytes", "67108864", "--max-prepared-bytes", "67108864", "--log-level",
          "error", static_cast<char*>(nullptr));
    _exit(127);
  }
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(8 << 20);
  args.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(listen, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(30))) {
    std::fprintf(stderr, "hostile_bench: server did not come up on %s\n", listen.c_str());
    kill(server, SIGTERM);
    return 1;
  }
  std::printf("hostile_bench: ablate-server pid %d, RSS at start %.0f MB\n", server,
              StatusMb(server, "VmRSS"));
  int round = 0;
  for (const Kind& kind : surface_only ? std::vector<Kind>{} : Kinds()) {
    std::vector<std::thread> threads;
    std::vector<grpc::Status> results(8);
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < results.size(); ++i) {
      threads.emplace_back([&, i] {
        auto stub = v1::SweepService::NewStub(channel);
        grpc::ClientContext ctx;
        ctx.AddMetadata("authorization", absl::StrCat("Bearer ", tokens.admin));
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
        v1::SubmitSweepRequest req;
        std::string yaml = kind.yaml;
        // Distinct names for real submits of the valid kind.
        if (!kind.dry_run && yaml.rfind("name: amp\n", 0) == 0) {
          yaml.replace(0, 9, absl::StrCat("name: amp", round, "-", i));
        }
        req.set_spec_yaml(yaml);
        req.set_file_name("hostile.yaml");
        req.set_dry_run(kind.dry_run);
        v1::SubmitSweepResponse resp;
        results[i] = stub->SubmitSweep(&ctx, req, &resp);
      });
    }
    for (auto& t : threads) t.join();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int ok = 0, invalid = 0, busy = 0, other = 0;
    std::string sample;
    for (const auto& r : results) {
      if (r.ok()) {
        ++ok;
      } else if (r.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
        ++invalid;
      } else if (r.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        ++busy;
      } else {
        ++other;
      }
      if (!r.ok() && sample.empty()) sample = r.error_message().substr(0, 100);
    }
    std::printf(
        "%-22s 8 concurrent in %5.2f s: ok %d, invalid %d, busy %d, other %d; server peak RSS "
        "%.0f MB, RSS after %.0f MB%s%s\n",
        kind.what, secs, ok, invalid, busy, other, StatusMb(server, "VmHWM"),
        StatusMb(server, "VmRSS"), sample.empty() ? "" : "  e.g. ", sample.c_str());
    ++round;
  }
  const int unexpected = ablate::bench::RunSurfaceAttacks(channel, tokens, server);
  std::printf("server peak RSS over the whole run: %.0f MB   [target < 300 MB]\n",
              StatusMb(server, "VmHWM"));
  int status = 0;
  const bool alive = waitpid(server, &status, WNOHANG) == 0;
  std::printf("server %s\n", alive ? "still serving (no crash)" : "DIED during the run");
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);
  std::error_code ec;
  std::filesystem::remove_all(store, ec);
  return unexpected == 0 && alive ? 0 : 1;
}
