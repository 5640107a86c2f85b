#include "common/cost/estimate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cost/flops.h"
#include "common/cost/memory.h"

namespace ablate::cost {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string Dtype(const std::string& dtype) { return dtype.empty() ? "float32" : dtype; }

}  // namespace

std::string DeviceClass(const std::string& device_kind, const std::string& device_name) {
  if (device_name.empty()) return device_kind;
  return absl::StrCat(device_kind, " ", device_name);
}

void AddRun(const v1::RunConfig& config, int64_t vocab, std::vector<WorkShape>* shapes) {
  WorkShape s;
  s.device = config.device().empty() ? "auto" : config.device();
  s.dtype = Dtype(config.dtype());
  s.flops_per_token = FlopsPerToken(config, vocab);
  s.flops_per_run = RunFlops(config, vocab);
  s.memory_bytes = RunMemoryBytes(config, vocab);
  for (auto& have : *shapes) {
    if (have.device == s.device && have.dtype == s.dtype &&
        have.flops_per_token == s.flops_per_token && have.flops_per_run == s.flops_per_run &&
        have.memory_bytes == s.memory_bytes) {
      have.runs += 1;
      return;
    }
  }
  s.runs = 1;
  shapes->push_back(std::move(s));
}

SpeedModel::SpeedModel(std::vector<FleetWorker> workers, std::vector<SpeedSample> samples)
    : workers_(std::move(workers)), samples_(std::move(samples)) {
  std::map<std::string, Class> by_class;
  std::map<std::string, double> price_sum;
  for (const auto& w : workers_) {
    Class& c = by_class[w.device_class];
    if (c.workers == 0) {
      c.device_kind = w.device_kind;
      c.device_class = w.device_class;
      c.priced = true;
    }
    ++c.workers;
    c.slots += std::max(1, w.slots);
    if (w.price_per_hour > 0) {
      price_sum[w.device_class] += w.price_per_hour;
    } else {
      c.priced = false;
    }
  }
  for (auto& [name, c] : by_class) {
    // The mean over the workers that declared one (`priced`: all did).
    int priced_workers = 0;
    for (const auto& w : workers_) {
      if (w.device_class == name && w.price_per_hour > 0) ++priced_workers;
    }
    if (priced_workers > 0) c.usd_per_device_hour = price_sum[name] / priced_workers;
    classes_.push_back(c);
  }
  std::stable_sort(classes_.begin(), classes_.end(),
                   [](const Class& a, const Class& b) { return a.workers > b.workers; });
}

const SpeedModel::Class* SpeedModel::FindClass(const std::string& device_class) const {
  for (const auto& c : classes_) {
    if (c.device_class == device_class) return &c;
  }
  return nullptr;
}

Speed SpeedModel::For(const std::string& device_class, const std::string& dtype,
                      double flops_per_token) const {
  const std::string want = Dtype(dtype);
  std::vector<double> similar;
  for (const auto& s : samples_) {
    if (s.device_class != device_class || Dtype(s.dtype) != want) continue;
    if (!(s.device_seconds > 0) || !(s.flops > 0) || !(s.flops_per_token > 0)) continue;
    const double ratio = s.flops_per_token / flops_per_token;
    if (ratio > kSimilarSize || ratio < 1 / kSimilarSize) continue;
    similar.push_back(s.flops / s.device_seconds);
  }
  Speed out;
  if (!similar.empty()) {
    out.flops_per_device_second = Median(similar);
    out.source = absl::StrCat(similar.size(), " finished run", similar.size() == 1 ? "" : "s",
                              " of similar size");
    return out;
  }
  // The startup benchmark: one slot's speed alone, times the slots (the device is shared by
  // its slots, so this is optimistic where one run already fills it).
  double sum = 0;
  int n = 0;
  for (const auto& w : workers_) {
    if (w.device_class != device_class) continue;
    const v1::DeviceBenchmark* pick = nullptr;
    for (const auto& b : w.benchmarks) {
      if (!(b.flops_per_second() > 0)) continue;
      if (Dtype(b.dtype()) == want) {
        pick = &b;
        break;
      }
      if (Dtype(b.dtype()) == "float32" && pick == nullptr) pick = &b;
    }
    if (pick == nullptr) continue;
    sum += pick->flops_per_second() * std::max(1, w.slots);
    ++n;
  }
  if (n > 0) {
    out.flops_per_device_second = sum / n;
    out.source = "startup benchmark";
  }
  return out;
}

