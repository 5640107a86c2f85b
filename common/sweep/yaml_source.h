// Reading a YAML document with errors that say "FILE:LINE: field: problem".
//
// yaml-cpp throws on malformed documents and on bad conversions; everything here returns
// absl::Status instead, and the parsers wrap their whole body in CatchYaml so no exception
// leaves common/sweep.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

namespace ablate::sweep {

// Sweep files need a handful of levels and at most a few thousand nodes; these bound what a
// hostile file can make yaml-cpp allocate (800 KB of "[[[..." cost 114 MB before the check).
inline constexpr int kMaxDepth = 32;
inline constexpr int64_t kMaxNodes = 50000;
// Longest scalar (value or key) accepted; `description` passes its own, larger cap.
inline constexpr size_t kMaxScalarBytes = 1024;

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

  // Parses the document; a syntax error comes back with its line. The raw text is checked first
  // (CheckShape), so yaml-cpp never sees a document that would cost far more than its size.
  absl::StatusOr<YAML::Node> Load(const std::string& text) const;

  // The raw-text checks Load makes: no NUL, valid UTF-8, nesting at most kMaxDepth levels and at
  // most kMaxNodes nodes (both estimated on the text: flow brackets, block indentation, "- "
  // items, ","/": " separators). Errors name FILE:LINE.
  absl::Status CheckShape(absl::string_view text) const;

  // Runs `body`, turning any yaml-cpp exception into an error naming the file and line.
  absl::Status CatchYaml(const std::function<absl::Status()>& body) const;

  // Scalar readers: `node` is the value, `field` its dotted path ("data.tokenizer.vocab").
  // A scalar is at most `max_bytes` long, valid UTF-8 and free of NUL (a YAML "\0" escape would
  // otherwise carry one into PostgreSQL, which cuts the string there); so every value that an
  // error message echoes is short.
  absl::StatusOr<std::string> Scalar(const YAML::Node& node, const std::string& field,
                                     size_t max_bytes = kMaxScalarBytes) const;
  absl::StatusOr<int64_t> Int(const YAML::Node& node, const std::string& field) const;
  absl::StatusOr<double> Double(const YAML::Node& node, const std::string& field) const;

  // Checks that `node` is a mapping whose keys are unique and at most 128 bytes long; `field`
  // names it in errors.
  absl::Status Mapping(const YAML::Node& node, const std::string& field) const;

 private:
  std::string file_name_;
};

}  // namespace ablate::sweep
