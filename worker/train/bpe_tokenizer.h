// SentencePiece BPE through Debian's command-line tools (spm_train, spm_encode, spm_decode).
//
// Why not libsentencepiece: Debian builds it with its own embedded protobuf-lite 3.14, whose
// symbols collide with the system libprotobuf 3.21 that ablate (and torch) link; in one process
// the two abort in protobuf's initialisation checks. A child process per tokenizer job costs
// milliseconds against seconds of training or encoding, and keeps the library out entirely.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ablate::train {

// The ids the trainer fixes so they are known without reading the model.
inline constexpr int kUnkId = 0;
inline constexpr int kBosId = 1;
inline constexpr int kEosId = 2;

// Trains a byte-fallback BPE model on the UTF-8 text file `input` (one sentence a line) and
// writes `model_prefix`.model and .vocab. Options are fixed (no sampling or shuffling of the
// input, one thread), so the same input gives the same model.
absl::Status TrainBpeModel(const std::string& input, int vocab, const std::string& model_prefix);

// What `spm_train --version` prints ("sentencepiece 0.1.97"), run once per process: part of the
// tokenizer cache key, since another SentencePiece release may train a different model from the
// same text.
absl::StatusOr<std::string> SpmVersion();

// The number of pieces of a model (the lines of its .vocab file, written next to it).
absl::StatusOr<int> BpeVocabSize(const std::string& model_path);

// Encodes `input` and calls `per_line` with the ids of each of its lines, in order, streaming
// (a data set may be gigabytes).
absl::Status BpeEncodeLines(const std::string& model_path, const std::string& input,
                            const std::function<void(const std::vector<int>&)>& per_line);

// Decodes each id sequence back to text (for tests and debugging).
absl::StatusOr<std::vector<std::string>> BpeDecode(const std::string& model_path,
                                                   const std::vector<std::vector<int>>& ids);

}  // namespace ablate::train