bool SpeedModel::CanRun(const std::string& run_device, const std::string& device_kind) {
  return run_device.empty() || run_device == "auto" || run_device == device_kind;
}

int64_t SpeedModel::LargestMemoryPerSlot(const std::string& run_device) const {
  int64_t largest = 0;
  for (const auto& w : workers_) {
    if (!run_device.empty() && !CanRun(run_device, w.device_kind)) continue;
    largest = std::max(largest, w.memory_bytes / std::max(1, w.slots));
  }
  return largest;
}

bool SpeedModel::Fits(const WorkShape& shape) const {
  if (shape.memory_bytes <= 0) return true;
  bool any = false;
  for (const auto& w : workers_) {
    if (!CanRun(shape.device, w.device_kind)) continue;
    any = true;
    if (w.memory_bytes <= 0 || w.memory_bytes / std::max(1, w.slots) >= shape.memory_bytes) {
      return true;
    }
  }
  return !any;
}

SpeedModel::FleetTime SpeedModel::OnFleet(const std::vector<WorkShape>& work) const {
  FleetTime out;
  double seconds = 0, device_seconds_total = 0, usd = 0, longest_run = 0;
  bool priced = true;
  for (const auto& shape : work) {
    if (!(shape.runs > 0)) continue;
    // The fleet's rate on this shape: every live device that can run it, at its class's speed.
    double rate = 0, best_slot = 0;
    std::vector<std::pair<const Class*, double>> sharing;  // class, its devices' rate
    for (const auto& c : classes_) {
      if (!CanRun(shape.device, c.device_kind)) continue;
      const double f =
          For(c.device_class, shape.dtype, shape.flops_per_token).flops_per_device_second;
      if (!(f > 0)) continue;
      rate += f * c.workers;
      sharing.emplace_back(&c, f * c.workers);
      best_slot = std::max(best_slot, f * c.workers / std::max(1, c.slots));
    }
    if (!(rate > 0)) return out;
    const double flops = shape.flops_per_run * shape.runs;
    seconds += flops / rate;
    longest_run =
        std::max(longest_run, shape.flops_per_run * std::min(1.0, shape.runs) / best_slot);
    for (const auto& [c, r] : sharing) {
      // The class does r / rate of the work at r / workers per device.
      const double device_seconds = flops * (r / rate) / (r / c->workers);
      device_seconds_total += device_seconds;
      if (!c->priced) {
        priced = false;
        continue;
      }
      usd += device_seconds * c->usd_per_device_hour / 3600;
    }
  }
  out.seconds = std::max(seconds, longest_run);
  out.device_seconds = device_seconds_total;
  out.usd = priced ? usd : -1;
  return out;
}

SpeedModel::RunCost SpeedModel::WorstRunCost(const WorkShape& shape) const {
  RunCost out;
  bool any = false;
  double worst_seconds = 0, worst_usd = 0;
  for (const auto& c : classes_) {
    if (!CanRun(shape.device, c.device_kind)) continue;
    const double f =
        For(c.device_class, shape.dtype, shape.flops_per_token).flops_per_device_second;
    if (!(f > 0)) continue;
    any = true;
    const double device_seconds = shape.flops_per_run / f;
    worst_seconds = std::max(worst_seconds, device_seconds);
    // An unpriced class is free to a dollar budget (never invented money); a class with some
    // priced workers counts at their mean price.
    if (c.usd_per_device_hour > 0) {
      worst_usd = std::max(worst_usd, device_seconds * c.usd_per_device_hour / 3600);
    }
  }
  if (!any) return out;
  out.device_seconds = worst_seconds;
  out.usd = worst_usd;
  return out;
}

