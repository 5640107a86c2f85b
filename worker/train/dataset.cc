#include "worker/train/dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/sweep/sweep.h"
#include "common/util/file.h"
#include "common/util/sha256.h"
#include "common/util/status_macros.h"
#include "worker/train/bpe_tokenizer.h"
#include "worker/train/synthetic_corpus.h"
#include "worker/train/trainer.h"

namespace ablate::train {
namespace {

namespace fs = std::filesystem;

constexpr char kEndOfText[] = "<|endoftext|>";
// The tokenizer learns from at most this much text, always the first bytes of the sources in
// order: enough for a 4k-65k vocabulary, and deterministic, unlike SentencePiece's own sampling.
constexpr int64_t kMaxTokenizerInputBytes = int64_t{256} << 20;
// Bump when the tokenizer options or the encoding rules change, so old cache entries are ignored.
// v2: models are trained under fixed file names, so they no longer carry a machine's paths.
constexpr char kFormatVersion[] = "ablate-bpe-v2";

// The same role always gets the same stories; train and val get different ones.
uint64_t SyntheticSeed(const std::string& role) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a: a fixed, portable string hash
  for (unsigned char c : role) h = (h ^ c) * 1099511628211ULL;
  return h;
}

absl::Status WriteTokenizerInput(const std::vector<std::string>& sources, const std::string& out) {
  std::ofstream o(out, std::ios::binary | std::ios::trunc);
  if (!o) return absl::InternalError(absl::StrCat(out, ": cannot create"));
  int64_t written = 0;
  for (const std::string& source : sources) {
    std::ifstream in(source, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(source, ": cannot open"));
    std::string line;
    while (written < kMaxTokenizerInputBytes && std::getline(in, line)) {
      if (line.empty() || line == kEndOfText) continue;
      o << line << '\n';
      written += static_cast<int64_t>(line.size()) + 1;
    }
  }
  if (written == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no text to train a tokenizer on in ", absl::StrJoin(sources, ", ")));
  }
  o.flush();
  if (!o) return absl::InternalError(absl::StrCat(out, ": write failed"));
  return absl::OkStatus();
}

absl::Status TrainTokenizer(const std::vector<std::string>& sources, int vocab,
                            const std::string& model_path) {
  const std::string input = util::TempPathFor(model_path) + ".txt";
  const std::string prefix = util::TempPathFor(model_path);
  absl::Status status = WriteTokenizerInput(sources, input);
  if (status.ok()) {
    status = TrainBpeModel(input, vocab, prefix);
    if (!status.ok()) {
      status = absl::InvalidArgumentError(
          absl::StrCat(status.message(), " (data: ", absl::StrJoin(sources, ", "), ", vocab ",
                       vocab, "; a small text may not support this many tokens)"));
    }
  }
  // The .vocab lands first: a reader that sees the .model can rely on it.
  const std::string vocab_path = model_path.substr(0, model_path.size() - 6) + ".vocab";
  if (status.ok()) status = util::CommitFile(prefix + ".vocab", vocab_path);
  if (status.ok()) status = util::CommitFile(prefix + ".model", model_path);
  std::error_code ignored;
  fs::remove(input, ignored);
  fs::remove(prefix + ".model", ignored);
  fs::remove(prefix + ".vocab", ignored);
  return status;
}

// Each spm_encode process gets at least this much text: below it, starting a process costs more
// than it saves.
constexpr int64_t kMinBytesPerEncodeProcess = int64_t{8} << 20;
constexpr int kMaxEncodeProcesses = 16;

// Encodes one chunk of the lines file; `first_line` is the index of its first line in the whole
// file, so each line's trailing EOS ids come from the right place.
absl::Status EncodeChunk(const std::string& model_path, const std::string& lines_path,
                         const std::vector<int64_t>& eos_count, size_t first_line,
                         size_t line_count, const std::string& out_path) {
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  auto put = [&out](int id) {
    // Little-endian uint16 whatever the host; vocab <= 65535 is checked by the caller.
    const char bytes[2] = {static_cast<char>(id & 0xff), static_cast<char>((id >> 8) & 0xff)};
    out.write(bytes, 2);
  };
  size_t line_index = 0;
  absl::Status s = BpeEncodeLines(model_path, lines_path, [&](const std::vector<int>& ids) {
    for (int id : ids) put(id);
    if (line_index < line_count) {
      for (int64_t i = 0; i < eos_count[first_line + line_index]; ++i) put(kEosId);
    }
    ++line_index;
  });
  if (s.ok() && line_index != line_count) {
    s = absl::InternalError(
        absl::StrCat("spm_encode returned ", line_index, " lines for ", line_count));
  }
  out.flush();
  if (s.ok() && !out) s = absl::InternalError(absl::StrCat(out_path, ": write failed"));
  return s;
}

}  // namespace

