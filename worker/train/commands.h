// The server-less subcommands of ablate-worker: `train RUN.yaml` and `data prepare`.
#pragma once

#include <string>
#include <vector>

namespace ablate::train {

struct TrainCommandArgs {
  std::string run_file, out_dir, device = "auto", cache_dir;
  int threads = 0;
  bool quiet = false;
};
// `ablate-worker train RUN.yaml --out DIR`; returns the process exit code (0 succeeded or
// diverged, 1 error, 130 stopped by a signal after checkpointing).
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
