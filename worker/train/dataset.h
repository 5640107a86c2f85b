// Text -> tokenizer -> uint16 token files, cached by content hash, and memory-mapped reading.
//
// Cache layout under cache_dir (safe to share between workers: files appear by atomic rename):
//   synthetic/<role>-<N>.txt       generated corpora for `synthetic:N`
//   tokenizers/<key>.model         key = sha256(options, sha256 of each source text)
//   tokens/<key>-<text sha>.u16    little-endian uint16 ids, one EOS after each story
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"

namespace ablate::train {

// The text file behind a data path: `synthetic:N` is generated into the cache (seeded by `role`,
// so train and val differ); anything else must be an existing file.
absl::StatusOr<std::string> ResolveTextPath(const std::string& path, const std::string& role,
                                            const std::string& cache_dir);

struct PreparedFile {
  std::string text_path;
  std::string text_sha256;
  std::string token_path;
  int64_t tokens = 0;
};

struct PreparedDataset {
  std::string tokenizer_model;  // path of the SentencePiece model in the cache
  std::string tokenizer_key;
  int vocab_size = 0;
  std::vector<PreparedFile> files;  // in the order of `encode`
};

// Where PrepareDataset finds or puts its outputs, computed without making anything (the source
// texts are hashed): what a worker looks for in its cache, or fetches from its fleet.
struct DatasetLayout {
  std::string tokenizer_key;
  std::string tokenizer_model;           // <cache>/tokenizers/<key>.model
  std::string tokenizer_vocab;           // <cache>/tokenizers/<key>.vocab
  std::vector<std::string> text_sha256;  // per file of `encode`
  std::vector<std::string> token_paths;  // per file of `encode`
};
absl::StatusOr<DatasetLayout> PlanDataset(const std::vector<std::string>& tokenizer_sources,
                                          const std::vector<std::string>& encode, int vocab,
                                          const std::string& cache_dir);

// What one PrepareDataset call did, for logs and the data benchmark.
struct PrepareStats {
  bool trained_tokenizer = false;
  double tokenizer_seconds = 0;  // training it, when it was not cached
  int64_t encoded_bytes = 0;     // text bytes encoded (files whose tokens were not cached)
  double encode_seconds = 0;
};

// A run's data: the text behind data.train and data.val (val is the train text when unset) and
// the vocabulary size. Refuses a spec that sweep::ValidateData refuses, naming the field.
struct RunTexts {
  std::string train_text;
  std::string val_text;
  int vocab = 0;
};
absl::StatusOr<RunTexts> ResolveRunTexts(const ablate::v1::DataSpec& data,
                                         const std::string& cache_dir);

// The cache key of a tokenizer: format version, vocab, input cap, SentencePiece version and the
// SHA-256 of each source text.
std::string TokenizerCacheKey(int vocab, const std::vector<std::string>& source_shas,
                              const std::string& spm_version);

// Trains (or reuses) one BPE tokenizer on `tokenizer_sources` and encodes each file of `encode`.
// Lines that are exactly "<|endoftext|>" become the EOS id; every other line is encoded on its
// own (SentencePiece's dummy prefix keeps the word boundary between lines).
absl::StatusOr<PreparedDataset> PrepareDataset(const std::vector<std::string>& tokenizer_sources,
                                               const std::vector<std::string>& encode, int vocab,
                                               const std::string& cache_dir,
                                               PrepareStats* stats = nullptr);

// Encodes `text_path` into the uint16 token file `token_path` (atomically) with `processes`
// spm_encode processes in parallel (0: one per 8 MiB of text, at most one per core and 16). The
// file is the same whatever the number of processes.
absl::Status EncodeTextFile(const std::string& model_path, const std::string& text_path,
                            const std::string& token_path, int processes);

// A read-only memory map of a token file.
class TokenFile {
 public:
  static absl::StatusOr<TokenFile> Open(const std::string& path);
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  const uint16_t* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  TokenFile(const uint16_t* data, int64_t size, size_t bytes);
  const uint16_t* data_ = nullptr;
  int64_t size_ = 0;
  size_t bytes_ = 0;
};

}  // namespace ablate::train
