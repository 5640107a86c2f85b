// Terminal rendering for the CLI: aligned tables, progress bars, durations, run states.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "common/util/run_state.h"

namespace ablate::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Columns padded to their widest cell; numeric-looking cells right-aligned.
  std::string Render() const;
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

std::string StateName(v1::RunState state);         // "queued", "running", ...
std::string Bar(double fraction, int width);       // [#######.....]
std::string Duration(double seconds);              // "1h02m", "3m05s", "12s", "-"
std::string Num(double value, int precision = 4);  // %.{p}g, "-" for NaN
std::string TimeAgo(double unix_seconds);
std::string CountsLine(const v1::SweepCounts& counts);
// "refine lr (max_stable, eta_dagger) until ratio 1.3: 12 of 96 new runs, round 3"
std::string RefineLine(const v1::RefineStatus& refine);
// Run-state predicates live in common/util/run_state.h; kept visible here for CLI code.
using util::IsTerminal;
// Proto -> one-line JSON (field names as in the proto).
std::string ToJson(const google::protobuf::Message& message);
double Now();

}  // namespace ablate::cli