// The text is copied without the EOS marker lines and empty lines into one lines file per
// spm_encode process (cut at line boundaries, about equal in bytes); the ids come back one line
// per line, and the markers are re-inserted here. SentencePiece encodes every line on its own,
// so the token file is the same byte for byte whatever the number of processes.
absl::Status EncodeTextFile(const std::string& model_path, const std::string& text_path,
                            const std::string& token_path, int processes) {
  std::error_code ec;
  const auto text_bytes = static_cast<int64_t>(fs::file_size(text_path, ec));
  if (ec) return absl::NotFoundError(absl::StrCat(text_path, ": cannot open"));
  if (processes <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    processes = static_cast<int>(std::clamp<int64_t>(text_bytes / kMinBytesPerEncodeProcess, 1,
                                                     std::min(cores, kMaxEncodeProcesses)));
  }
  const int64_t chunk_bytes = std::max<int64_t>(1, text_bytes / processes);
  const std::string base = util::TempPathFor(token_path);
  std::vector<std::string> chunk_paths;
  std::vector<size_t> chunk_first;  // index of each chunk's first line
  int64_t leading_eos = 0;
  std::vector<int64_t> eos_count;
  auto cleanup = [&] {
    std::error_code ignored;
    for (const auto& c : chunk_paths) {
      fs::remove(c + ".txt", ignored);
      fs::remove(c + ".u16", ignored);
    }
    fs::remove(base, ignored);
  };
  {
    std::ifstream in(text_path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(text_path, ": cannot open"));
    std::ofstream out;
    int64_t in_chunk = 0;
    std::string line;
    while (std::getline(in, line)) {
      if (line == kEndOfText) {
        if (eos_count.empty()) {
          ++leading_eos;
        } else {
          ++eos_count.back();
        }
        continue;
      }
      if (line.empty()) continue;
      if (!out.is_open() ||
          (in_chunk >= chunk_bytes && static_cast<int>(chunk_paths.size()) < processes)) {
        if (out.is_open() && !out.flush()) break;
        out.close();
        chunk_paths.push_back(absl::StrCat(base, "-", chunk_paths.size()));
        chunk_first.push_back(eos_count.size());
        out.open(chunk_paths.back() + ".txt", std::ios::binary | std::ios::trunc);
        in_chunk = 0;
      }
      out << line << '\n';
      in_chunk += static_cast<int64_t>(line.size()) + 1;
      eos_count.push_back(0);
    }
    if (out.is_open() && !out.flush()) {
      cleanup();
      return absl::InternalError(absl::StrCat(chunk_paths.back(), ".txt: write failed"));
    }
  }
  std::vector<absl::Status> results(chunk_paths.size());
  {
    std::vector<std::thread> threads;
    for (size_t k = 0; k < chunk_paths.size(); ++k) {
      const size_t first = chunk_first[k];
      const size_t count =
          (k + 1 < chunk_paths.size() ? chunk_first[k + 1] : eos_count.size()) - first;
      threads.emplace_back([&, k, first, count] {
        results[k] = EncodeChunk(model_path, chunk_paths[k] + ".txt", eos_count, first, count,
                                 chunk_paths[k] + ".u16");
      });
    }
    for (auto& t : threads) t.join();
  }
  for (size_t k = 0; k < results.size(); ++k) {
    if (!results[k].ok()) {
      cleanup();
      return absl::Status(results[k].code(), absl::StrCat(text_path, ": ", results[k].message()));
    }
  }
  absl::Status s;
  {
    std::ofstream out(base, std::ios::binary | std::ios::trunc);
    const char eos[2] = {static_cast<char>(kEosId & 0xff), static_cast<char>(kEosId >> 8)};
    for (int64_t i = 0; i < leading_eos; ++i) out.write(eos, 2);
    for (const auto& c : chunk_paths) {
      std::ifstream part(c + ".u16", std::ios::binary);
      out << part.rdbuf();
    }
    out.flush();
    if (!out) s = absl::InternalError(absl::StrCat(base, ": write failed"));
  }
  if (s.ok()) s = util::CommitFile(base, token_path);
  cleanup();
  return s;
}

namespace {

absl::Status EncodeFile(const std::string& model_path, const std::string& text_path,
                        const std::string& token_path) {
  return EncodeTextFile(model_path, text_path, token_path, 0);
}

}  // namespace

