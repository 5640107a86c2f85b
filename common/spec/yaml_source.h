// Reading a YAML document with errors that say "FILE:LINE: field: problem".
//
// yaml-cpp throws on malformed documents and on bad conversions; everything here returns
// absl::Status instead, and the parsers wrap their whole body in CatchYaml so no exception
// leaves common/spec.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

namespace ablate::spec {

class YamlSource {
 public:
  explicit YamlSource(const std::string& file_name) : file_name_(file_name) {}

  const std::string& file_name() const { return file_name_; }

  // 1-based line of a node (1 for a node without a position).
  static int Line(const YAML::Node& node);

  absl::Status Error(int line, absl::string_view field, absl::string_view message) const;
  absl::Status Error(const YAML::Node& node, absl::string_view field,
                     absl::string_view message) const {
    return Error(Line(node), field, message);
  }

  // Parses the document; a syntax error comes back with its line.
  absl::StatusOr<YAML::Node> Load(const std::string& text) const;

  // Runs `body`, turning any yaml-cpp exception into an error naming the file and line.
  absl::Status CatchYaml(const std::function<absl::Status()>& body) const;

  // Scalar readers: `node` is the value, `field` its dotted path ("data.tokenizer.vocab").
  absl::StatusOr<std::string> Scalar(const YAML::Node& node, const std::string& field) const;
  absl::StatusOr<int64_t> Int(const YAML::Node& node, const std::string& field) const;
  absl::StatusOr<double> Double(const YAML::Node& node, const std::string& field) const;

  // Checks that `node` is a mapping whose keys are unique; `field` names it in errors.
  absl::Status Mapping(const YAML::Node& node, const std::string& field) const;

 private:
  std::string file_name_;
};

}  // namespace ablate::spec
