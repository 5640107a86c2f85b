#include "worker/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/util/file.h"
#include "worker/train/torch_error.h"

namespace ablate::train {
namespace {

constexpr int64_t kFormatVersion = 1;

torch::Tensor Words(const std::array<uint64_t, 4>& words) {
  auto t = torch::empty({4}, torch::kInt64);
  std::memcpy(t.data_ptr<int64_t>(), words.data(), sizeof(words));
  return t;
}

std::string TrackerJson(const CheckpointState& s) {
  const LossTrackerState& t = s.tracker;
  nlohmann::json j = {{"has_initial", t.has_initial},
                      {"initial_loss", t.initial_loss},
                      {"ema", t.ema},
                      {"last_finite_loss", t.last_finite_loss},
                      {"steps_above", t.steps_above},
                      {"steps_to_threshold", t.steps_to_threshold},
                      {"diverged", t.diverged},
                      {"diverged_step", t.diverged_step},
                      {"wall_seconds", s.wall_seconds},
                      {"last_val_loss", s.last_val_loss},
                      {"min_val_loss", s.min_val_loss},
                      {"last_probes", s.last_probes}};
  return j.dump();
}

void ParseTrackerJson(const std::string& text, CheckpointState* s) {
  const nlohmann::json j = nlohmann::json::parse(text);
  LossTrackerState& t = s->tracker;
  t.has_initial = j.at("has_initial");
  t.initial_loss = j.at("initial_loss");
  t.ema = j.at("ema");
  t.last_finite_loss = j.at("last_finite_loss");
  t.steps_above = j.at("steps_above");
  t.steps_to_threshold = j.at("steps_to_threshold");
  t.diverged = j.at("diverged");
  t.diverged_step = j.at("diverged_step");
  s->wall_seconds = j.at("wall_seconds");
  s->last_val_loss = j.at("last_val_loss");
  s->min_val_loss = j.at("min_val_loss");
  s->last_probes = j.at("last_probes").get<std::map<std::string, double>>();
}

}  // namespace

absl::Status SaveCheckpoint(const std::string& path, GPT& model, const AdamW& optimizer,
                            const CheckpointState& state) {
  const std::string tmp = util::TempPathFor(path);
  // Written through our own descriptor rather than save_to(path), whose error says only that a
  // write failed: the errno tells a full disk (RESOURCE_EXHAUSTED, which the worker waits out)
  // from a real failure.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return util::FileError("cannot create checkpoint", tmp, errno);
  int write_errno = 0;
  auto sink = [&](const void* data, size_t n) -> size_t {
    size_t done = 0;
    while (done < n) {
      const ssize_t w = ::write(fd, static_cast<const char*>(data) + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        write_errno = w < 0 ? errno : ENOSPC;
        break;
      }
      done += static_cast<size_t>(w);
    }
    return done;
  };
  auto fail = [&](absl::Status s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  try {
    torch::serialize::OutputArchive archive;
    archive.write("format", c10::IValue(kFormatVersion));
    archive.write("step", c10::IValue(state.step));
    archive.write("sampler", Words(state.sampler));
    if (state.torch_rng.defined()) archive.write("torch_rng", state.torch_rng);
    archive.write("tracker", c10::IValue(TrackerJson(state)));
    archive.write("config", c10::IValue(state.config.SerializeAsString()));
    const auto named = model->NamedTensors();
    const AdamW::State opt = optimizer.state();
    archive.write("optimizer_steps", c10::IValue(opt.steps));
    archive.write("tensors", c10::IValue(static_cast<int64_t>(named.size())));
    for (size_t i = 0; i < named.size(); ++i) {
      // Keys are indices, not parameter names: archive keys may not contain '.'.
      archive.write(absl::StrCat("p", i), named[i].second.detach().cpu());
      archive.write(absl::StrCat("m", i), opt.exp_avg[i].cpu());
      archive.write(absl::StrCat("v", i), opt.exp_avg_sq[i].cpu());
    }
    archive.save_to(sink);
  } catch (const std::exception& e) {
    if (write_errno != 0) return fail(util::FileError("writing checkpoint", tmp, write_errno));
    return fail(absl::InternalError(absl::StrCat(path, ": writing checkpoint failed: ", e.what())));
  }
  if (write_errno != 0) return fail(util::FileError("writing checkpoint", tmp, write_errno));
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return util::FileError("writing checkpoint", tmp, err);
  }
  absl::Status committed = util::CommitFile(tmp, path);
  if (!committed.ok()) ::unlink(tmp.c_str());
  return committed;
}

absl::Status LoadCheckpoint(const std::string& path, GPT& model, AdamW& optimizer,
                            CheckpointState* state) {
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    c10::IValue v;
    archive.read("format", v);
    if (v.toInt() != kFormatVersion) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": checkpoint format ", v.toInt(), ", expected ", kFormatVersion));
    }
    archive.read("step", v);
    state->step = v.toInt();
    torch::Tensor sampler;
    archive.read("sampler", sampler);
    std::memcpy(state->sampler.data(), sampler.data_ptr<int64_t>(), sizeof(state->sampler));
    torch::Tensor rng;
    if (archive.try_read("torch_rng", rng)) state->torch_rng = rng;
    archive.read("tracker", v);
    ParseTrackerJson(v.toStringRef(), state);
    archive.read("config", v);
    if (!state->config.ParseFromString(v.toStringRef())) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": unreadable run config"));
    }
    const auto named = model->NamedTensors();
    archive.read("tensors", v);
    if (v.toInt() != static_cast<int64_t>(named.size())) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": checkpoint has ", v.toInt(),
                                                     " tensors, this model has ", named.size(),
                                                     " (a different configuration?)"));
    }
    AdamW::State opt;
    archive.read("optimizer_steps", v);
    opt.steps = v.toInt();
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < named.size(); ++i) {
      torch::Tensor p, m, s;
      archive.read(absl::StrCat("p", i), p);
      archive.read(absl::StrCat("m", i), m);
      archive.read(absl::StrCat("v", i), s);
      if (!p.sizes().equals(named[i].second.sizes())) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": tensor ", named[i].first, " has shape ", c10::str(p.sizes()),
            " in the checkpoint, ", c10::str(named[i].second.sizes()), " in this model"));
      }
      named[i].second.copy_(p);
      opt.exp_avg.push_back(m);
      opt.exp_avg_sq.push_back(s);
    }
    optimizer.LoadState(opt);
  } catch (const c10::Error& e) {
    // Out of memory while loading says nothing about the file: the machine's, not the run's.
    if (IsTorchOutOfMemory(e)) return TorchErrorStatus(absl::StrCat(path, ": loading: "), e);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": unreadable checkpoint: ", TorchErrorLine(e)));
  } catch (const std::bad_alloc& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": loading: out of memory (", e.what(), ")"));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": unreadable checkpoint: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace ablate::train
