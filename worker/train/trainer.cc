// The training loop: data, model, optimizer, measurement and checkpoints wired together.
//
// Step convention: "step s" is the state after s optimizer steps. At step s the loop measures
// (val loss, probes, the training loss of the batch it is about to learn from), reports, maybe
// checkpoints, then takes update s+1. l0 is therefore the loss at step 0, and the last reported
// step is `steps`, measured after the final update.
#include "worker/train/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#ifdef ABLATE_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <system_error>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/run/metric_names.h"
#include "common/sweep/run_config.h"
#include "common/sweep/sweep.h"
#include "common/util/file.h"
#include "common/util/sha256.h"
#include "common/util/status_macros.h"
#include "common/util/threads.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "spdlog/spdlog.h"
#include "worker/train/adamw.h"
#include "worker/train/autocast.h"
#include "worker/train/batches.h"
#include "worker/train/checkpoint.h"
#include "worker/train/dataset.h"
#include "worker/train/device.h"
#include "worker/train/loss_tracker.h"
#include "worker/train/metrics_log.h"
#include "worker/train/model.h"
#include "worker/train/probes.h"
#include "worker/train/schedule.h"
#include "worker/train/step.h"
#include "worker/train/torch_error.h"

namespace ablate::train {
namespace {

using ablate::v1::MetricPoint;
using Clock = std::chrono::steady_clock;

// Fixed seeds for the validation and probe batches: the same tokens for every run of a sweep.
constexpr uint64_t kValBatchSeed = 0x5eed0001;
constexpr uint64_t kProbeBatchSeed = 0x5eed0002;
// Probing a few sequences is enough for stable statistics and keeps the cost near 1 % of
// training at the default probe_every.
constexpr int64_t kMaxProbeSequences = 8;
constexpr int kCheckpointsKept = 2;

// Torch's default generators (the CPU's, one per CUDA device) belong to the process, and init
// and dropout draw from them. Several runs train in one process with --slots, so each run keeps
// its own generator state and swaps it in, under this lock, around whatever draws: the init and,
// with dropout, each training step. A run's numbers are then the same whether it trains alone or
// beside others. Without dropout a step draws nothing and takes no lock.
std::mutex& DefaultGeneratorMutex() {
  static std::mutex mu;
  return mu;
}

// The generator dropout on `device` draws from: CUDA's own, else the CPU's (MPS untested).
at::Generator DefaultGenerator(const torch::Device& device) {
  if (device.is_cuda()) return at::globalContext().defaultGenerator(device);
  return at::detail::getDefaultCPUGenerator();
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

std::string CheckpointPath(const std::string& dir, int64_t step) {
  return absl::StrFormat("%s/step-%09d.pt", dir, step);
}

// Keeps the newest kCheckpointsKept checkpoints: the newest is what a resume needs, the one
// before it covers a crash while the newest was being written.
void PruneCheckpoints(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("step-") && name.ends_with(".pt")) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (size_t i = 0; i + kCheckpointsKept < files.size(); ++i) {
    std::error_code ignored;
    std::filesystem::remove(files[i], ignored);
  }
}

class NullObserver : public TrainObserver {};

// Resuming under a different config (an edited run file, say) would silently splice two runs
// into one series, so it is refused, naming the settings that differ. Placement (device) may
// change: a run can move between workers.
absl::Status CheckSameConfig(const std::string& path, ablate::v1::RunConfig saved,
                             ablate::v1::RunConfig current) {
  saved.clear_device();
  current.clear_device();
  google::protobuf::util::MessageDifferencer differ;
  std::string report;
  differ.ReportDifferencesToString(&report);
  if (differ.Compare(saved, current)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      path,
      " was written by a run with other settings; start a new output directory or undo "
      "the change:\n",
      report));
}

// One call of Train: Setup() builds the data, model, optimizer and (when resuming) restores the
// training state; Execute() is the step loop (measure, forward/backward, clip, checkpoint when
// due or asked to stop, optimizer step) and ends in a result. docs/architecture.md, "The training
// loop", names the order of a step and why.
class TrainingLoop {
 public:
  TrainingLoop(const ablate::v1::RunSpec& spec, const TrainOptions& options,
               TrainObserver* observer)
      : spec_(spec), config_(spec_.config()), options_(options), observer_(observer) {}

