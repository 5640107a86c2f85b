// The names of the metric points a run reports: the trainer writes them, the server stores them
// (metric_points, runs.latest_*), Prometheus exports some, reports and the CLI read them. They
// are keys in the database and label values in Prometheus, so a value here never changes; a new
// metric gets a new name. docs/trainer.md lists what each one measures.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace ablate::metric {

// Every log_every steps.
inline constexpr char kTrainLoss[] = "train_loss";
inline constexpr char kTrainLossEma[] = "train_loss_ema";  // EMA(0.9) of kTrainLoss
inline constexpr char kLr[] = "lr";
inline constexpr char kGradNorm[] = "grad_norm";  // before clipping
inline constexpr char kTokensPerSecond[] = "tokens_per_second";

// Every eval_every steps.
inline constexpr char kValLoss[] = "val_loss";
inline constexpr char kValPpl[] = "val_ppl";

// Probes, every probe_every steps. The first five are also reported per layer (LayerMetric);
// q_rms_pre and k_rms_pre only per layer;
// without a suffix they are the aggregate over layers (mean, or max for kMaxAttnLogit).
// kKurtosisChannel too is per layer and averaged; kAttnEntropy is also per head (HeadMetric).
// kAttnEntropy is normalised per query position (0..1; docs/trainer.md), not raw nats.
inline constexpr char kAttnEntropy[] = "attn_entropy";
// The lowest head: min over layers and heads of the head's mean normalised entropy.
inline constexpr char kAttnEntropyMinHead[] = "attn_entropy_min_head";
inline constexpr char kMaxAttnLogit[] = "max_attn_logit";
inline constexpr char kQRms[] = "q_rms";
inline constexpr char kKRms[] = "k_rms";
// q and k as projected, before qk_norm and rope (per layer only): after QK-norm kQRms mostly
// reports the norm's gain, so these are the pair that compares across variants.
inline constexpr char kQRmsPre[] = "q_rms_pre";
inline constexpr char kKRmsPre[] = "k_rms_pre";
inline constexpr char kKurtosis[] = "kurtosis";  // per token: over each token's channels
// Per channel (He et al. 2024): kurtosis of the channels' RMS, over the channel dimension.
inline constexpr char kKurtosisChannel[] = "kurtosis_channel";
inline constexpr char kParamNorm[] = "param_norm";
inline constexpr char kOutputLogitMax[] = "output_logit_max";

// A probe's per-layer name: `max_attn_logit.l3` for layer 3. Readers that want every layer of a
// probe match on the aggregate name as a prefix.
inline std::string LayerMetric(const char* probe, size_t layer) {
  return absl::StrCat(probe, ".l", layer);
}

// A probe's per-head name: `attn_entropy.l3.h1` for head 1 of layer 3. It extends the layer's
// name, so a reader that wants only the per-layer series matches `<probe>.l<i>` exactly, not as a
// prefix. (kAttnEntropyMinHead and kKurtosisChannel also start with another probe's name:
// match `<probe>.` with the dot.)
inline std::string HeadMetric(const char* probe, size_t layer, size_t head) {
  return absl::StrCat(LayerMetric(probe, layer), ".h", head);
}

// Whether the trainer reports points named `name`: one of the names above, or a per-layer
// (`<probe>.l<i>`) or per-head (`<probe>.l<i>.h<j>`) name of a probe. What tells a metric a run
// has not reported yet from a misspelt one (`ablate metrics RUN --name val_los`).
inline bool IsReported(std::string_view name) {
  static constexpr std::string_view kNames[] = {kTrainLoss,
                                                kTrainLossEma,
                                                kLr,
                                                kGradNorm,
                                                kTokensPerSecond,
                                                kValLoss,
                                                kValPpl,
                                                kAttnEntropy,
                                                kAttnEntropyMinHead,
                                                kMaxAttnLogit,
                                                kQRms,
                                                kKRms,
                                                kQRmsPre,
                                                kKRmsPre,
                                                kKurtosis,
                                                kKurtosisChannel,
                                                kParamNorm,
                                                kOutputLogitMax};
  auto digits = [](std::string_view* s) {
    size_t n = 0;
    while (n < s->size() && (*s)[n] >= '0' && (*s)[n] <= '9') ++n;
    s->remove_prefix(n);
    return n > 0;
  };
  for (std::string_view base : kNames) {
    if (name == base) return true;
    if (!name.starts_with(base)) continue;
    std::string_view rest = name.substr(base.size());
    if (!rest.starts_with(".l")) continue;
    rest.remove_prefix(2);
    if (!digits(&rest)) continue;
    if (rest.empty()) return true;
    if (rest.starts_with(".h")) {
      rest.remove_prefix(2);
      if (digits(&rest) && rest.empty()) return true;
    }
  }
  return false;
}

}  // namespace ablate::metric
