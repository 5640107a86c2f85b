#include "worker/train/metrics_log.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/util/file.h"
#include "common/util/status_macros.h"

namespace ablate::train {

absl::StatusOr<MetricsLog> MetricsLog::Open(const std::string& path, int64_t keep_through_step) {
  std::string kept;
  if (keep_through_step >= 0 && std::filesystem::exists(path)) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      // A torn last line (crash mid-write) fails to parse and is dropped with the rest.
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
          j["step"].get<int64_t>() <= keep_through_step) {
        kept += line + "\n";
      }
    }
  }
  RETURN_IF_ERROR(util::WriteFileAtomically(path, kept));
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) return absl::InternalError(absl::StrCat(path, ": cannot open for appending"));
  return MetricsLog(f, path);
}

absl::Status MetricsLog::Append(const std::vector<ablate::v1::MetricPoint>& points) {
  std::string out;
  for (const auto& p : points) {
    nlohmann::json j = {
        {"step", p.step()}, {"name", p.name()}, {"value", p.value()}, {"time", p.time()}};
    out += j.dump() + "\n";
  }
  if (std::fwrite(out.data(), 1, out.size(), file_.get()) != out.size() ||
      std::fflush(file_.get()) != 0) {
    return absl::InternalError(absl::StrCat(path_, ": write failed"));
  }
  return absl::OkStatus();
}

}  // namespace ablate::train
