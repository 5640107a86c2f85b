#include "common/spec/yaml_source.h"

#include <cmath>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ablate::spec {

int YamlSource::Line(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return mark.line >= 0 ? mark.line + 1 : 1;
}

absl::Status YamlSource::Error(int line, absl::string_view field, absl::string_view message) const {
  if (field.empty())
    return absl::InvalidArgumentError(absl::StrCat(file_name_, ":", line, ": ", message));
  return absl::InvalidArgumentError(
      absl::StrCat(file_name_, ":", line, ": ", field, ": ", message));
}

absl::StatusOr<YAML::Node> YamlSource::Load(const std::string& text) const {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return Error(e.mark.line >= 0 ? e.mark.line + 1 : 1, "", absl::StrCat("invalid YAML: ", e.msg));
  }
}

absl::Status YamlSource::CatchYaml(const std::function<absl::Status()>& body) const {
  try {
    return body();
  } catch (const YAML::Exception& e) {
    return Error(e.mark.line >= 0 ? e.mark.line + 1 : 1, "", absl::StrCat("invalid YAML: ", e.msg));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(file_name_, ": ", e.what()));
  }
}

absl::StatusOr<std::string> YamlSource::Scalar(const YAML::Node& node,
                                               const std::string& field) const {
  if (!node.IsDefined() || node.IsNull()) return Error(node, field, "missing value");
  if (!node.IsScalar()) return Error(node, field, "expected a single value, not a list or mapping");
  return node.Scalar();
}

absl::StatusOr<int64_t> YamlSource::Int(const YAML::Node& node, const std::string& field) const {
  auto text = Scalar(node, field);
  if (!text.ok()) return text.status();
  int64_t value = 0;
  if (!absl::SimpleAtoi(*text, &value)) {
    return Error(node, field, absl::StrCat("expected an integer, got '", *text, "'"));
  }
  return value;
}

absl::StatusOr<double> YamlSource::Double(const YAML::Node& node, const std::string& field) const {
  auto text = Scalar(node, field);
  if (!text.ok()) return text.status();
  double value = 0;
  if (!absl::SimpleAtod(*text, &value) || !std::isfinite(value)) {
    return Error(node, field, absl::StrCat("expected a number, got '", *text, "'"));
  }
  return value;
}

absl::Status YamlSource::Mapping(const YAML::Node& node, const std::string& field) const {
  if (!node.IsMap()) {
    return Error(
        node, field,
        node.IsNull() ? "missing value, expected a mapping of keys" : "expected a mapping of keys");
  }
  // yaml-cpp keeps both copies of a repeated key; a silent "last one wins" would hide typos.
  std::set<std::string> seen;
  for (const auto& entry : node) {
    const auto key = entry.first.Scalar();
    if (!seen.insert(key).second) {
      return Error(entry.first, field.empty() ? key : absl::StrCat(field, ".", key),
                   "duplicate key");
    }
  }
  return absl::OkStatus();
}

}  // namespace ablate::spec
