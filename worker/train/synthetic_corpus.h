// A generated corpus of short stories for tests and offline demos (`synthetic:N` in a run file).
//
// The stories come from templates over small word lists, with names and objects that recur
// within a story, so a tiny model can learn real structure (the loss falls well below the
// unigram entropy) in a few hundred steps. Same (stories, seed) -> same bytes, on every platform.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ablate::train {

// The number of stories if `path` has the form "synthetic:N" (N >= 1), else nullopt.
std::optional<int64_t> ParseSyntheticPath(std::string_view path);

// One story per paragraph line, each followed by a "<|endoftext|>" line (the TinyStories layout).
std::string SyntheticCorpus(int64_t stories, uint64_t seed);

}  // namespace ablate::train
