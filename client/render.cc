#include "client/render.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"

namespace ablate::cli {
namespace {

bool LooksNumeric(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!(absl::ascii_isdigit(c) || c == '.' || c == '-' || c == 'e' || c == '+' || c == '%')) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string Table::Render() const {
  std::vector<size_t> width(header_.size(), 0);
  for (size_t i = 0; i < header_.size(); ++i) width[i] = header_[i].size();
  for (const auto& r : rows_) {
    for (size_t i = 0; i < r.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells, bool header) {
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string& c = i < cells.size() ? cells[i] : "";
      const size_t pad = width[i] - std::min(width[i], c.size());
      const bool right = !header && LooksNumeric(c);
      if (right) out.append(pad, ' ');
      out += c;
      if (!right && i + 1 < width.size()) out.append(pad, ' ');
      if (i + 1 < width.size()) out += "  ";
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += '\n';
  };
  line(header_, true);
  for (const auto& r : rows_) line(r, false);
  return out;
}

std::string StateName(v1::RunState state) {
  std::string name = v1::RunState_Name(state);
  return absl::AsciiStrToLower(name);
}

std::string Bar(double fraction, int width) {
  fraction = std::clamp(std::isfinite(fraction) ? fraction : 0.0, 0.0, 1.0);
  const int filled = static_cast<int>(std::round(fraction * width));
  return absl::StrCat("[", std::string(filled, '#'), std::string(width - filled, '.'), "]");
}

std::string Duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const int64_t s = static_cast<int64_t>(std::round(seconds));
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

std::string Num(double value, int precision) {
  if (!std::isfinite(value)) return std::isnan(value) ? "-" : (value > 0 ? "inf" : "-inf");
  return absl::StrFormat("%.*g", precision, value);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string TimeAgo(double unix_seconds) {
  if (unix_seconds <= 0) return "-";
  return Duration(Now() - unix_seconds) + " ago";
}

std::string CountsLine(const v1::SweepCounts& c) {
  std::string out =
      absl::StrCat(c.succeeded() + c.diverged() + c.failed() + c.cancelled() + c.skipped(), "/",
                   c.total(), " done");
  auto add = [&](int n, const char* name) {
    if (n > 0) absl::StrAppend(&out, ", ", n, " ", name);
  };
  add(c.running(), "running");
  add(c.leased(), "leased");
  add(c.queued(), "queued");
  add(c.succeeded(), "succeeded");
  add(c.diverged(), "diverged");
  add(c.failed(), "failed");
  add(c.cancelled(), "cancelled");
  add(c.skipped(), "skipped (pruned above divergence)");
  add(c.refined(), "added by refinement");
  return out;
}

std::string RefineLine(const v1::RefineStatus& r) {
  return absl::StrCat("refine ", r.axis(), " (", absl::StrJoin(r.boundaries(), ", "),
                      ") until ratio ", Num(r.until_ratio()), ": ", r.new_runs(), " of ",
                      r.max_new_runs(), " new runs, round ", r.rounds());
}

std::string ToJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, opts);
  return out;
}

}  // namespace ablate::cli
