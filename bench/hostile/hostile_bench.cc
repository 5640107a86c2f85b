// hostile_bench: what bursts of hostile SubmitSweep requests cost a real ablate-server (issue 10).
// Starts the server binary on a throwaway PostgreSQL (scripts/dev-postgres), fires 8 concurrent
// submits of each kind, and prints the server's peak RSS (VmHWM) and RSS after each burst from
// /proc/PID/status. Prints figures; asserts nothing. Target: peak < 300 MB.
//
//   hostile_bench [--database-url URL]
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
#include "grpcpp/grpcpp.h"

namespace {

using namespace ablate;

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

}  // namespace

int main(int argc, char** argv) {
  ablate::bench::BenchDatabase db(argc, argv, "hostile_bench");
  if (db.url().empty()) return 1;
  const std::string& url = db.url();
  const std::string listen = absl::StrCat("127.0.0.1:", 20000 + getpid() % 20000);
  const std::string store = (std::filesystem::temp_directory_path() / "ablate-hostile-store");
  const pid_t server = fork();
  if (server == 0) {
    execl(ABLATE_SERVER_BIN, ABLATE_SERVER_BIN, "serve", "--database-url", url.c_str(), "--listen",
          listen.c_str(), "--metrics-listen", "", "--auth", "none", "--store-dir", store.c_str(),
          "--log-level", "warn", static_cast<char*>(nullptr));
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
  for (const Kind& kind : Kinds()) {
    std::vector<std::thread> threads;
    std::vector<grpc::Status> results(8);
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < results.size(); ++i) {
      threads.emplace_back([&, i] {
        auto stub = v1::SweepService::NewStub(channel);
        grpc::ClientContext ctx;
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
  std::printf("server peak RSS over the whole run: %.0f MB   [target < 300 MB]\n",
              StatusMb(server, "VmHWM"));
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);
  return 0;
}