absl::StatusOr<std::string> ResolveTextPath(const std::string& path, const std::string& role,
                                            const std::string& cache_dir) {
  // The rule the sweep parser applied at submit (common/sweep), so both refuse the same paths.
  if (absl::Status s = sweep::CheckDataPath(path); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("data.", role, ": ", s.message()));
  }
  if (std::optional<int64_t> stories = ParseSyntheticPath(path)) {
    const std::string dir = cache_dir + "/synthetic";
    RETURN_IF_ERROR(util::MakeDirs(dir));
    const std::string file = absl::StrCat(dir, "/", role, "-", *stories, ".txt");
    if (!fs::exists(file)) {
      RETURN_IF_ERROR(
          util::WriteFileAtomically(file, SyntheticCorpus(*stories, SyntheticSeed(role))));
    }
    return file;
  }
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat("data.", role, ": file not found: ", path));
  }
  return path;
}

std::string TokenizerCacheKey(int vocab, const std::vector<std::string>& source_shas,
                              const std::string& spm_version) {
  return Sha256Hex(absl::StrCat(kFormatVersion, "|vocab=", vocab,
                                "|max_bytes=", kMaxTokenizerInputBytes, "|spm=", spm_version, "|",
                                absl::StrJoin(source_shas, ",")));
}

namespace {

// A worker plans a run's data (worker/fleet_data.cc), then Train plans it again, run after run:
// hashing a corpus of gigabytes each time would cost seconds per run. Digests are kept per
// process by path, size and modification time, so a file changed in place is hashed again.
absl::StatusOr<std::string> CachedSha256File(const std::string& path) {
  struct Entry {
    uintmax_t size;
    fs::file_time_type mtime;
    std::string sha;
  };
  static std::mutex mu;
  static std::map<std::string, Entry> cache;
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  const fs::file_time_type mtime = ec ? fs::file_time_type{} : fs::last_write_time(path, ec);
  if (ec) return Sha256File(path);  // let it name the problem
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(path);
        it != cache.end() && it->second.size == size && it->second.mtime == mtime) {
      return it->second.sha;
    }
  }
  ASSIGN_OR_RETURN(std::string sha, Sha256File(path));
  std::lock_guard<std::mutex> lock(mu);
  cache[path] = Entry{size, mtime, sha};
  return sha;
}

}  // namespace

absl::StatusOr<DatasetLayout> PlanDataset(const std::vector<std::string>& tokenizer_sources,
                                          const std::vector<std::string>& encode, int vocab,
                                          const std::string& cache_dir) {
  if (absl::Status s = sweep::CheckVocab(vocab); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer vocab: ", s.message()));
  }
  // Hash each distinct file once: a run without val encodes its train text twice.
  std::map<std::string, std::string> shas;
  auto sha_of = [&](const std::string& path) -> absl::StatusOr<std::string> {
    if (auto it = shas.find(path); it != shas.end()) return it->second;
    ASSIGN_OR_RETURN(std::string sha, CachedSha256File(path));
    shas.emplace(path, sha);
    return sha;
  };
  std::vector<std::string> source_shas;
  for (const std::string& source : tokenizer_sources) {
    ASSIGN_OR_RETURN(std::string sha, sha_of(source));
    source_shas.push_back(std::move(sha));
  }
  ASSIGN_OR_RETURN(const std::string spm_version, SpmVersion());
  DatasetLayout out;
  out.tokenizer_key = TokenizerCacheKey(vocab, source_shas, spm_version);
  out.tokenizer_model = absl::StrCat(cache_dir, "/tokenizers/", out.tokenizer_key, ".model");
  out.tokenizer_vocab = absl::StrCat(cache_dir, "/tokenizers/", out.tokenizer_key, ".vocab");
  for (const std::string& text_path : encode) {
    ASSIGN_OR_RETURN(std::string sha, sha_of(text_path));
    out.token_paths.push_back(absl::StrCat(cache_dir, "/tokens/", out.tokenizer_key.substr(0, 16),
                                           "-", sha.substr(0, 32), ".u16"));
    out.text_sha256.push_back(std::move(sha));
  }
  return out;
}

absl::StatusOr<RunTexts> ResolveRunTexts(const v1::DataSpec& data, const std::string& cache_dir) {
  // Every rule on the spec alone, as the sweep parser applied it at submit.
  RETURN_IF_ERROR(sweep::ValidateData(data));
  RunTexts out;
  ASSIGN_OR_RETURN(out.train_text, ResolveTextPath(data.train(), "train", cache_dir));
  // Without a validation file the model is evaluated on (fixed batches of) the training text.
  out.val_text = out.train_text;
  if (!data.val().empty()) {
    ASSIGN_OR_RETURN(out.val_text, ResolveTextPath(data.val(), "val", cache_dir));
  }
  out.vocab = data.tokenizer().vocab() != 0 ? data.tokenizer().vocab() : sweep::kDefaultVocab;
  return out;
}