  absl::StatusOr<TrainResult> Execute();

 private:
  absl::Status Setup();
  void Emit(std::vector<MetricPoint>* points);
  void Point(std::vector<MetricPoint>* points, int64_t step, const std::string& name,
             double value) const;
  // Forward (and backward unless `final_step`) over grad_accum micro-batches; the mean loss.
  double TrainForward(bool final_step);
  absl::Status Checkpoint(int64_t step, const std::array<uint64_t, 4>& sampler,
                          const torch::Tensor& torch_rng, TrainResult* result);
  // Runs a write the run needs (a checkpoint, the result); while it fails for lack of space the
  // observer decides whether training waits and tries again (the worker) or fails.
  template <typename Write>
  absl::Status WithSpace(Write write) {
    while (true) {
      absl::Status s = write();
      if (s.ok() || !absl::IsResourceExhausted(s) || !observer_->WaitForSpace(s)) return s;
    }
  }
  // Writes the whole training state at `step` to `path` (atomically).
  absl::Status SaveState(const std::string& path, int64_t step,
                         const std::array<uint64_t, 4>& sampler, const torch::Tensor& torch_rng,
                         double wall_seconds);
  ablate::v1::RunResult MakeResult(int64_t step, double train_seconds, int64_t tokens) const;

  ablate::v1::RunSpec spec_;
  ablate::v1::RunConfig config_;
  TrainOptions options_;
  TrainObserver* observer_;
  NullObserver null_observer_;

  torch::Device device_{torch::kCPU};
  bool bf16_ = false;  // dtype: bfloat16, autocast scoped to each forward pass
  std::string tokenizer_sha256_;
  std::string checkpoint_dir_;
  std::optional<TokenFile> train_tokens_, val_tokens_;
  std::optional<BatchSampler> sampler_;
  std::vector<Batch> val_batches_;
  torch::Tensor probe_x_;
  std::optional<GPT> model_;
  std::optional<AdamW> optimizer_;
  std::optional<LossTracker> tracker_;
  std::optional<MetricsLog> log_;
  std::vector<torch::Tensor> params_;
  // This run's state of the default generator of its device (see DefaultGeneratorMutex).
  torch::Tensor rng_state_;
#ifdef ABLATE_TORCH_CUDA
  std::optional<c10::cuda::CUDAStreamGuard> stream_guard_;
#endif

