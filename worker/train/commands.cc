#include "worker/train/commands.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sweep/sweep.h"
#include "common/util/file.h"
#include "common/util/progress_line.h"
#include "common/util/threads.h"
#include "worker/train/dataset.h"
#include "worker/train/trainer.h"

namespace ablate::train {
namespace {

namespace fs = std::filesystem;

volatile std::sig_atomic_t g_stop_signal = 0;

void OnStopSignal(int sig) {
  g_stop_signal = sig;
  // A second Ctrl-C kills at once, for a run stuck somewhere it cannot notice the first.
  std::signal(sig, SIG_DFL);
}

// Prints one line per log_every step (and per evaluation) and turns SIGINT/SIGTERM into a
// checkpointed stop.
class ConsoleObserver : public TrainObserver {
 public:
  // `prefix` starts every line (with --copies, which copy printed it).
  explicit ConsoleObserver(bool quiet, std::string prefix = "")
      : quiet_(quiet), prefix_(std::move(prefix)) {}

  void OnMetrics(const std::vector<ablate::v1::MetricPoint>& points) override {
    if (quiet_) return;
    const std::string line = util::ProgressLine(points);
    if (!line.empty()) std::printf("%s%s\n", prefix_.c_str(), line.c_str());
    std::fflush(stdout);
  }
  void OnCheckpoint(int64_t step, const std::string& path) override {
    if (!quiet_) {
      std::printf("%scheckpoint at step %lld: %s\n", prefix_.c_str(), static_cast<long long>(step),
                  path.c_str());
    }
  }
  bool ShouldStop() override { return g_stop_signal != 0; }

 private:
  bool quiet_;
  std::string prefix_;
};

// Data paths in a run file are relative to the file, like includes; synthetic corpora and
// absolute paths are left alone.
void ResolveAgainst(const fs::path& base, std::string* path) {
  if (path->empty() || path->starts_with("synthetic:") || fs::path(*path).is_absolute()) return;
  *path = (base / *path).lexically_normal().string();
}

// `threshold` is the run's steps-to-threshold target (0: none set, so there is nothing to print).
void PrintResult(const TrainResult& r, double threshold, const std::string& prefix = "") {
  const auto& x = r.result;
  std::printf("%s", prefix.c_str());
  if (r.outcome == Outcome::kDiverged) {
    std::printf("diverged at step %lld (last finite loss %.4f, l0 %.4f)\n",
                static_cast<long long>(x.diverged_step()), x.last_finite_loss(), x.initial_loss());
  } else {
    std::printf("finished %lld steps: l0 %.4f  train (ema) %.4f  val %.4f  ppl %.2f\n",
                static_cast<long long>(x.steps_done()), x.initial_loss(), x.final_train_loss(),
                x.final_val_loss(), x.final_val_ppl());
  }
  if (threshold > 0) {
    if (x.steps_to_threshold() >= 0) {
      std::printf("steps to threshold %.4g: %lld  ", threshold,
                  static_cast<long long>(x.steps_to_threshold()));
    } else {
      std::printf("threshold %.4g never reached  ", threshold);
    }
  }
  std::printf("%.0f tok/s  %.1f s  on %s (torch %s)\n", x.tokens_per_second(), x.wall_seconds(),
              x.device().c_str(), x.torch_version().c_str());
}

// result.json is written only when a run ends, so its presence means nothing is left to resume:
// says so on stderr.
bool HoldsFinishedRun(const std::string& out_dir) {
  if (!fs::exists(out_dir + "/result.json")) return false;
  std::fprintf(stderr, "error: %s already holds a finished run (result.json); use another --out\n",
               out_dir.c_str());
  return true;
}

// --copies N: N copies of the run at once, each as a slot of `ablate-worker --slots N` trains
// its run (its own thread, seed, output directory, generator state and, on CUDA, stream).
int RunCopies(const ablate::v1::RunSpec& spec, const TrainCommandArgs& args) {
  const int n = args.copies;
  if (args.threads > 0 && args.threads < n) {
    std::fprintf(stderr, "error: --threads %d is below --copies %d: each copy needs a thread\n",
                 args.threads, n);
    return 2;
  }
  const int per_copy = util::ShareOf(util::ThreadsOrAll(args.threads), n);
  const std::string cache_dir = args.cache_dir.empty() ? args.out_dir + "/cache" : args.cache_dir;
  auto copy_dir = [&](int k) { return absl::StrCat(args.out_dir, "/copy-", k); };
  for (int k = 0; k < n; ++k) {
    if (HoldsFinishedRun(copy_dir(k))) return 1;
  }
  // Prepared once, before the copies start, so they do not race to make the same cache files.
  if (auto prepared = PrepareRunData(spec.data(), cache_dir); !prepared.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(prepared.status().message()).c_str());
    return 1;
  }
  // BLIS reads its thread count at the first matrix multiply of the process: before any copy.
  ConfigureThreads(per_copy);
  if (!args.quiet) {
    std::printf("training %d copies at once, %d CPU thread(s) each, into %s/copy-0..%d\n", n,
                per_copy, args.out_dir.c_str(), n - 1);
  }

