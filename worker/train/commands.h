// The server-less subcommands of ablate-worker: `train RUN.yaml` and `data prepare`.
#pragma once

#include <string>
#include <vector>

namespace ablate::train {

struct TrainCommandArgs {
  std::string run_file, out_dir, device = "auto", cache_dir;
  int threads = 0;
  // > 1: train that many copies of the run at once, as `--slots N` trains leased runs: copy k
  // with seed + k into out_dir/copy-k, each on its own thread with threads / copies CPU threads
  // (and on CUDA its own stream). Prints each copy's result and the total tokens/s.
  int copies = 1;
  bool quiet = false;
};
// `ablate-worker train RUN.yaml --out DIR [--copies N]`; returns the process exit code (0
// succeeded or diverged, 1 error, 2 bad flags, 130 stopped by a signal after checkpointing).
int RunTrainCommand(const TrainCommandArgs& args);

struct DataPrepareArgs {
  std::vector<std::string> text_files;
  int vocab = 4096;
  std::string cache_dir, out_dir;
};
// `ablate-worker data prepare --text F... --vocab N`: trains one tokenizer on all the files and
// writes one token file per text file into the cache (and copies them to out_dir if given).
int RunDataPrepareCommand(const DataPrepareArgs& args);

}  // namespace ablate::train
