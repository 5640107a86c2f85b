// The tiny run the trainer tests share: 2 layers, n_embd 32, on the synthetic corpus, so a run
// takes about a second on one CPU thread.
#pragma once

#include "ablate/v1/ablate.pb.h"
#include "common/sweep/run_config.h"

namespace ablate::train {

inline ablate::v1::RunSpec TinySpec() {
  ablate::v1::RunSpec spec;
  spec.mutable_data()->set_train("synthetic:300");
  spec.mutable_data()->set_val("synthetic:40");
  spec.mutable_data()->mutable_tokenizer()->set_type("bpe");
  spec.mutable_data()->mutable_tokenizer()->set_vocab(320);
  auto* c = spec.mutable_config();
  c->set_n_layer(2);
  c->set_n_head(2);
  c->set_n_embd(32);
  c->set_block_size(32);
  c->set_batch_size(4);
  c->set_steps(24);
  c->set_warmup(4);
  c->set_lr(3e-3);
  c->set_dropout(0.1);  // exercises torch's RNG in the checkpoint too
  c->set_eval_every(8);
  c->set_eval_batches(2);
  c->set_probe_every(6);
  c->set_log_every(1);
  c->set_checkpoint_every(1000);
  c->set_seed(7);
  ablate::sweep::ApplyDefaults(c);
  return spec;
}

}  // namespace ablate::train
