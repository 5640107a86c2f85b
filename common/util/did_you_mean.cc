#include "common/util/did_you_mean.h"

#include <algorithm>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace ablate::util {
namespace {

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string DidYouMean(const std::string& word, const std::vector<std::string>& candidates) {
  // A third of the word's length keeps "learning_rate" from suggesting "warmup" while still
  // catching typos and plural/singular slips ("n_layers", "qknorm").
  // A long word is no typo of a short name, and the edit distance costs |word| * |candidate|.
  if (word.size() > 64) return "";
  const size_t budget = std::max<size_t>(2, word.size() / 3);
  const std::string* best = nullptr;
  size_t best_distance = budget + 1;
  for (const auto& c : candidates) {
    const size_t d = EditDistance(word, c);
    if (d < best_distance) {
      best = &c;
      best_distance = d;
    }
  }
  return best == nullptr ? "" : absl::StrCat(" (did you mean '", *best, "'?)");
}

}  // namespace ablate::util