  int64_t start_step_ = 0;
  bool resumed_ = false;
  double prior_wall_seconds_ = 0;
  double last_val_loss_ = -1, min_val_loss_ = -1;
  int shards_ = 1;
  std::map<std::string, double> last_probes_;
};

absl::Status TrainingLoop::Setup() {
  if (options_.out_dir.empty()) return absl::InvalidArgumentError("no output directory given");
  if (observer_ == nullptr) observer_ = &null_observer_;
  const std::string cache_dir =
      options_.cache_dir.empty() ? options_.out_dir + "/cache" : options_.cache_dir;
  checkpoint_dir_ = options_.out_dir + "/checkpoints";
  RETURN_IF_ERROR(util::MakeDirs(checkpoint_dir_));

  ConfigureThreads(options_.threads);
  const std::string requested = options_.device != "auto" ? options_.device : config_.device();
  ASSIGN_OR_RETURN(device_, ResolveDevice(requested));
  // On the CPU a step's sequences are split over the run's threads (step.h, Sharding).
  if (device_.is_cpu()) {
    shards_ = ConfigureShardedThread(util::ThreadsOrAll(options_.threads), config_.batch_size());
  }
  bf16_ = config_.dtype() == "bfloat16";
  if (bf16_ && device_.is_mps()) {
    // LibTorch 1.13 has no bf16 kernels or autocast for MPS.
    return absl::InvalidArgumentError(
        "dtype: bfloat16 needs a CUDA or CPU device; this run resolved to mps (use float32)");
  }

  ASSIGN_OR_RETURN(const RunTexts texts, ResolveRunTexts(spec_.data(), cache_dir));
  ASSIGN_OR_RETURN(PreparedDataset data,
                   PrepareDataset({texts.train_text}, {texts.train_text, texts.val_text},
                                  texts.vocab, cache_dir));
  ASSIGN_OR_RETURN(tokenizer_sha256_, Sha256File(data.tokenizer_model));
  ASSIGN_OR_RETURN(TokenFile train_tokens, TokenFile::Open(data.files[0].token_path));
  ASSIGN_OR_RETURN(TokenFile val_tokens, TokenFile::Open(data.files[1].token_path));
  const int64_t block = config_.block_size();
  for (const auto& [role, tokens, path] : {std::tuple{"train", &train_tokens, spec_.data().train()},
                                           std::tuple{"val", &val_tokens, spec_.data().val()}}) {
    if (tokens->size() <= block + 1) {
      return absl::InvalidArgumentError(absl::StrCat("data.", role, ": ", path, " has only ",
                                                     tokens->size(), " tokens; block_size ", block,
                                                     " needs more than ", block + 1));
    }
  }
  train_tokens_.emplace(std::move(train_tokens));
  val_tokens_.emplace(std::move(val_tokens));

  // The seed fixes the init (torch's generator) and the data order (our sampler), separately.
  {
    std::lock_guard<std::mutex> lock(DefaultGeneratorMutex());
    torch::manual_seed(static_cast<uint64_t>(config_.seed()));
    model_.emplace(config_, data.vocab_size);  // built on the CPU, drawing from its generator
    rng_state_ = DefaultGenerator(device_).get_state();
  }
#ifdef ABLATE_TORCH_CUDA
  if (device_.is_cuda()) {
    // Each run its own stream, so that runs sharing the GPU (--slots) overlap their kernels
    // instead of queueing on the default stream. Set before the model moves, so every tensor of
    // the run is made and used on it.
    stream_guard_.emplace(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index()));
  }
#endif
  (*model_)->to(device_);
  for (const auto& [name, t] : (*model_)->NamedTensors()) params_.push_back(t);
  optimizer_.emplace((*model_)->NamedTensors(), config_);
  sampler_.emplace(*train_tokens_, block, static_cast<uint64_t>(config_.seed()) * 2 + 1);
  val_batches_ = FixedBatches(*val_tokens_, block, config_.batch_size(), config_.eval_batches(),
                              kValBatchSeed, device_);
  probe_x_ = FixedBatches(*train_tokens_, block,
                          std::min<int64_t>(config_.batch_size(), kMaxProbeSequences), 1,
                          kProbeBatchSeed, device_)[0]
                 .x;
  tracker_.emplace(spec_.divergence(), spec_.threshold(), config_.warmup());

  if (!options_.resume_from.empty()) {
    CheckpointState state;
    RETURN_IF_ERROR(LoadCheckpoint(options_.resume_from, *model_, *optimizer_, &state));
    RETURN_IF_ERROR(CheckSameConfig(options_.resume_from, state.config, config_));
    start_step_ = state.step;
    resumed_ = true;
    sampler_->rng().set_state(state.sampler);
    if (state.torch_rng.defined()) rng_state_ = state.torch_rng;
    tracker_->set_state(state.tracker);
    prior_wall_seconds_ = state.wall_seconds;
    last_val_loss_ = state.last_val_loss;
    min_val_loss_ = state.min_val_loss;
    last_probes_ = state.last_probes;
  }
  ASSIGN_OR_RETURN(MetricsLog log, MetricsLog::Open(options_.out_dir + "/metrics.jsonl",
                                                    resumed_ ? start_step_ : -1));
  log_.emplace(std::move(log));
  return absl::OkStatus();
}

