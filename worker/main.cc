// ablate-worker: trains runs. `ablate-worker --server ...` is the daemon; `train` and
// `data prepare` work with no server at all.
#include <cstdlib>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "worker/train/commands.h"

namespace {

std::string EnvOr(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

std::string DefaultCacheDir() {
  std::string xdg = EnvOr("XDG_CACHE_HOME", "");
  if (!xdg.empty()) return xdg + "/ablate";
  return EnvOr("HOME", "/tmp") + "/.cache/ablate";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ablate-worker: trains ablation-sweep runs with LibTorch (CUDA, MPS or CPU)"};
  app.require_subcommand(1);

  ablate::train::TrainCommandArgs train;
  train.cache_dir = DefaultCacheDir();
  auto* train_cmd = app.add_subcommand("train", "Train one run from RUN.yaml, no server needed");
  train_cmd->add_option("run_file", train.run_file, "Run file (a sweep file with one value each)")
      ->required();
  train_cmd->add_option("--out", train.out_dir, "Output directory (rerun with it to resume)")
      ->required();
  train_cmd->add_option("--device", train.device, "auto | cpu | cuda | mps")
      ->check(CLI::IsMember({"auto", "cpu", "cuda", "mps"}));
  train_cmd->add_option("--cache-dir", train.cache_dir, "Tokenizer and token-file cache");
  train_cmd->add_option("--threads", train.threads, "CPU threads (0: all cores)");
  train_cmd->add_flag("--quiet", train.quiet, "Print only the result");

  ablate::train::DataPrepareArgs prep;
  prep.cache_dir = DefaultCacheDir();
  auto* data_cmd = app.add_subcommand("data", "Data set tools");
  data_cmd->require_subcommand(1);
  auto* prep_cmd = data_cmd->add_subcommand(
      "prepare", "Train a BPE tokenizer on text files and write uint16 token files");
  prep_cmd->add_option("--text", prep.text_files, "Text files (UTF-8)")->required();
  prep_cmd->add_option("--vocab", prep.vocab, "Vocabulary size")->check(CLI::Range(256, 65535));
  prep_cmd->add_option("--cache-dir", prep.cache_dir, "Where prepared data sets are cached");
  prep_cmd->add_option("--out", prep.out_dir, "Also copy the tokenizer and token files here");

  CLI11_PARSE(app, argc, argv);
  if (*train_cmd) return ablate::train::RunTrainCommand(train);
  if (*prep_cmd) return ablate::train::RunDataPrepareCommand(prep);
  return 2;
}