absl::StatusOr<PreparedDataset> PrepareDataset(const std::vector<std::string>& tokenizer_sources,
                                               const std::vector<std::string>& encode, int vocab,
                                               const std::string& cache_dir, PrepareStats* stats) {
  PrepareStats local_stats;
  if (stats == nullptr) stats = &local_stats;
  ASSIGN_OR_RETURN(DatasetLayout layout, PlanDataset(tokenizer_sources, encode, vocab, cache_dir));
  PreparedDataset out;
  out.tokenizer_key = layout.tokenizer_key;
  RETURN_IF_ERROR(util::MakeDirs(cache_dir + "/tokenizers"));
  RETURN_IF_ERROR(util::MakeDirs(cache_dir + "/tokens"));
  out.tokenizer_model = layout.tokenizer_model;
  if (!fs::exists(out.tokenizer_model)) {
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(TrainTokenizer(tokenizer_sources, vocab, out.tokenizer_model));
    stats->trained_tokenizer = true;
    stats->tokenizer_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  ASSIGN_OR_RETURN(out.vocab_size, BpeVocabSize(out.tokenizer_model));
  for (size_t i = 0; i < encode.size(); ++i) {
    PreparedFile file;
    file.text_path = encode[i];
    file.text_sha256 = layout.text_sha256[i];
    file.token_path = layout.token_paths[i];
    if (!fs::exists(file.token_path)) {
      const auto t0 = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(EncodeFile(out.tokenizer_model, file.text_path, file.token_path));
      stats->encode_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      stats->encoded_bytes += static_cast<int64_t>(fs::file_size(file.text_path));
    }
    file.tokens = static_cast<int64_t>(fs::file_size(file.token_path)) / 2;
    out.files.push_back(std::move(file));
  }
  return out;
}

absl::StatusOr<DataPlan> PlanRunData(const v1::DataSpec& data, const std::string& cache_dir) {
  ASSIGN_OR_RETURN(const RunTexts texts, ResolveRunTexts(data, cache_dir));
  ASSIGN_OR_RETURN(
      const DatasetLayout layout,
      PlanDataset({texts.train_text}, {texts.train_text, texts.val_text}, texts.vocab, cache_dir));
  DataPlan plan;
  // The tokenizer key already covers format, vocab, input cap, SentencePiece version and the
  // train text; the encoded texts complete what the token files depend on.
  plan.key = Sha256Hex(absl::StrCat("ablate-prepared-v1|", layout.tokenizer_key, "|",
                                    absl::StrJoin(layout.text_sha256, ",")));
  plan.description =
      absl::StrCat("bpe vocab ", texts.vocab, ", train ", layout.text_sha256[0].substr(0, 12),
                   ", val ", layout.text_sha256[1].substr(0, 12));
  plan.files = {{"tokenizer_vocab", layout.tokenizer_vocab},
                {"tokens_train", layout.token_paths[0]},
                {"tokens_val", layout.token_paths[1]},
                // Last: a cache reader that sees the .model relies on the .vocab and, here, on
                // the token files being there too.
                {"tokenizer_model", layout.tokenizer_model}};
  return plan;
}

absl::StatusOr<DataPrepTimes> PrepareRunData(const v1::DataSpec& data,
                                             const std::string& cache_dir) {
  ASSIGN_OR_RETURN(const RunTexts texts, ResolveRunTexts(data, cache_dir));
  PrepareStats stats;
  RETURN_IF_ERROR(PrepareDataset({texts.train_text}, {texts.train_text, texts.val_text},
                                 texts.vocab, cache_dir, &stats)
                      .status());
  return DataPrepTimes{stats.tokenizer_seconds, stats.encoded_bytes, stats.encode_seconds};
}

TokenFile::TokenFile(const uint16_t* data, int64_t size, size_t bytes)
    : data_(data), size_(size), bytes_(bytes) {}

TokenFile::TokenFile(TokenFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      bytes_(std::exchange(other.bytes_, 0)) {}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(const_cast<uint16_t*>(data_), bytes_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

TokenFile::~TokenFile() {
  if (data_ != nullptr) munmap(const_cast<uint16_t*>(data_), bytes_);
}

absl::StatusOr<TokenFile> TokenFile::Open(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < 4 || st.st_size % 2 != 0) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a token file (size ", st.st_size, " bytes)"));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* map = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return absl::InternalError(absl::StrCat(path, ": mmap failed"));
  return TokenFile(static_cast<const uint16_t*>(map), static_cast<int64_t>(bytes / 2), bytes);
}

}  // namespace ablate::train
