// RunConfig settings by name: lookup, canonical text of values, and setting them by reflection.
//
// Every value that enters a RunConfig from a file goes through its canonical text first, so the
// number a run trains with is exactly the number in its grid_values and cell key (a logspace
// value 2.15443469e-4 becomes "0.000215443" in both places, never two slightly different numbers).
#pragma once

#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"

namespace ablate::sweep {

// The RunConfig field of that name, or nullptr.
const google::protobuf::FieldDescriptor* FindSetting(const std::string& name);

// Every RunConfig setting name, in declaration order.
const std::vector<std::string>& SettingNames();

// The allowed values of a string setting (qk_norm, pos, ...); empty for other settings.
const std::vector<std::string>& AllowedValues(const std::string& setting);

// " (did you mean 'x'?)" for the closest candidate within a small edit distance, else "".
std::string DidYouMean(const std::string& word, const std::vector<std::string>& candidates);

// Canonical text of a double: "%.6g" ("0.001", "3e-05"), so cell keys are stable.
std::string FormatDouble(double value);

// Checks `text` (a YAML scalar) against the setting's type and returns its canonical text.
// The error message names only the problem; callers prefix file, line and field.
absl::StatusOr<std::string> CanonicalValue(const google::protobuf::FieldDescriptor* field,
                                           const std::string& text);

// The canonical text of a generated number (logspace/linspace) for a numeric setting; integer
// settings accept only integral values.
absl::StatusOr<std::string> CanonicalNumber(const google::protobuf::FieldDescriptor* field,
                                            double value);

// Sets `field` from text that CanonicalValue accepted.
void SetSetting(ablate::v1::RunConfig* config, const google::protobuf::FieldDescriptor* field,
                const std::string& canonical);

// The canonical text of the setting's current value.
std::string SettingText(const ablate::v1::RunConfig& config,
                        const google::protobuf::FieldDescriptor* field);

}  // namespace ablate::sweep