void TrainingLoop::Point(std::vector<MetricPoint>* points, int64_t step, const std::string& name,
                         double value) const {
  MetricPoint& p = points->emplace_back();
  p.set_step(step);
  p.set_name(name);
  p.set_value(value);
  p.set_time(UnixNow());
}

void TrainingLoop::Emit(std::vector<MetricPoint>* points) {
  if (points->empty()) return;
  observer_->OnMetrics(*points);
  // A full disk must not kill a run the server is also recording; the local log is best effort.
  log_->Append(*points).IgnoreError();
  points->clear();
}

double TrainingLoop::TrainForward(bool final_step) {
  std::vector<Batch> micro_batches;
  for (int micro = 0; micro < std::max(1, config_.grad_accum()); ++micro) {
    micro_batches.push_back(sampler_->Next(config_.batch_size(), device_));
  }
  Sharding sharding;
  sharding.shards = shards_;
  if (config_.dropout() <= 0) {
    return AccumulateGradients(*model_, micro_batches, bf16_, /*backward=*/!final_step, sharding);
  }
  // Dropout draws from the default generator: swap this run's state in for the step. On the CPU
  // the step only draws one seed per (micro-batch, shard) from it and each shard's masks come
  // from a generator of its own (step.h), so the lock is held for the draw alone. Elsewhere steps
  // of runs with dropout in one process (--slots) take turns; on a GPU the lock spans the step's
  // kernels too, since the loss is read back at its end.
  std::unique_lock<std::mutex> lock(DefaultGeneratorMutex());
  at::Generator generator = DefaultGenerator(device_);  // a handle, shared
  generator.set_state(rng_state_);
  if (device_.is_cpu()) {
    const auto seeds = torch::randint(std::numeric_limits<int64_t>::max(),
                                      {static_cast<int64_t>(micro_batches.size()) * shards_},
                                      torch::TensorOptions().dtype(torch::kInt64));
    for (int64_t i = 0; i < seeds.numel(); ++i) {
      sharding.dropout_seeds.push_back(static_cast<uint64_t>(seeds[i].item<int64_t>()));
    }
    rng_state_ = generator.get_state();
    lock.unlock();
    return AccumulateGradients(*model_, micro_batches, bf16_, /*backward=*/!final_step, sharding);
  }
  const double loss =
      AccumulateGradients(*model_, micro_batches, bf16_, /*backward=*/!final_step, sharding);
  rng_state_ = generator.get_state();
  return loss;
}

absl::Status TrainingLoop::Checkpoint(int64_t step, const std::array<uint64_t, 4>& sampler,
                                      const torch::Tensor& torch_rng, TrainResult* result) {
  const std::string path = CheckpointPath(checkpoint_dir_, step);
  RETURN_IF_ERROR(WithSpace([&] {
    return SaveState(path, step, sampler, torch_rng,
                     prior_wall_seconds_ + result->result.wall_seconds());
  }));
  PruneCheckpoints(checkpoint_dir_);
  result->last_checkpoint = path;
  observer_->OnCheckpoint(step, path);
  return absl::OkStatus();
}

absl::Status TrainingLoop::SaveState(const std::string& path, int64_t step,
                                     const std::array<uint64_t, 4>& sampler,
                                     const torch::Tensor& torch_rng, double wall_seconds) {
  CheckpointState state;
  state.step = step;
  state.sampler = sampler;
  state.torch_rng = torch_rng;
  state.tracker = tracker_->state();
  state.wall_seconds = wall_seconds;
  state.last_val_loss = last_val_loss_;
  state.min_val_loss = min_val_loss_;
  state.last_probes = last_probes_;
  state.config = config_;
  return SaveCheckpoint(path, *model_, *optimizer_, state);
}

