// What a sweep costs on the fleet as it is: the speed model (how fast each device class trains
// runs of a given size), the estimate before submitting, and the figures budgets and the ETA use
// while it runs (docs/architecture.md#cost).
//
// The unit is the model FLOP (common/cost/flops.h): a device class's speed is measured in model
// FLOPs per device-second, from finished runs of similar size on that class (their charged device
// time, overheads included), else from its workers' startup benchmark, so a speed measured on one
// model size carries over to another. Pure logic: the server loads the fleet and the samples.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"

namespace ablate::cost {

// A live worker as the estimate sees it.
struct FleetWorker {
  std::string device_kind;   // cuda | mps | cpu
  std::string device_class;  // kind and device name: "cuda NVIDIA GeForce RTX 4090"
  int slots = 1;
  double price_per_hour = 0;  // US dollars for the whole machine; 0: not declared
  std::vector<v1::DeviceBenchmark> benchmarks;
  int64_t memory_bytes = 0;  // device memory of the whole machine (WorkerInfo); 0: not reported
};

// "cuda NVIDIA GeForce RTX 4090": what every figure is grouped by.
std::string DeviceClass(const std::string& device_kind, const std::string& device_name);

// A finished run's measured speed: the model FLOPs it trained over the device time charged for
// all its attempts (one device class only).
struct SpeedSample {
  std::string device_class;
  std::string dtype;
  double flops_per_token = 0;
  double flops = 0;
  double device_seconds = 0;
};

// Finished runs count as "of similar size" within this factor of FLOPs per token.
inline constexpr double kSimilarSize = 2.0;

struct Speed {
  double flops_per_device_second = 0;  // 0: unknown
  std::string source;  // "7 finished runs of similar size" | "startup benchmark" | ""
};

// Runs of one shape: what the estimate, the ETA and budgets sum over. A 100,000-run grid is a few
// shapes (its distinct model sizes).
struct WorkShape {
  std::string device = "auto";  // the runs' `device:` (auto | cpu | cuda | mps)
  std::string dtype = "float32";
  double flops_per_token = 0;
  double flops_per_run = 0;  // of one whole run
  double runs = 0;           // how many (may be fractional: the rest of running runs)
  int64_t memory_bytes = 0;  // device memory one run needs (common/cost/memory.h); 0: unknown
};

// Adds `config` (defaults applied) to the shape list, merging equal shapes (their memory too).
void AddRun(const v1::RunConfig& config, int64_t vocab, std::vector<WorkShape>* shapes);

class SpeedModel {
 public:
  struct Class {
    std::string device_kind;
    std::string device_class;
    int workers = 0;
    int slots = 0;
    double usd_per_device_hour = 0;  // mean price of the workers that declared one; 0: none did
    bool priced = false;             // every worker of the class declared a price
  };

  SpeedModel(std::vector<FleetWorker> workers, std::vector<SpeedSample> samples);

  // Live classes, most workers first.
  const std::vector<Class>& classes() const { return classes_; }
  const Class* FindClass(const std::string& device_class) const;

  // One device of `device_class` on runs of `dtype` and `flops_per_token`: the median of the
  // class's finished runs of similar size and the same dtype, else its workers' startup benchmark
  // (one slot's speed times the slots, the dtype's figure or float32's), else unknown. Classes
  // with no live worker are known from their samples only.
  Speed For(const std::string& device_class, const std::string& dtype,
            double flops_per_token) const;

  // Whether a run pinned to `run_device` (auto | cpu | cuda | mps) may go to `device_kind`.
  static bool CanRun(const std::string& run_device, const std::string& device_kind);

  // The most device memory one slot has (the machine's over its slots) among live workers that
  // may run `run_device`'s runs ("" : any live worker). 0: none live, or none reported memory.
  int64_t LargestMemoryPerSlot(const std::string& run_device = "") const;
  // Whether some live worker that may run `shape` can hold it: memory per slot at least the
  // shape's, or not reported (no limit is applied to it, as Lease does). A shape no live worker
  // may run at all counts as fitting: it waits for its device kind, not for more memory.
  bool Fits(const WorkShape& shape) const;

