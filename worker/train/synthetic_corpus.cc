#include "worker/train/synthetic_corpus.h"

#include <array>
#include <charconv>
#include <system_error>

#include "worker/train/rng.h"

namespace ablate::train {
namespace {

constexpr std::array<std::string_view, 12> kNames = {"Lily", "Tom", "Mia", "Ben", "Sara", "Max",
                                                     "Anna", "Leo", "Zoe", "Sam", "Ella", "Jack"};
constexpr std::array<std::string_view, 10> kAnimals = {"cat",  "dog",  "bird", "fox",   "rabbit",
                                                       "bear", "frog", "duck", "mouse", "horse"};
constexpr std::array<std::string_view, 10> kAdjectives = {
    "little", "happy", "brave", "small", "kind", "shy", "big", "funny", "sleepy", "curious"};
constexpr std::array<std::string_view, 8> kPlaces = {"park",  "forest", "garden", "house",
                                                     "river", "hill",   "school", "beach"};
constexpr std::array<std::string_view, 10> kObjects = {"ball", "box",    "hat",   "kite", "book",
                                                       "cake", "flower", "stone", "toy",  "boat"};
constexpr std::array<std::string_view, 8> kColors = {"red",  "blue",  "green", "yellow",
                                                     "pink", "white", "shiny", "soft"};
constexpr std::array<std::string_view, 6> kVerbs = {"play", "run", "jump", "sing", "read", "swim"};
constexpr std::array<std::string_view, 6> kFeelings = {"happy", "sad",   "surprised",
                                                       "proud", "tired", "excited"};

template <size_t N>
std::string_view Pick(Rng& rng, const std::array<std::string_view, N>& words) {
  return words[rng.Below(N)];
}

void AppendStory(Rng& rng, std::string* out) {
  const std::string_view name = Pick(rng, kNames);
  std::string_view friend_name = Pick(rng, kNames);
  while (friend_name == name) friend_name = Pick(rng, kNames);
  const std::string_view animal = Pick(rng, kAnimals);
  const std::string_view place = Pick(rng, kPlaces);
  const std::string_view object = Pick(rng, kObjects);
  const std::string_view color = Pick(rng, kColors);
  const std::string_view verb = Pick(rng, kVerbs);
  const std::string_view feeling = Pick(rng, kFeelings);
  auto add = [out](std::initializer_list<std::string_view> parts) {
    for (std::string_view p : parts) out->append(p);
  };
  add({"Once upon a time, there was a ", Pick(rng, kAdjectives), " ", animal, " named ", name, ". ",
       name, " liked to ", verb, " in the ", place, " every day. "});
  add({"One day, ", name, " found a ", color, " ", object, " in the ", place, ". "});
  if (rng.Below(2) == 0) {
    add({name, " showed the ", object, " to ", friend_name, ". ", friend_name, " said, \"What a ",
         color, " ", object, "!\" They played with the ", object, " together. "});
  } else {
    add({name, " wanted to keep the ", object, ", but it belonged to ", friend_name, ". ", name,
         " gave the ", object, " back to ", friend_name, ". "});
  }
  add({"At the end of the day, the ", animal, " felt ", feeling, ". The end.\n<|endoftext|>\n"});
}

}  // namespace

std::optional<int64_t> ParseSyntheticPath(std::string_view path) {
  constexpr std::string_view kPrefix = "synthetic:";
  if (!path.starts_with(kPrefix)) return std::nullopt;
  std::string_view digits = path.substr(kPrefix.size());
  int64_t n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size() || n < 1) return std::nullopt;
  return n;
}

std::string SyntheticCorpus(int64_t stories, uint64_t seed) {
  Rng rng(seed);
  std::string text;
  text.reserve(static_cast<size_t>(stories) * 400);
  for (int64_t i = 0; i < stories; ++i) AppendStory(rng, &text);
  return text;
}

}  // namespace ablate::train