ablate::v1::RunResult TrainingLoop::MakeResult(int64_t step, double train_seconds,
                                               int64_t tokens) const {
  const LossTrackerState& t = tracker_->state();
  ablate::v1::RunResult r;
  r.set_initial_loss(t.initial_loss);
  r.set_final_train_loss(t.ema);
  // A run that never reached an evaluation reports l0, the value analysis assigns failures; a
  // non-finite validation loss has already made the run diverged (ObserveValidation), and
  // reports l0 too, since NaN cannot travel as a loss.
  const double val =
      std::isfinite(last_val_loss_) && last_val_loss_ >= 0 ? last_val_loss_ : t.initial_loss;
  r.set_final_val_loss(val);
  r.set_final_val_ppl(std::exp(val));
  r.set_min_val_loss(min_val_loss_ >= 0 ? min_val_loss_ : val);
  r.set_diverged(t.diverged);
  r.set_diverged_step(t.diverged ? t.diverged_step : -1);
  r.set_last_finite_loss(t.last_finite_loss);
  r.set_steps_to_threshold(t.steps_to_threshold);
  r.set_steps_done(step);
  r.set_tokens_per_second(train_seconds > 0 ? static_cast<double>(tokens) / train_seconds : 0);
  r.set_device(DescribeDevice(device_));
  r.set_dtype(config_.dtype());
  r.set_torch_version(TorchVersion());
  const DeviceInfo info = DescribeDeviceInfo(device_);
  r.set_device_kind(info.kind);
  r.set_device_name(info.name);
  r.set_tokenizer_sha256(tokenizer_sha256_);
  r.set_peak_memory_bytes(PeakMemoryBytes(info.kind));
  // With dropout the masks depend on it (provenance.h): the report flags cells that mix counts.
  r.set_shards(shards_);
  for (const char* name :
       {metric::kAttnEntropy, metric::kAttnEntropyMinHead, metric::kMaxAttnLogit, metric::kKurtosis,
        metric::kKurtosisChannel, metric::kParamNorm, metric::kOutputLogitMax}) {
    auto it = last_probes_.find(name);
    if (it != last_probes_.end()) (*r.mutable_final_probes())[name] = it->second;
  }
  return r;
}

