#include "worker/train/bpe_tokenizer.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/util/file.h"
#include "common/util/status_macros.h"

extern char** environ;

namespace ablate::train {
namespace {

// Runs `argv` (looked up in PATH) with stdout to `out_path` and stderr captured; an error with
// the tail of stderr when it cannot start or exits non-zero.
absl::Status RunTool(const std::vector<std::string>& argv, const std::string& in_path,
                     const std::string& out_path, const std::string& cwd = "") {
  const std::string err_path = util::TempPathFor(out_path) + ".stderr";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!in_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, 0, in_path.c_str(), O_RDONLY, 0);
  }
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  // After the opens, so the paths above resolve against our own working directory.
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    std::filesystem::remove(err_path);
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot run ", argv[0], ": ", std::strerror(rc),
        " (install Debian's `sentencepiece` package, which provides spm_train and spm_encode)"));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string err = util::ReadFile(err_path).value_or("");
  std::filesystem::remove(err_path);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    if (err.size() > 2000) err = "..." + err.substr(err.size() - 2000);
    return absl::InternalError(absl::StrCat(argv[0], " failed: ", err));
  }
  return absl::OkStatus();
}

absl::Status ForEachIdLine(const std::string& path,
                           const std::function<void(const std::vector<int>&)>& per_line) {
  std::ifstream in(path);
  if (!in) return absl::InternalError(absl::StrCat(path, ": cannot open"));
  std::vector<int> ids;
  std::string line;
  while (std::getline(in, line)) {
    ids.clear();
    const char* p = line.data();
    const char* end = p + line.size();
    while (p < end) {
      if (*p == ' ') {
        ++p;
        continue;
      }
      int id = 0;
      auto [next, ec] = std::from_chars(p, end, id);
      if (ec != std::errc()) return absl::InternalError(absl::StrCat(path, ": bad id line"));
      ids.push_back(id);
      p = next;
    }
    per_line(ids);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TrainBpeModel(const std::string& input, int vocab, const std::string& model_prefix) {
  // character_coverage < 1 keeps rare characters (stray symbols in Gutenberg text) out of the
  // vocabulary; byte fallback still encodes them losslessly. Lines up to 64 KiB are used whole,
  // since paragraphs of real books exceed SentencePiece's 4 KiB default and would be dropped.
  //
  // spm_train writes its --input and --model_prefix into the model file. Given as they are, every
  // machine's model would differ by its paths and a fleet's runs would report different
  // tokenizer hashes for the same tokenizer. So it runs in a scratch directory under the fixed
  // names corpus.txt (a link to the input) and model: the same text and settings then give the
  // same model file, byte for byte, on every machine.
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = model_prefix + ".train";
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir.string(), ": ", ec.message()));
  fs::create_symlink(fs::absolute(input, ec), dir / "corpus.txt", ec);
  if (ec) return absl::InternalError(absl::StrCat(dir.string(), "/corpus.txt: ", ec.message()));
  const std::string log = model_prefix + ".log";
  absl::Status s = RunTool(
      {"spm_train", "--input=corpus.txt", "--model_prefix=model", "--model_type=bpe",
       absl::StrCat("--vocab_size=", vocab), "--byte_fallback=true", "--character_coverage=0.9995",
       "--input_sentence_size=0", "--shuffle_input_sentence=false", "--num_threads=1",
       "--max_sentence_length=65536", absl::StrCat("--unk_id=", kUnkId),
       absl::StrCat("--bos_id=", kBosId), absl::StrCat("--eos_id=", kEosId), "--pad_id=-1"},
      "", log, dir.string());
  std::filesystem::remove(log);
  if (s.ok()) {
    for (const char* ext : {".model", ".vocab"}) {
      fs::rename(dir / (std::string("model") + ext), model_prefix + ext, ec);
      if (ec) s = absl::InternalError(absl::StrCat(model_prefix, ext, ": ", ec.message()));
    }
  }
  fs::remove_all(dir, ec);
  if (!s.ok()) {
    // spm_train's log is long; its reason is the last line ("Vocabulary size too high ...").
    std::string msg(s.message());
    const size_t last = msg.find_last_of('\n', msg.size() >= 2 ? msg.size() - 2 : 0);
    if (last != std::string::npos) msg = msg.substr(last + 1);
    return absl::InvalidArgumentError(absl::StrCat("training the BPE tokenizer failed: ", msg));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SpmVersion() {
  static const absl::StatusOr<std::string> version = []() -> absl::StatusOr<std::string> {
    const std::string out =
        (std::filesystem::temp_directory_path() / absl::StrCat("ablate-spm-version-", getpid()))
            .string();
    absl::Status s = RunTool({"spm_train", "--version"}, "", out);
    absl::StatusOr<std::string> text = util::ReadFile(out);
    std::filesystem::remove(out);
    if (!s.ok()) return s;
    if (!text.ok()) return text.status();
    std::string line = text->substr(0, text->find('\n'));
    if (line.empty()) return absl::InternalError("spm_train --version printed nothing");
    return line;
  }();
  return version;
}

absl::StatusOr<int> BpeVocabSize(const std::string& model_path) {
  std::string vocab_path = model_path;
  vocab_path.replace(vocab_path.size() - std::string(".model").size(), std::string::npos, ".vocab");
  std::ifstream in(vocab_path);
  if (!in) return absl::NotFoundError(absl::StrCat(vocab_path, ": cannot open"));
  int lines = 0;
  std::string line;
  while (std::getline(in, line)) ++lines;
  return lines;
}

absl::Status BpeEncodeLines(const std::string& model_path, const std::string& input,
                            const std::function<void(const std::vector<int>&)>& per_line) {
  const std::string out = util::TempPathFor(input) + ".ids";
  absl::Status s = RunTool(
      {"spm_encode", "--model=" + model_path, "--output_format=id", "--input=" + input}, "", out);
  if (s.ok()) s = ForEachIdLine(out, per_line);
  std::filesystem::remove(out);
  return s;
}

absl::StatusOr<std::vector<std::string>> BpeDecode(const std::string& model_path,
                                                   const std::vector<std::vector<int>>& ids) {
  const std::string in = util::TempPathFor(model_path) + ".ids";
  const std::string out = in + ".txt";
  std::string text;
  for (const auto& line : ids) absl::StrAppend(&text, absl::StrJoin(line, " "), "\n");
  RETURN_IF_ERROR(util::WriteFileAtomically(in, text));
  absl::Status s = RunTool(
      {"spm_decode", "--model=" + model_path, "--input_format=id", "--input=" + in}, "", out);
  std::filesystem::remove(in);
  std::vector<std::string> lines;
  if (s.ok()) {
    std::ifstream o(out);
    std::string line;
    while (std::getline(o, line)) lines.push_back(line);
  }
  std::filesystem::remove(out);
  if (!s.ok()) return s;
  return lines;
}

}  // namespace ablate::train
