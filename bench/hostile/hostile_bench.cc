// hostile_bench: a hostile client against a real ablate-server (token auth) on a throwaway
// PostgreSQL (scripts/dev-postgres).
//   1. Submits: 8 concurrent hostile SubmitSweep requests of each kind; the server's peak RSS
//      (VmHWM) and RSS after each burst from /proc/PID/status. Target: peak < 300 MB.
//   2. Memory under abuse: 8 concurrent callers of each abusive call (oversize logs and uploads,
//      leases and claims past their caps, another run's bytes, 32 MB downloads), with how many
//      calls got through and the RSS after each burst.
// Prints figures; exits 1 if the server died. Which code each attack on the RPC surface must get
// is the integration test integration.server.surface (tests/integration/surface_test.cc), whose
// client (tests/integration/hostile_client.h) this uses.
//
//   hostile_bench [--database-url URL] [--bursts-only]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "ablate/v1/ablate.grpc.pb.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/bench_db.h"
#include "common/util/sha256.h"
#include "grpcpp/grpcpp.h"
#include "tests/integration/hostile_client.h"

namespace {

using namespace ablate;

using ablate::testing::Held;
using ablate::testing::HostileClient;

// A /proc/PID/status figure in MB ("VmHWM", "VmRSS").
double StatusMb(pid_t pid, const std::string& key) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) / 1024.0;
  }
  return -1;
}

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

struct Tokens {
  std::string admin, user, worker_a, worker_b;
};

// 8 threads, `per_thread` calls each; returns how many calls succeeded.
int Burst(int per_thread, const std::function<bool()>& call) {
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < per_thread; ++i) ok += call() ? 1 : 0;
    });
  }
  for (auto& t : threads) t.join();
  return ok.load();
}

// Part 2: worker a holds a lease and has uploaded a checkpoint, worker b holds its one slot and
// as many open data-preparation claims as it may; then 8 concurrent callers of each abusive
// call. Returns false when that set-up failed.
bool Bursts(HostileClient& c, const Tokens& t, pid_t server) {
  const std::string yaml =
      "name: victim\ndata: {train: \"synthetic:50\", val: \"synthetic:10\"}\n"
      "fixed: {n_embd: 32, n_head: 2, block_size: 32, batch_size: 4, steps: 100}\n"
      "grid:\n  lr: [0.001, 0.002, 0.004, 0.008, 0.016, 0.032]\n";
  int64_t a = 0, b = 0;
  Held ra, rb;
  v1::CheckpointRef checkpoint;
  const std::string bytes = std::string(64 << 10, 'w') + "the weights of worker a's run";
  const std::string key = Sha256Hex("hostile data key");
  v1::DataPrepClaimResponse claim;
  if (!c.Submit(t.admin, yaml).ok() || !c.Register(t.worker_a, "bench-a", 1, &a).ok() ||
      !c.Register(t.worker_b, "bench-b", 1, &b).ok() || !c.Lease(t.worker_a, a, &ra).ok() ||
      !c.Lease(t.worker_b, b, &rb).ok() ||
      !c.PutCheckpoint(t.worker_a, ra, bytes, static_cast<int64_t>(bytes.size()), &checkpoint)
           .ok() ||
      !c.Claim(t.worker_b, b, key, &claim).ok()) {
    std::fprintf(stderr, "hostile_bench: could not set up the bursts\n");
    return false;
  }
  // Worker b's open claims up to the cap (4), so that the claims burst is all past it.
  for (int i = 1; i < 4; ++i) {
    v1::DataPrepClaimResponse more;
    c.Claim(t.worker_b, b, Sha256Hex(absl::StrCat("more keys ", i)), &more);
  }
  std::printf("\nmemory under abuse (8 concurrent callers each):\n");
  auto timed = [&](const char* what, int per_thread, const std::function<bool()>& call) {
    const auto t0 = std::chrono::steady_clock::now();
    const int ok = Burst(per_thread, call);
    std::printf("%-58s %4d/%-4d ok in %5.2f s; server peak RSS %.0f MB, RSS after %.0f MB\n", what,
                ok, 8 * per_thread,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                StatusMb(server, "VmHWM"), StatusMb(server, "VmRSS"));
  };
  timed("ReportLogs: 100 lines x 512 B per call (run keeps 2,000)", 25,
        [&] { return c.Logs(t.worker_a, ra, 100, 512).ok(); });
  timed("PutPreparedFile: announces 1 KB, streams 70 MB", 1, [&] {
    return c
        .PutPrepared(t.worker_b, key, claim.claim_token(), "tokens_train",
                     std::string(70 << 20, 'q'), 1024)
        .ok();
  });
  timed("Lease past the worker's slots", 50, [&] { return c.Lease(t.worker_b, b).ok(); });
  timed("ClaimDataPrep past the open-claim cap", 25, [&] {
    v1::DataPrepClaimResponse r;
    return c.Claim(t.worker_b, b, Sha256Hex(absl::StrCat("burst ", std::rand())), &r).ok();
  });
  timed("GetPreparedFile of a checkpoint's sha256", 25,
        [&] { return c.GetPrepared(t.worker_b, checkpoint.sha256()).ok(); });
  // Final weights of 32 MB, downloaded 8 at once by user tokens (allowed: any user may).
  const std::string weights(32 << 20, 'f');
  v1::CheckpointRef ref;
  if (c.PutCheckpoint(t.worker_a, ra, weights, static_cast<int64_t>(weights.size()), &ref).ok() &&
      c.Complete(t.worker_a, ra, v1::SUCCEEDED, &ref).ok()) {
    timed("GetArtifact: 32 MB final weights", 2, [&] {
      int64_t got = 0;
      return c.GetArtifact(t.user, ra.run, "", &got).ok() &&
             got == static_cast<int64_t>(weights.size());
    });
  }
  timed("ListWorkers", 25, [&] { return c.ListWorkers(t.user).ok(); });
  return true;
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
  bool bursts_only = false;
  for (int i = 1; i < argc; ++i) bursts_only |= std::string(argv[i]) == "--bursts-only";
  const std::string& url = db.url();
  // Tokens need the schema.
  ablate::bench::Shell(
      absl::StrCat(ABLATE_SERVER_BIN, " migrate --database-url '", url, "' 2>/dev/null"));
  Tokens tokens;
  tokens.admin = CreateToken(url, "admin", "hostile-admin");
  tokens.user = CreateToken(url, "user", "hostile-user");
  tokens.worker_a = CreateToken(url, "worker", "hostile-worker-a");
  tokens.worker_b = CreateToken(url, "worker", "hostile-worker-b");
  if (tokens.admin.empty() || tokens.worker_b.empty()) {
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
  for (const Kind& kind : bursts_only ? std::vector<Kind>{} : Kinds()) {
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
  HostileClient client(channel);
  const bool set_up = Bursts(client, tokens, server);
  std::printf("server peak RSS over the whole run: %.0f MB   [target < 300 MB]\n",
              StatusMb(server, "VmHWM"));
  int status = 0;
  const bool alive = waitpid(server, &status, WNOHANG) == 0;
  std::printf("server %s\n", alive ? "still serving (no crash)" : "DIED during the run");
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);
  std::error_code ec;
  std::filesystem::remove_all(store, ec);
  return set_up && alive ? 0 : 1;
}