v1::SweepEstimate Estimate(const std::vector<WorkShape>& base, int64_t base_runs,
                           int64_t max_new_runs, const SpeedModel& model) {
  v1::SweepEstimate e;
  e.set_base_runs(static_cast<int32_t>(base_runs));
  e.set_max_runs(static_cast<int32_t>(base_runs + std::max<int64_t>(0, max_new_runs)));
  const double scale = base_runs > 0 ? static_cast<double>(e.max_runs()) / base_runs : 1;
  double runs = 0, flops = 0, tokens = 0, fmin = 0, fmax = 0;
  for (const auto& s : base) {
    runs += s.runs;
    flops += s.flops_per_run * s.runs;
    tokens += s.flops_per_run / s.flops_per_token * s.runs;
    fmin = fmin == 0 ? s.flops_per_run : std::min(fmin, s.flops_per_run);
    fmax = std::max(fmax, s.flops_per_run);
  }
  if (runs > 0) {
    e.set_flops_per_run(flops / runs);
    e.set_tokens_per_run(tokens / runs);
  }
  e.set_flops_per_run_min(fmin);
  e.set_flops_per_run_max(fmax);
  int64_t memory_max = 0, unfit_max = 0;
  double unfittable = 0;
  for (const auto& s : base) {
    memory_max = std::max(memory_max, s.memory_bytes);
    if (!model.Fits(s)) {
      unfittable += s.runs;
      unfit_max = std::max(unfit_max, s.memory_bytes);
    }
  }
  e.set_memory_bytes_max(memory_max);
  e.set_largest_worker_memory_bytes(model.LargestMemoryPerSlot());
  e.set_unfittable_runs(static_cast<int32_t>(std::llround(unfittable)));
  const double mean_fpt = tokens > 0 ? flops / tokens : 0;
  for (const auto& c : model.classes()) {
    auto* line = e.add_classes();
    line->set_device_class(c.device_class);
    line->set_workers(c.workers);
    line->set_slots(c.slots);
    bool can_run = false, all_known = true;
    double device_seconds = 0;
    std::string source;
    for (const auto& s : base) {
      if (!SpeedModel::CanRun(s.device, c.device_kind)) continue;
      can_run = true;
      const Speed speed = model.For(c.device_class, s.dtype, s.flops_per_token);
      if (!(speed.flops_per_device_second > 0)) {
        all_known = false;
        continue;
      }
      if (source.empty()) source = speed.source;
      device_seconds += s.flops_per_run * s.runs / speed.flops_per_device_second;
    }
    line->set_can_run(can_run);
    if (!can_run || !all_known || device_seconds <= 0) {
      line->set_device_hours_base(-1);
      line->set_device_hours_max(-1);
      line->set_usd_base(-1);
      line->set_usd_max(-1);
      continue;
    }
    const Speed mean = model.For(c.device_class, base.front().dtype, mean_fpt);
    if (mean_fpt > 0 && mean.flops_per_device_second > 0) {
      line->set_tokens_per_second(mean.flops_per_device_second / mean_fpt);
    }
    line->set_source(source);
    line->set_device_hours_base(device_seconds / 3600);
    line->set_device_hours_max(device_seconds * scale / 3600);
    if (c.priced) {
      line->set_usd_per_hour(c.usd_per_device_hour);
      line->set_usd_base(device_seconds * c.usd_per_device_hour / 3600);
      line->set_usd_max(device_seconds * scale * c.usd_per_device_hour / 3600);
    } else {
      line->set_usd_base(-1);
      line->set_usd_max(-1);
    }
  }
  const SpeedModel::FleetTime t = model.OnFleet(base);
  std::vector<WorkShape> max_work = base;
  for (auto& s : max_work) s.runs *= scale;
  const SpeedModel::FleetTime tmax = model.OnFleet(max_work);
  e.set_wall_seconds_base(t.seconds);
  e.set_wall_seconds_max(tmax.seconds);
  e.set_usd_base(t.usd);
  e.set_usd_max(tmax.usd);
  e.set_device_seconds_base(t.device_seconds);
  e.set_device_seconds_max(tmax.device_seconds);
  e.add_notes(
      "assumes every run trains all its steps (a diverged run stops early, so the sweep costs "
      "less) and the whole live fleet works on this sweep");
  e.add_notes(absl::StrFormat(
      "speeds are model FLOPs per device-second (6N + attention per token, as MFU counts), from "
      "finished runs within %gx of the size on the same class and dtype, else the workers' "
      "startup benchmark",
      kSimilarSize));
  if (e.unfittable_runs() > 0) {
    e.add_notes(absl::StrCat(
        e.unfittable_runs(), e.unfittable_runs() == 1 ? " run needs " : " runs need up to ",
        FormatBytes(unfit_max), " of device memory; the largest live worker has ",
        FormatBytes(e.largest_worker_memory_bytes()), " per slot: ",
        e.unfittable_runs() == 1 ? "it" : "they", " would wait in the queue for a bigger device"));
  }
  if (max_new_runs > 0) {
    e.add_notes(absl::StrCat("refinement may add up to ", max_new_runs,
                             " runs (refine.max_new_runs); pruning only removes runs"));
  }
  return e;
}