  // Wall seconds for `work` on the live fleet, every class that can run a shape sharing it in
  // proportion to its speed, and never less than one run's time on one slot of the fastest
  // class; money the same way. -1: a shape no live class with a known speed can run (usd: or a
  // class sharing the work is unpriced).
  struct FleetTime {
    double seconds = -1;
    double device_seconds = -1;
    double usd = -1;
  };
  FleetTime OnFleet(const std::vector<WorkShape>& work) const;

  // What one run of `shape` costs at worst on a live class that can run it: device-seconds, and
  // US dollars (a class without prices counts as free: a dollar budget limits what is paid for).
  // -1 device-seconds: no such class has a known speed.
  struct RunCost {
    double device_seconds = -1;
    double usd = -1;
  };
  RunCost WorstRunCost(const WorkShape& shape) const;

 private:
  std::vector<FleetWorker> workers_;
  std::vector<SpeedSample> samples_;
  std::vector<Class> classes_;
};

// The estimate for a sweep whose grid is `base` (`base_runs` runs), with refinement allowed to
// add up to `max_new_runs` more of the same shapes. Memory: the grid's largest run, the largest
// live worker's memory per slot, and the grid's runs that no live worker can hold (a note says
// so when there are some).
v1::SweepEstimate Estimate(const std::vector<WorkShape>& base, int64_t base_runs,
                           int64_t max_new_runs, const SpeedModel& model);

// A budget's unit: device-hours or US dollars.
enum class BudgetUnit { kGpuHours, kUsd };
BudgetUnit UnitOf(const v1::Budget& budget);
double LimitOf(const v1::Budget& budget);
// Device-seconds and dollars in the budget's unit (-1 stays -1: unknown).
double InUnit(BudgetUnit unit, double device_seconds, double usd);

// The running attempt of a run, as budgets and the ETA see it.
struct RunningRun {
  std::string device_class;
  double share = 1;              // 1 / the worker's slots
  double usd_per_slot_hour = 0;  // 0: unpriced
  double tokens_per_second = 0;  // the latest heartbeat's; 0 before the first
  double remaining_tokens = 0;
  WorkShape shape;  // runs = 1, for a speed when tokens_per_second is 0
  double remaining_fraction = 1;
};
// What the rest of a running attempt will cost: device-seconds and dollars (0 on an unpriced
// worker); -1 when neither a heartbeat's tokens/s nor the class's speed is known.
SpeedModel::RunCost Remainder(const RunningRun& run, const SpeedModel& model);

// How many of `queued` (in queue order, one shape each, runs = 1) may start within `room` (the
// limit minus spent minus the running runs' remainder, in the budget's unit). A run of unknown
// cost may start only while the room is positive and nothing else started this round.
int RunsThatFit(const std::vector<WorkShape>& queued, double room, BudgetUnit unit,
                const SpeedModel& model, double* per_run);

// One round of the budget keeper for one sweep (the server reads it inside a transaction with
// the sweep's row locked).
struct BudgetRound {
  v1::Budget budget;                // limits set; DecideBudget fills the figures
  v1::SweepCost spent;              // charged so far
  std::vector<RunningRun> running;  // attempts holding a lease
  std::vector<WorkShape> queued;    // the next queued runs in queue order, runs = 1 each
  int runs_left = 0;                // DecideBudget: how many Lease may start now
};

// The keeper's decision: spent, committed (the running runs' expected remainder; a run with no
// tokens/s yet and no known speed counts whole at its worst), the next run's expected cost, and
// how many queued runs fit in limit - spent - committed. `reached` when none fits and some wait.
void DecideBudget(const SpeedModel& model, BudgetRound* round);

}  // namespace ablate::cost