absl::StatusOr<TrainResult> TrainingLoop::Execute() {
  const auto started = Clock::now();
  RETURN_IF_ERROR(Setup());
  (*model_)->train();

  const int64_t steps = config_.steps();
  const int64_t tokens_per_step = static_cast<int64_t>(config_.batch_size()) *
                                  std::max(1, config_.grad_accum()) * config_.block_size();
  const bool save_torch_rng = config_.dropout() > 0 && device_.is_cpu();
  TrainResult result;
  std::vector<MetricPoint> points;
  double train_seconds = 0, interval_seconds = 0;
  int64_t tokens = 0, interval_tokens = 0;
  int64_t s = start_step_;
  for (;; ++s) {
    const auto iteration_started = Clock::now();
    // Measurements at step s: the same for a fresh and a resumed run, except that a resumed run
    // does not report its checkpoint's step again.
    const bool report = !(resumed_ && s == start_step_);
    const bool final_step = s == steps;
    bool val_diverged = false;
    if (report && (s % config_.eval_every() == 0 || final_step)) {
      last_val_loss_ = EvaluateLoss(*model_, val_batches_, bf16_, shards_);
      val_diverged = tracker_->ObserveValidation(s, last_val_loss_);
      if (std::isfinite(last_val_loss_)) {
        min_val_loss_ =
            min_val_loss_ < 0 ? last_val_loss_ : std::min(min_val_loss_, last_val_loss_);
      }
      Point(&points, s, metric::kValLoss, last_val_loss_);
      Point(&points, s, metric::kValPpl, std::exp(last_val_loss_));
    }
    if (report && (s % config_.probe_every() == 0 || final_step)) {
      ScopedAutocast autocast(device_, bf16_);
      last_probes_ = RunProbes(*model_, probe_x_);
      for (const auto& [name, value] : last_probes_) Point(&points, s, name, value);
    }

    const std::array<uint64_t, 4> sampler_before = sampler_->rng().state();
    torch::Tensor torch_rng_before;
    if (save_torch_rng) torch_rng_before = rng_state_;
    const auto step_started = Clock::now();
    const double loss = TrainForward(final_step);
    const bool diverged = report && (tracker_->Observe(s, loss) || val_diverged);
    double grad_norm = 0;
    if (!final_step && !diverged) grad_norm = ClipGradients(params_, config_.grad_clip());
    const double step_seconds = Seconds(step_started);
    train_seconds += step_seconds;
    interval_seconds += step_seconds;

    if (report && (s % config_.log_every() == 0 || final_step || diverged)) {
      Point(&points, s, metric::kTrainLoss, loss);
      Point(&points, s, metric::kTrainLossEma, tracker_->state().ema);
      Point(&points, s, metric::kLr, LearningRate(config_, s));
      if (!final_step && !diverged) Point(&points, s, metric::kGradNorm, grad_norm);
      if (interval_seconds > 0 && interval_tokens > 0) {
        Point(&points, s, metric::kTokensPerSecond,
              static_cast<double>(interval_tokens) / interval_seconds);
      }
      interval_seconds = 0;
      interval_tokens = 0;
    }
    Emit(&points);
    observer_->OnProgress(s, steps,
                          train_seconds > 0 ? static_cast<double>(tokens) / train_seconds : 0);
    if (diverged || final_step) break;

    result.result.set_wall_seconds(Seconds(started));
    const bool stop = observer_->ShouldStop();
    const bool due = config_.checkpoint_every() > 0 && s > 0 &&
                     s % config_.checkpoint_every() == 0 && !(resumed_ && s == start_step_);
    if (stop || due) RETURN_IF_ERROR(Checkpoint(s, sampler_before, torch_rng_before, &result));
    if (stop) {
      result.outcome = Outcome::kStopped;
      result.last_step = s;
      return result;
    }

    const auto update_started = Clock::now();
    optimizer_->Step(LearningRate(config_, s));
    for (auto& p : params_) p.mutable_grad() = torch::Tensor();
    const double update_seconds = Seconds(update_started);
    train_seconds += update_seconds;
    interval_seconds += update_seconds;
    tokens += tokens_per_step;
    interval_tokens += tokens_per_step;
    if (options_.min_step_seconds > 0) {
      // Paced (TrainOptions::min_step_seconds): the wait is neither training time nor tokens/s.
      std::this_thread::sleep_until(iteration_started +
                                    std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(options_.min_step_seconds)));
    }
  }

  result.outcome = tracker_->state().diverged ? Outcome::kDiverged : Outcome::kSucceeded;
  result.last_step = s;
  result.result = MakeResult(s, train_seconds, tokens);
  result.result.set_wall_seconds(prior_wall_seconds_ + Seconds(started));
  if (spec_.keep_final()) {
    // The trained weights, as an ordinary checkpoint file (outside checkpoints/, so neither
    // pruned nor taken for a resume point); the caller uploads it.
    torch::Tensor torch_rng;
    if (save_torch_rng) torch_rng = at::detail::getDefaultCPUGenerator().get_state();
    result.final_checkpoint = options_.out_dir + "/final.pt";
    RETURN_IF_ERROR(WithSpace([&] {
      return SaveState(result.final_checkpoint, s, sampler_->rng().state(), torch_rng,
                       result.result.wall_seconds());
    }));
  }
  std::string json;
  google::protobuf::util::JsonPrintOptions json_options;
  json_options.add_whitespace = true;
  json_options.preserve_proto_field_names = true;
  json_options.always_print_primitive_fields = true;
  if (google::protobuf::util::MessageToJsonString(result.result, &json, json_options).ok()) {
    RETURN_IF_ERROR(WithSpace(
        [&] { return util::WriteFileAtomically(options_.out_dir + "/result.json", json); }));
  }
  return result;
}

