// The data sets `ablate data fetch NAME` knows: where each file is published and, where known,
// its SHA-256. A file without a pinned hash is verified by trust on first use: the first fetch
// records what arrived in <dir>/<file>.sha256 and every later fetch checks against that record
// (docs: README, "Data"). Pin a hash here once it has been checked against the publisher's.
#pragma once

#include <string_view>
#include <vector>

namespace ablate::cli {

struct ManifestFile {
  std::string_view name;    // the file name under --to
  std::string_view url;     // relative to the data set's base URL
  std::string_view sha256;  // empty: none pinned yet (trust on first use)
};

struct ManifestDataset {
  std::string_view name;
  std::string_view what;
  std::string_view base_url;
  std::vector<ManifestFile> files;
};

inline const std::vector<ManifestDataset>& DataManifest() {
  static const std::vector<ManifestDataset> kManifest = {
      {"tinystories",
       "TinyStories V2 (GPT-4 stories), Eldan & Li 2023, CDLA-Sharing-1.0: train (~2 GB) and "
       "validation (~22 MB) text, one <|endoftext|> line after each story",
       "https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/",
       {
           {"TinyStoriesV2-GPT4-train.txt", "TinyStoriesV2-GPT4-train.txt", ""},
           {"TinyStoriesV2-GPT4-valid.txt", "TinyStoriesV2-GPT4-valid.txt", ""},
       }},
  };
  return kManifest;
}

}  // namespace ablate::cli
