// How the CLI shows cost, budgets and estimates (docs/architecture.md#cost). Device time is
// "GPU-hours" whatever the device (a CPU hour counts the same), as the sweep file's
// budget.gpu_hours does; money is shown only where workers declared a price.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/render.h"
#include "common/cost/memory.h"

namespace ablate::cli {
namespace {

std::string Grouped(int64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

// Hours with two decimals below 10 (3 significant digits below 0.01: Fixed), one below 100,
// none above.
std::string HoursNumber(double hours) {
  if (hours < 10) return Fixed(hours, 2);
  if (hours < 100) return absl::StrFormat("%.1f", hours);
  return Grouped(static_cast<int64_t>(std::llround(hours)));
}

// The budget's figures in its unit.
std::string InBudgetUnit(const v1::Budget& b, double value) {
  if (value < 0) return "?";
  return b.usd() > 0 ? Usd(value) : HoursNumber(value);
}

std::string Range(const std::string& lo, const std::string& hi) {
  return lo == hi ? lo : absl::StrCat(lo, "–", hi);
}

std::string Flops(double flops) {
  const char* units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP", "EFLOP"};
  int u = 0;
  while (flops >= 1000 && u < 6) {
    flops /= 1000;
    ++u;
  }
  return absl::StrFormat("%.3g %s", flops, units[u]);
}

std::string Tokens(double tokens) {
  if (tokens >= 1e9) return absl::StrFormat("%.3gB", tokens / 1e9);
  if (tokens >= 1e6) return absl::StrFormat("%.3gM", tokens / 1e6);
  if (tokens >= 1e3) return absl::StrFormat("%.3gk", tokens / 1e3);
  return absl::StrFormat("%.0f", tokens);
}

}  // namespace

std::string GpuHours(double device_seconds) {
  if (!(device_seconds >= 0)) return "-";
  return absl::StrCat(HoursNumber(device_seconds / 3600), " GPU-h");
}

std::string Usd(double usd) {
  if (!(usd >= 0) || !std::isfinite(usd)) return "-";
  if (usd >= 1000) return absl::StrCat("$", Grouped(static_cast<int64_t>(std::llround(usd))));
  return absl::StrCat("$", Fixed(usd, 2));
}

std::vector<std::string> CostLines(const v1::SweepCost& cost, bool per_class) {
  std::vector<std::string> out;
  if (cost.classes().empty()) return out;
  std::string head = absl::StrCat("spent ", GpuHours(cost.device_seconds()));
  if (cost.usd() > 0 || cost.priced()) {
    absl::StrAppend(&head, ", ", Usd(cost.usd()), cost.priced() ? "" : " (priced workers only)");
  }
  if (!per_class) {
    // One line: the classes' hours after the total when there is more than one.
    if (cost.classes_size() > 1) {
      std::vector<std::string> parts;
      for (const auto& c : cost.classes()) {
        parts.push_back(
            absl::StrCat(c.device_class(), " ", HoursNumber(c.device_seconds() / 3600)));
      }
      absl::StrAppend(&head, " (", absl::StrJoin(parts, "; "), ")");
    }
    out.push_back(head);
    return out;
  }
  out.push_back(head);
  for (const auto& c : cost.classes()) {
    std::string line =
        absl::StrCat("  ", c.device_class(), "  ", c.runs(), c.runs() == 1 ? " run" : " runs");
    if (c.running() > 0) absl::StrAppend(&line, " (", c.running(), " running)");
    absl::StrAppend(
        &line, "  ", GpuHours(c.device_seconds()), "  ",
        c.priced() ? Usd(c.usd()) : (c.usd() > 0 ? Usd(c.usd()) + " (partly priced)" : "unpriced"));
    out.push_back(line);
  }
  return out;
}

std::string BudgetLine(const v1::Budget& b, const std::string& sweep_ref) {
  const std::string limit =
      b.usd() > 0 ? Usd(b.usd()) : absl::StrCat(HoursNumber(b.gpu_hours()), " GPU-h");
  std::string figures = absl::StrCat("spent ", InBudgetUnit(b, b.spent()));
  if (b.committed() > 0) {
    absl::StrAppend(&figures, ", running runs ~", InBudgetUnit(b, b.committed()), " more");
  }
  if (b.per_run() > 0) absl::StrAppend(&figures, ", next run ~", InBudgetUnit(b, b.per_run()));
  if (b.reached()) {
    return absl::StrCat("budget reached (", limit, "): ", figures,
                        "; no new run starts. Continue with: ablate budget ", sweep_ref,
                        " --raise N");
  }
  return absl::StrCat(
      "budget ", limit, ": ", figures,
      b.runs_left() > 0 ? absl::StrCat("; ", b.runs_left(), " may start now") : std::string());
}

std::string EstimateText(const std::string& name, const v1::SweepEstimate& e) {
  std::string out = absl::StrCat("sweep '", name, "': ", e.base_runs(), " runs");
  if (e.max_runs() > e.base_runs()) {
    absl::StrAppend(&out, ", up to ", e.max_runs(), " with refinement");
  }
  absl::StrAppend(&out, "\nper run: ", Tokens(e.tokens_per_run()), " tokens, ",
                  Flops(e.flops_per_run()));
  if (e.flops_per_run_max() > e.flops_per_run_min() * 1.001) {
    absl::StrAppend(&out, " (", Flops(e.flops_per_run_min()), " to ", Flops(e.flops_per_run_max()),
                    " across the grid)");
  }
  absl::StrAppend(&out, ", 6N + attention per token\n");
  if (e.memory_bytes_max() > 0) {
    // Device memory (common/cost/memory.h): what the largest run needs against the largest
    // live worker's share per slot; runs above it would wait for a bigger device.
    absl::StrAppend(&out, "device memory: up to ", cost::FormatBytes(e.memory_bytes_max()),
                    " per run");
    if (e.largest_worker_memory_bytes() > 0) {
      absl::StrAppend(&out, "; largest live worker ",
                      cost::FormatBytes(e.largest_worker_memory_bytes()), " per slot");
    }
    if (e.unfittable_runs() > 0) {
      absl::StrAppend(&out, "; ", e.unfittable_runs(),
                      e.unfittable_runs() == 1 ? " run fits" : " runs fit", " no live worker");
    }
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "\n");
  const bool range = e.max_runs() > e.base_runs();
  Table t({"DEVICE CLASS", "WORKERS", "TOKENS/S", "SPEED FROM",
           range ? "GPU-H (GRID–MAX)" : "GPU-H", "$/H", "COST"});
  for (const auto& c : e.classes()) {
    const std::string workers = absl::StrCat(c.workers(), " (", c.slots(), " slots)");
    if (!c.can_run()) {
      t.Add({c.device_class(), workers, "-", "runs pinned to another device", "-", "-", "-"});
      continue;
    }
    if (c.device_hours_base() < 0) {
      t.Add({c.device_class(), workers, "-", "unknown (no run, no benchmark)", "-", "-", "-"});
      continue;
    }
    t.Add({c.device_class(), workers, Grouped(std::llround(c.tokens_per_second())), c.source(),
           Range(HoursNumber(c.device_hours_base()), HoursNumber(c.device_hours_max())),
           c.usd_per_hour() > 0 ? Usd(c.usd_per_hour()) : "-",
           c.usd_base() >= 0 ? Range(Usd(c.usd_base()), Usd(c.usd_max())) : "unpriced"});
  }
  if (t.empty()) {
    absl::StrAppend(&out, "no live workers: nothing to estimate the speed from yet\n");
  } else {
    absl::StrAppend(&out, t.Render());
  }
  absl::StrAppend(&out,
                  "\nthe grid alone on one class: GPU-H and COST above; on the fleet as it "
                  "is now (every class sharing the work): ");
  if (e.wall_seconds_base() < 0) {
    absl::StrAppend(&out, "unknown (no live worker with a known speed can run it)\n");
  } else {
    absl::StrAppend(&out, Range(Duration(e.wall_seconds_base()), Duration(e.wall_seconds_max())),
                    " wall, ",
                    Range(GpuHours(e.device_seconds_base()), GpuHours(e.device_seconds_max())));
    bool any_price = false;
    for (const auto& c : e.classes()) any_price = any_price || c.usd_per_hour() > 0;
    if (e.usd_base() >= 0) {
      absl::StrAppend(&out, ", ", Range(Usd(e.usd_base()), Usd(e.usd_max())));
    } else if (any_price) {
      absl::StrAppend(&out, ", money unknown (a class doing part of it has no price)");
    } else {
      absl::StrAppend(&out, " (no worker declared --price-per-hour: hours only)");
    }
    absl::StrAppend(&out, "\n");
  }
  if (e.has_budget()) {
    const v1::Budget& b = e.budget();
    const double need_lo = b.usd() > 0 ? e.usd_base() : e.device_seconds_base() / 3600;
    const double need_hi = b.usd() > 0 ? e.usd_max() : e.device_seconds_max() / 3600;
    const double limit = b.usd() > 0 ? b.usd() : b.gpu_hours();
    const std::string limit_text =
        b.usd() > 0 ? Usd(limit) : absl::StrCat(HoursNumber(limit), " GPU-h");
    if (need_lo < 0 || e.wall_seconds_base() < 0) {
      absl::StrAppend(&out, "budget ", limit_text,
                      ": the fleet's cost is unknown, so whether it "
                      "fits is too\n");
    } else if (need_hi <= limit) {
      absl::StrAppend(&out, "budget ", limit_text, ": the whole sweep fits, refinement included\n");
    } else if (need_lo <= limit) {
      absl::StrAppend(&out, "budget ", limit_text,
                      ": the grid fits; refinement stops where the budget runs out\n");
    } else {
      absl::StrAppend(
          &out, "budget ", limit_text, ": stops after about ",
          static_cast<int>(std::floor(100 * limit / need_lo)),
          "% of the grid (no refinement); raise it with ablate budget SWEEP --raise N\n");
    }
  }
  for (const auto& n : e.notes()) absl::StrAppend(&out, "note: ", n, "\n");
  return out;
}

}  // namespace ablate::cli
