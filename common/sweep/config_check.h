// The first problem with a complete RunConfig, with every setting involved in it.
//
// ValidateConfig only needs a message, but the sweep parser must point at a line: for
// "n_embd % n_head != 0" the culprit is whichever of the two the file varies, so the check
// reports all involved settings (most specific first) and the parser picks the one it can locate.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"

namespace ablate::sweep {

struct ConfigProblem {
  std::vector<std::string> fields;  // non-empty; fields[0] is the one the message is about
  std::string message;              // without the field prefix
};

std::optional<ConfigProblem> FindConfigProblem(const ablate::v1::RunConfig& config);

}  // namespace ablate::sweep
