// ApplyDefaults: nanoGPT train.py's optimizer settings on a small, CPU-friendly model.
//
// The model is deliberately smaller than nanoGPT's GPT-2 default (4 layers, 256 wide, context 256)
// so an unconfigured run finishes on a laptop CPU; the optimizer keeps train.py's values (AdamW
// 6e-4, betas 0.9/0.95, weight decay 0.1, clip 1.0) because they are what the LR study perturbs.
#include "common/sweep/sweep.h"

namespace ablate::sweep {

void ApplyDefaults(ablate::v1::RunConfig* c) {
  if (!c->has_n_layer()) c->set_n_layer(4);
  if (!c->has_n_head()) c->set_n_head(4);
  if (!c->has_n_embd()) c->set_n_embd(256);
  if (!c->has_block_size()) c->set_block_size(256);
  if (!c->has_dropout()) c->set_dropout(0.0);
  if (!c->has_bias()) c->set_bias(false);
  if (!c->has_tie_embeddings()) c->set_tie_embeddings(true);
  if (!c->has_qk_norm()) c->set_qk_norm("none");
  if (!c->has_pos()) c->set_pos("learned");
  if (!c->has_attn_softcap()) c->set_attn_softcap(0.0);
  if (!c->has_z_loss()) c->set_z_loss(0.0);
  if (!c->has_init()) c->set_init("nanogpt");
  if (!c->has_qk_norm_eps()) c->set_qk_norm_eps(1e-6);
  if (!c->has_norm_eps()) c->set_norm_eps(1e-5);

  if (!c->has_lr()) c->set_lr(6e-4);
  if (!c->has_min_lr_ratio()) c->set_min_lr_ratio(0.1);
  // min_lr follows each run's own lr, so an LR grid keeps the same schedule shape at every lr.
  if (!c->has_min_lr()) c->set_min_lr(c->lr() * c->min_lr_ratio());
  if (!c->has_beta1()) c->set_beta1(0.9);
  if (!c->has_beta2()) c->set_beta2(0.95);
  if (!c->has_eps()) c->set_eps(1e-8);
  if (!c->has_weight_decay()) c->set_weight_decay(0.1);
  if (!c->has_weight_decay_mode()) c->set_weight_decay_mode("coupled");
  if (!c->has_warmup()) c->set_warmup(100);
  if (!c->has_steps()) c->set_steps(1000);
  if (!c->has_grad_clip()) c->set_grad_clip(1.0);
  if (!c->has_batch_size()) c->set_batch_size(16);
  if (!c->has_grad_accum()) c->set_grad_accum(1);
  if (!c->has_seed()) c->set_seed(0);

  if (!c->has_eval_every()) c->set_eval_every(100);
  if (!c->has_eval_batches()) c->set_eval_batches(8);
  if (!c->has_probe_every()) c->set_probe_every(50);
  if (!c->has_log_every()) c->set_log_every(10);
  if (!c->has_checkpoint_every()) c->set_checkpoint_every(250);

  if (!c->has_device()) c->set_device("auto");
  if (!c->has_dtype()) c->set_dtype("float32");
}

}  // namespace ablate::sweep
