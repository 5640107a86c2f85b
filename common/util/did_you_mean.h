// " (did you mean 'x'?)" hints for misspelt keys, settings, axes and commands.
#pragma once

#include <string>
#include <vector>

namespace ablate::util {

// " (did you mean 'x'?)" for the closest candidate within a small edit distance, else "".
std::string DidYouMean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace ablate::util