  g_stop_signal = 0;
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  std::vector<absl::StatusOr<TrainResult>> results(static_cast<size_t>(n),
                                                   absl::UnknownError("not run"));
  std::vector<ablate::v1::RunSpec> specs(static_cast<size_t>(n), spec);
  std::vector<std::unique_ptr<ConsoleObserver>> observers;
  std::vector<std::thread> threads;
  const auto started = std::chrono::steady_clock::now();
  for (int k = 0; k < n; ++k) {
    const auto i = static_cast<size_t>(k);
    specs[i].mutable_config()->set_seed(spec.config().seed() + k);
    observers.push_back(
        std::make_unique<ConsoleObserver>(args.quiet, absl::StrCat("[copy ", k, "] ")));
    threads.emplace_back([&, k, i] {
      TrainOptions options;
      options.device = args.device;
      options.out_dir = copy_dir(k);
      options.cache_dir = cache_dir;
      options.threads = per_copy;
      options.resume_from = NewestCheckpoint(options.out_dir);
      results[i] = Train(specs[i], options, observers[i].get());
    });
  }
  for (auto& t : threads) t.join();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);

  int code = 0;
  std::vector<double> rates;
  for (int k = 0; k < n; ++k) {
    const auto& r = results[static_cast<size_t>(k)];
    const std::string prefix =
        absl::StrCat("copy ", k, " (seed ", specs[static_cast<size_t>(k)].config().seed(), "): ");
    if (!r.ok()) {
      std::fprintf(stderr, "%serror: %s\n", prefix.c_str(),
                   std::string(r.status().message()).c_str());
      code = 1;
    } else if (r->outcome == Outcome::kStopped) {
      std::printf("%sstopped at step %lld (rerun the same command to resume)\n", prefix.c_str(),
                  static_cast<long long>(r->last_step));
      if (code == 0) code = 130;
    } else {
      PrintResult(*r, spec.threshold().train_loss(), prefix);
      rates.push_back(r->result.tokens_per_second());
    }
  }
  if (!rates.empty()) {
    double total = 0;
    for (double r : rates) total += r;
    std::sort(rates.begin(), rates.end());
    const size_t mid = rates.size() / 2;
    const double median = rates.size() % 2 == 1 ? rates[mid] : (rates[mid - 1] + rates[mid]) / 2;
    std::printf(
        "%d copies at once: %.0f tok/s in total (the copies' rates summed), %.0f tok/s per "
        "copy (median), %.1f s wall\n",
        n, total, median, wall);
  }
  return code;
}

}  // namespace

int RunTrainCommand(const TrainCommandArgs& args) {
  auto text = util::ReadFile(args.run_file);
  if (!text.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(text.status().message()).c_str());
    return 1;
  }
  auto spec = ablate::sweep::ParseRunFile(*text, args.run_file);
  if (!spec.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(spec.status().message()).c_str());
    return 1;
  }
  const fs::path base = fs::absolute(args.run_file).parent_path();
  ResolveAgainst(base, spec->mutable_data()->mutable_train());
  ResolveAgainst(base, spec->mutable_data()->mutable_val());

  if (args.copies > 1) return RunCopies(*spec, args);

  TrainOptions options;
  options.device = args.device;
  options.out_dir = args.out_dir;
  options.cache_dir = args.cache_dir;
  options.threads = args.threads;
  options.resume_from = NewestCheckpoint(args.out_dir);
  if (HoldsFinishedRun(args.out_dir)) return 1;
  if (!options.resume_from.empty() && !args.quiet) {
    std::printf("resuming from %s\n", options.resume_from.c_str());
  }

  g_stop_signal = 0;
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  ConsoleObserver observer(args.quiet);
  auto result = Train(*spec, options, &observer);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  if (!result.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(result.status().message()).c_str());
    return 1;
  }
  if (result->outcome == Outcome::kStopped) {
    std::printf("stopped at step %lld; checkpoint %s (rerun the same command to resume)\n",
                static_cast<long long>(result->last_step), result->last_checkpoint.c_str());
    return 130;
  }
  PrintResult(*result, spec->threshold().train_loss());
  return 0;
}

int RunDataPrepareCommand(const DataPrepareArgs& args) {
  for (const std::string& f : args.text_files) {
    std::error_code ec;
    if (!fs::is_regular_file(f, ec)) {
      std::fprintf(stderr, "error: --text %s: file not found\n", f.c_str());
      return 1;
    }
  }
  auto data = PrepareDataset(args.text_files, args.text_files, args.vocab, args.cache_dir);
  if (!data.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(data.status().message()).c_str());
    return 1;
  }
  std::printf("tokenizer: %s (vocab %d)\n", data->tokenizer_model.c_str(), data->vocab_size);
  if (!args.out_dir.empty()) {
    if (auto s = util::MakeDirs(args.out_dir); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  std::error_code ec;
  for (const PreparedFile& f : data->files) {
    const auto bytes = fs::file_size(f.text_path, ec);
    std::printf("%s: %lld tokens (%.2f bytes/token) -> %s\n", f.text_path.c_str(),
                static_cast<long long>(f.tokens),
                f.tokens > 0 ? static_cast<double>(bytes) / static_cast<double>(f.tokens) : 0.0,
                f.token_path.c_str());
    if (!args.out_dir.empty()) {
      const fs::path dest =
          fs::path(args.out_dir) / (fs::path(f.text_path).stem().string() + ".u16");
      fs::copy_file(f.token_path, dest, fs::copy_options::overwrite_existing, ec);
    }
  }
  if (!args.out_dir.empty()) {
    fs::copy_file(data->tokenizer_model, fs::path(args.out_dir) / "tokenizer.model",
                  fs::copy_options::overwrite_existing, ec);
    if (ec) {
      std::fprintf(stderr, "error: copying to %s: %s\n", args.out_dir.c_str(),
                   ec.message().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace ablate::train
