#include "common/report/export.h"

#include <cmath>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/report/csv.h"
#include "common/run/run_state.h"
#include "common/util/file.h"
#include "common/util/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace ablate::report {
namespace {

namespace pb = google::protobuf;

absl::StatusOr<std::string> ToJson(const pb::Message& message, bool pretty) {
  pb::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.add_whitespace = pretty;
  std::string out;
  const auto status = pb::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("JSON encoding failed: ", status.ToString()));
  }
  return out;
}

absl::Status FromJson(const std::string& json, pb::Message* message, const std::string& where) {
  pb::util::JsonParseOptions options;
  // Newer exports may carry fields this build does not know; keep reading them.
  options.ignore_unknown_fields = true;
  const auto status = pb::util::JsonStringToMessage(json, message, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", status.ToString()));
  }
  return absl::OkStatus();
}

// A run as a line of runs.jsonl: proto JSON, but with the run's state named as in every other
// output ("succeeded", util::RunStateName), not by the proto's enum name ("SUCCEEDED").
absl::StatusOr<std::string> RunLine(const ablate::v1::Run& run) {
  ASSIGN_OR_RETURN(std::string json, ToJson(run, false));
  auto j = nlohmann::ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InternalError("JSON encoding failed: unparsable run");
  if (j.contains("state")) j["state"] = std::string(util::RunStateName(run.state()));
  return j.dump();
}

// Reads a line of runs.jsonl: run states in lower case, or, from exports written before they
// were, the proto's enum names.
absl::Status RunFromLine(const std::string& line, ablate::v1::Run* run, const std::string& where) {
  auto j = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("state") && j["state"].is_string()) {
    const ablate::v1::RunState state = util::RunStateFromName(j["state"].get<std::string>());
    if (state != ablate::v1::RUN_STATE_UNSPECIFIED) {
      j["state"] = ablate::v1::RunState_Name(state);
      return FromJson(j.dump(), run, where);
    }
  }
  return FromJson(line, run, where);  // also names what is wrong with a broken line
}

// An export is made again from the server at will, so a rename (no reader sees half a file) is
// enough; it does not wait for the disk.
absl::Status WriteExportFile(const std::string& path, std::string_view content) {
  return util::WriteFileAtomically(path, content, util::Durability::kRename);
}

}  // namespace

absl::Status WriteExport(const Export& data, const std::string& dir) {
  RETURN_IF_ERROR(util::MakeDirs(dir));
  ASSIGN_OR_RETURN(std::string sweep, ToJson(data.sweep, true));
  RETURN_IF_ERROR(WriteExportFile(dir + "/sweep.json", sweep + "\n"));
  std::string runs;
  for (const auto& r : data.runs) {
    ASSIGN_OR_RETURN(std::string line, RunLine(r));
    absl::StrAppend(&runs, line, "\n");
  }
  RETURN_IF_ERROR(WriteExportFile(dir + "/runs.jsonl", runs));
  if (!data.with_metrics) {
    std::error_code ec;
    std::filesystem::remove(dir + "/metrics.csv", ec);
    if (ec) return absl::InternalError(absl::StrCat(dir, "/metrics.csv: ", ec.message()));
    return absl::OkStatus();
  }
  std::string metrics = CsvLine({"run_id", "step", "name", "value"});
  for (const auto& m : data.metrics) {
    metrics += CsvLine(
        {absl::StrCat(m.run_id), absl::StrCat(m.step), m.name, absl::StrFormat("%.17g", m.value)});
  }
  return WriteExportFile(dir + "/metrics.csv", metrics);
}

absl::StatusOr<Export> ReadExport(const std::string& dir) {
  Export data;
  const std::string sweep_path = dir + "/sweep.json";
  ASSIGN_OR_RETURN(const std::string sweep, util::ReadFile(sweep_path));
  RETURN_IF_ERROR(FromJson(sweep, &data.sweep, sweep_path));

  const std::string runs_path = dir + "/runs.jsonl";
  ASSIGN_OR_RETURN(const std::string runs, util::ReadFile(runs_path));
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(runs, '\n')) {
    ++line_no;
    if (line.empty()) continue;
    ablate::v1::Run run;
    RETURN_IF_ERROR(RunFromLine(std::string(line), &run, absl::StrCat(runs_path, ":", line_no)));
    data.runs.push_back(std::move(run));
  }

  const std::string metrics_path = dir + "/metrics.csv";
  auto metrics = util::ReadFile(metrics_path);
  if (absl::IsNotFound(metrics.status())) return data;
  if (!metrics.ok()) return metrics.status();
  line_no = 0;
  for (absl::string_view line : absl::StrSplit(*metrics, '\n')) {
    ++line_no;
    if (line.empty() || line_no == 1) continue;  // the header
    const std::string where = absl::StrCat(metrics_path, ":", line_no);
    auto fields = SplitCsvLine(std::string(line));
    if (!fields.ok())
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", fields.status().message()));
    if (fields->size() != 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": expected 4 fields (run_id,step,name,value), got ", fields->size()));
    }
    MetricRow row;
    row.name = (*fields)[2];
    if (!absl::SimpleAtoi((*fields)[0], &row.run_id) ||
        !absl::SimpleAtoi((*fields)[1], &row.step) || !absl::SimpleAtod((*fields)[3], &row.value)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": bad number in '", line, "'"));
    }
    data.metrics.push_back(std::move(row));
  }
  return data;
}

}  // namespace ablate::report
