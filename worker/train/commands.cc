#include "worker/train/commands.h"

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sweep/sweep.h"
#include "common/util/file.h"
#include "common/util/metric_names.h"
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
  explicit ConsoleObserver(bool quiet) : quiet_(quiet) {}

  void OnMetrics(const std::vector<ablate::v1::MetricPoint>& points) override {
    if (quiet_ || points.empty()) return;
    std::map<std::string, double> v;
    for (const auto& p : points) v[p.name()] = p.value();
    const int64_t step = points.front().step();
    std::string line = absl::StrFormat("step %6d", step);
    if (v.contains(metric::kTrainLoss)) {
      absl::StrAppendFormat(&line, "  loss %.4f  ema %.4f  lr %.3g", v[metric::kTrainLoss],
                            v[metric::kTrainLossEma], v[metric::kLr]);
    }
    if (v.contains(metric::kGradNorm)) {
      absl::StrAppendFormat(&line, "  |g| %.3g", v[metric::kGradNorm]);
    }
    if (v.contains(metric::kTokensPerSecond)) {
      absl::StrAppendFormat(&line, "  %.0f tok/s", v[metric::kTokensPerSecond]);
    }
    if (v.contains(metric::kValLoss)) {
      absl::StrAppendFormat(&line, "  val %.4f", v[metric::kValLoss]);
    }
    if (v.contains(metric::kMaxAttnLogit)) {
      absl::StrAppendFormat(&line, "  max_logit %.2f", v[metric::kMaxAttnLogit]);
    }
    if (line.size() > 12) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  void OnCheckpoint(int64_t step, const std::string& path) override {
    if (!quiet_)
      std::printf("checkpoint at step %lld: %s\n", static_cast<long long>(step), path.c_str());
  }
  bool ShouldStop() override { return g_stop_signal != 0; }

 private:
  bool quiet_;
};

// Data paths in a run file are relative to the file, like includes; synthetic corpora and
// absolute paths are left alone.
void ResolveAgainst(const fs::path& base, std::string* path) {
  if (path->empty() || path->starts_with("synthetic:") || fs::path(*path).is_absolute()) return;
  *path = (base / *path).lexically_normal().string();
}

void PrintResult(const TrainResult& r) {
  const auto& x = r.result;
  if (r.outcome == Outcome::kDiverged) {
    std::printf("diverged at step %lld (last finite loss %.4f, l0 %.4f)\n",
                static_cast<long long>(x.diverged_step()), x.last_finite_loss(), x.initial_loss());
  } else {
    std::printf("finished %lld steps: l0 %.4f  train (ema) %.4f  val %.4f  ppl %.2f\n",
                static_cast<long long>(x.steps_done()), x.initial_loss(), x.final_train_loss(),
                x.final_val_loss(), x.final_val_ppl());
  }
  std::printf("steps to threshold %lld  %.0f tok/s  %.1f s  on %s (torch %s)\n",
              static_cast<long long>(x.steps_to_threshold()), x.tokens_per_second(),
              x.wall_seconds(), x.device().c_str(), x.torch_version().c_str());
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

  TrainOptions options;
  options.device = args.device;
  options.out_dir = args.out_dir;
  options.cache_dir = args.cache_dir;
  options.threads = args.threads;
  // result.json is written only when a run ends, so its presence means nothing is left to resume.
  options.resume_from = NewestCheckpoint(args.out_dir);
  if (fs::exists(args.out_dir + "/result.json")) {
    std::fprintf(stderr,
                 "error: %s already holds a finished run (result.json); use another --out\n",
                 args.out_dir.c_str());
    return 1;
  }
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
  PrintResult(*result);
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
