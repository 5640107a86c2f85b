#include "common/sweep/grid_axis.h"

#include <cmath>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/sweep/run_config.h"
#include "common/util/did_you_mean.h"
#include "common/util/status_macros.h"

namespace ablate::sweep {
namespace {

// Relative slack when deciding whether the last generated value still lies within `max`:
// 1e-4 * 10^(12/3) computed in floating point lands a hair above 1.0.
constexpr double kInclusiveSlack = 1e-9;

// A list of at least two positive decimals (of a floating-point setting) in increasing order
// whose log steps agree within 10 %: [1e-3, 3e-3, 1e-2] is log-spaced, [2, 4, 8] of n_layer is
// not (an integer setting has no midpoints), nor is [0.1, 0.2, 0.3].
bool EqualRatios(const google::protobuf::FieldDescriptor* setting,
                 const std::vector<std::string>& values) {
  if (setting == nullptr || values.size() < 2 ||
      setting->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE) {
    return false;
  }
  std::vector<double> logs;
  for (const auto& text : values) {
    double x = 0;
    if (!absl::SimpleAtod(text, &x) || !(x > 0)) return false;
    logs.push_back(std::log(x));
  }
  const double step = (logs.back() - logs.front()) / static_cast<double>(logs.size() - 1);
  if (!(step > 0)) return false;
  for (size_t i = 1; i < logs.size(); ++i) {
    if (std::fabs((logs[i] - logs[i - 1]) - step) > 0.1 * step) return false;
  }
  return true;
}

// Generates the numbers of a logspace/linspace mapping.
absl::StatusOr<std::vector<double>> Generate(const YamlSource& source, const std::string& field,
                                             const YAML::Node& spec, int64_t max_values) {
  const auto kind = spec.begin()->first.Scalar();
  const YAML::Node body = spec.begin()->second;
  const std::string where = absl::StrCat(field, ".", kind);
  RETURN_IF_ERROR(source.Mapping(body, where));
  const bool log = kind == "logspace";
  for (const auto& entry : body) {
    const auto key = entry.first.Scalar();
    const bool known = key == "min" || key == "max" || key == "num" || (log && key == "per_decade");
    if (!known) {
      std::vector<std::string> keys = {"min", "max", "num"};
      if (log) keys.push_back("per_decade");
      return source.Error(entry.first, absl::StrCat(where, ".", key),
                          absl::StrCat("unknown key '", key, "'", util::DidYouMean(key, keys)));
    }
  }
  if (!body["min"]) return source.Error(body, where, "needs min");
  if (!body["max"]) return source.Error(body, where, "needs max");
  ASSIGN_OR_RETURN(const double lo, source.Double(body["min"], where + ".min"));
  ASSIGN_OR_RETURN(const double hi, source.Double(body["max"], where + ".max"));
  if (hi < lo) {
    return source.Error(
        body["max"], where + ".max",
        absl::StrCat("max (", FormatDouble(hi), ") is below min (", FormatDouble(lo), ")"));
  }
  if (log && lo <= 0) {
    return source.Error(body["min"], where + ".min", "logspace needs min > 0");
  }

  std::vector<double> values;
  if (log && body["per_decade"]) {
    if (body["num"]) return source.Error(body["num"], where, "give per_decade or num, not both");
    ASSIGN_OR_RETURN(const int64_t per_decade,
                     source.Int(body["per_decade"], where + ".per_decade"));
    if (per_decade < 1) {
      return source.Error(body["per_decade"], where + ".per_decade", "must be at least 1");
    }
    for (int64_t k = 0;; ++k) {
      const double v = lo * std::pow(10.0, static_cast<double>(k) / per_decade);
      if (v > hi * (1 + kInclusiveSlack)) break;
      values.push_back(v);
      if (static_cast<int64_t>(values.size()) > max_values) {
        return source.Error(
            body, where,
            absl::StrCat("generates more than ", max_values,
                         " values (the grid limit); raise min or lower per_decade"));
      }
    }
    return values;
  }
  if (!body["num"]) {
    return source.Error(body, where, log ? "needs num or per_decade" : "needs num");
  }
  ASSIGN_OR_RETURN(const int64_t num, source.Int(body["num"], where + ".num"));
  if (num < 1 || num > max_values) {
    return source.Error(body["num"], where + ".num",
                        absl::StrCat("must be between 1 and ", max_values, " (the grid limit)"));
  }
  for (int64_t i = 0; i < num; ++i) {
    const double t = num == 1 ? 0.0 : static_cast<double>(i) / static_cast<double>(num - 1);
    values.push_back(log ? lo * std::pow(hi / lo, t) : lo + (hi - lo) * t);
  }
  return values;
}

}  // namespace

absl::StatusOr<Axis> ParseAxis(const YamlSource& source, const YAML::Node& key,
                               const YAML::Node& value, int64_t max_values) {
  Axis axis;
  axis.name = key.Scalar();
  axis.line = YamlSource::Line(key);
  const std::string field = absl::StrCat("grid.", axis.name);
  const auto* setting = FindSetting(axis.name);
  if (setting == nullptr) {
    return source.Error(key, field,
                        absl::StrCat("unknown setting '", axis.name, "'",
                                     util::DidYouMean(axis.name, SettingNames())));
  }

  // (canonical text, the node it came from) per value, for duplicate and range errors.
  std::vector<std::pair<std::string, YAML::Node>> values;
  if (value.IsSequence()) {
    for (const auto& item : value) {
      ASSIGN_OR_RETURN(const std::string text, source.Scalar(item, field));
      auto canonical = CanonicalValue(setting, text);
      if (!canonical.ok()) return source.Error(item, field, canonical.status().message());
      values.emplace_back(*canonical, item);
    }
  } else if (value.IsMap() && value.size() == 1 &&
             (value.begin()->first.Scalar() == "logspace" ||
              value.begin()->first.Scalar() == "linspace")) {
    ASSIGN_OR_RETURN(const auto numbers, Generate(source, field, value, max_values));
    axis.log_spaced = value.begin()->first.Scalar() == "logspace" &&
                      setting->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE;
    for (double v : numbers) {
      auto canonical = CanonicalNumber(setting, v);
      if (!canonical.ok()) return source.Error(value, field, canonical.status().message());
      values.emplace_back(*canonical, value);
    }
  } else if (value.IsMap()) {
    return source.Error(value, field,
                        "expected a list of values, {logspace: {...}} or {linspace: {...}}");
  } else {
    // A lone scalar is almost always a setting meant for `fixed:`; say so rather than guess.
    return source.Error(value, field,
                        "expected a list of values (a single value belongs under fixed:)");
  }

  if (values.empty()) return source.Error(value, field, "empty axis: give at least one value");
  std::set<std::string> seen;
  for (const auto& [text, node] : values) {
    if (!seen.insert(text).second) {
      return source.Error(node, field, absl::StrCat("duplicate value ", text));
    }
    double number = 0;
    if (axis.name == "lr" && absl::SimpleAtod(text, &number) && number <= 0) {
      return source.Error(node, field, absl::StrCat("learning rates must be positive, got ", text));
    }
    axis.values.push_back(text);
  }
  if (value.IsSequence()) axis.log_spaced = EqualRatios(setting, axis.values);
  return axis;
}

}  // namespace ablate::sweep