BudgetUnit UnitOf(const v1::Budget& budget) {
  return budget.usd() > 0 ? BudgetUnit::kUsd : BudgetUnit::kGpuHours;
}

double LimitOf(const v1::Budget& budget) {
  return budget.usd() > 0 ? budget.usd() : budget.gpu_hours();
}

double InUnit(BudgetUnit unit, double device_seconds, double usd) {
  if (unit == BudgetUnit::kUsd) return usd;
  return device_seconds < 0 ? -1 : device_seconds / 3600;
}

SpeedModel::RunCost Remainder(const RunningRun& run, const SpeedModel& model) {
  SpeedModel::RunCost out;
  double wall = -1;
  if (run.tokens_per_second > 0) {
    wall = run.remaining_tokens / run.tokens_per_second;
  } else {
    const double f = model.For(run.device_class, run.shape.dtype, run.shape.flops_per_token)
                         .flops_per_device_second;
    // Device-seconds at the class's speed, spread over this slot's share of the device.
    if (f > 0) wall = run.shape.flops_per_run * run.remaining_fraction / f / run.share;
  }
  if (wall < 0) return out;
  out.device_seconds = wall * run.share;
  out.usd = run.usd_per_slot_hour > 0 ? wall * run.usd_per_slot_hour / 3600 : 0;
  return out;
}

int RunsThatFit(const std::vector<WorkShape>& queued, double room, BudgetUnit unit,
                const SpeedModel& model, double* per_run) {
  *per_run = 0;
  int n = 0;
  for (const auto& shape : queued) {
    const SpeedModel::RunCost c = model.WorstRunCost(shape);
    const double cost = InUnit(unit, c.device_seconds, c.usd);
    if (n == 0) *per_run = cost > 0 ? cost : 0;
    if (cost < 0) {
      // Unknown: one run at a time while there is room, the next keeper pass decides again.
      return (n == 0 && room > 0) ? 1 : n;
    }
    if (cost > room) break;
    room -= cost;
    ++n;
  }
  return n;
}

void DecideBudget(const SpeedModel& model, BudgetRound* round) {
  v1::Budget& b = round->budget;
  const BudgetUnit unit = UnitOf(b);
  const double spent = InUnit(unit, round->spent.device_seconds(), round->spent.usd());
  double committed = 0;
  for (const auto& run : round->running) {
    SpeedModel::RunCost rest = Remainder(run, model);
    if (rest.device_seconds < 0) {
      // Neither a tokens/s yet nor a known speed: count the run whole, at its worst.
      rest = model.WorstRunCost(run.shape);
    }
    const double c = InUnit(unit, rest.device_seconds, rest.usd);
    if (c > 0) committed += c;
  }
  const double room = LimitOf(b) - spent - committed;
  double per_run = 0;
  const int fit = room > 0 ? RunsThatFit(round->queued, room, unit, model, &per_run) : 0;
  if (room <= 0 && !round->queued.empty()) {
    const SpeedModel::RunCost c = model.WorstRunCost(round->queued.front());
    per_run = std::max(0.0, InUnit(unit, c.device_seconds, c.usd));
  }
  b.set_spent(spent);
  b.set_committed(committed);
  b.set_per_run(per_run);
  b.set_reached(fit == 0 && !round->queued.empty());
  round->runs_left = fit;
}

}  // namespace ablate::cost
