// One `grid:` entry -> an Axis: a list of values, or a logspace/linspace generator.
#pragma once

#include "common/sweep/sweep.h"
#include "common/sweep/yaml_source.h"
#include "yaml-cpp/yaml.h"

namespace ablate::sweep {

// `key` is the axis name node, `value` its values. Checks the name is a setting, values have its
// type, the axis is non-empty, values are distinct (after canonical formatting) and LRs positive.
// A generator may make at most `max_values` values: an axis longer than the grid limit can never
// be submitted, and generating it first would cost the time and memory the limit exists to bound.
absl::StatusOr<Axis> ParseAxis(const YamlSource& source, const YAML::Node& key,
                               const YAML::Node& value, int64_t max_values);

}  // namespace ablate::sweep