// The kind (cuda, mps, cpu) of the device a run trains on, as TrainingLoop::Setup resolves it;
// "cpu" when it does not resolve (Setup then fails with the reason).
std::string ResolvedDeviceKind(const std::string& worker_device, const std::string& run_device) {
  auto device = ResolveDevice(worker_device != "auto" ? worker_device : run_device);
  if (!device.ok()) return "cpu";
  return device->is_cuda() ? "cuda" : device->is_mps() ? "mps" : "cpu";
}

// RESOURCE_EXHAUSTED naming the peak the process held and the device's memory, so that the
// failure says how far the run was from fitting (and the server's estimate can be checked).
absl::Status OutOfMemory(const std::string& kind, const std::string& what) {
  int64_t device_memory = 0;
  try {
    auto device = ResolveDevice(kind);
    if (device.ok()) device_memory = DescribeDeviceInfo(*device).memory_bytes;
  } catch (const std::exception&) {
    // The error is already about memory; its size is then reported as unknown.
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "out of memory on ", kind, ": ", what, " (peak ", DescribeMemory(PeakMemoryBytes(kind)),
      " held, device memory ", DescribeMemory(device_memory), ")"));
}

}  // namespace

absl::StatusOr<TrainResult> Train(const ablate::v1::RunSpec& spec, const TrainOptions& options,
                                  TrainObserver* observer) {
  ablate::v1::RunSpec complete = spec;
  ablate::sweep::ApplyDefaults(complete.mutable_config());
  // The checks the sweep parser made at submit: the same function, so they cannot drift.
  if (absl::Status s = ablate::sweep::ValidateRunSpec(complete); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("invalid run spec: ", s.message()));
  }
  // Which device the run resolves to, for an out-of-memory error to name its peak and size.
  std::string kind = "cpu";
  // Nothing may escape: the caller is a worker's slot thread, where an exception would end the
  // daemon. The code of each status says whose fault it was (worker/failure_class.h).
  try {
    kind = ResolvedDeviceKind(options.device, complete.config().device());
    ResetPeakMemory(kind);
    TrainingLoop loop(complete, options, observer);
    return loop.Execute();
  } catch (const c10::Error& e) {
    // LibTorch reports shape errors, out-of-memory and the like as c10::Error, whose what()
    // carries a C++ stack trace: the run's error is the cause alone, the trace goes to the
    // worker's debug log.
    spdlog::debug("training failed; LibTorch's full report:\n{}", e.what());
    if (IsTorchOutOfMemory(e)) return OutOfMemory(kind, TorchErrorLine(e));
    return TorchErrorStatus("training failed: ", e);
  } catch (const std::bad_alloc& e) {
    return OutOfMemory(kind, e.what());
  } catch (const std::system_error& e) {
    // std::thread's constructor (a shard's thread, step.cc) when the system has no thread left
    // to give: EAGAIN, "Resource temporarily unavailable".
    if (e.code() == std::errc::resource_unavailable_try_again) {
      return absl::ResourceExhaustedError(
          absl::StrCat("training failed: cannot start a thread: ", e.what()));
    }
    return absl::InternalError(absl::StrCat("training failed: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("training failed: ", e.what()));
  } catch (...) {
    return absl::AbortedError("the trainer crashed: an exception of unknown type");
  }
}

std::string NewestCheckpoint(const std::string& out_dir) {
  const std::string dir = out_dir + "/checkpoints";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return "";
  std::string newest;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("step-") && name.ends_with(".pt") && entry.path().string() > newest) {
      newest = entry.path().string();
    }
  }
  return newest;
}

}  // namespace ablate::train
