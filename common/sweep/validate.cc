#include <optional>

#include "absl/strings/str_cat.h"
#include "common/sweep/config_check.h"
#include "common/sweep/config_fields.h"
#include "common/sweep/sweep.h"

namespace ablate::sweep {
namespace {

using ablate::v1::RunConfig;

std::optional<ConfigProblem> Problem(std::vector<std::string> fields, std::string message) {
  return ConfigProblem{std::move(fields), std::move(message)};
}

std::optional<ConfigProblem> CheckAtLeast(const char* field, int64_t value, int64_t min) {
  if (value >= min) return std::nullopt;
  return Problem({field}, absl::StrCat("must be at least ", min, ", got ", value));
}

// lo <= value (< or <=) hi.
std::optional<ConfigProblem> CheckRange(const char* field, double value, double lo, double hi,
                                        bool hi_inclusive) {
  const bool ok = value >= lo && (hi_inclusive ? value <= hi : value < hi);
  if (ok) return std::nullopt;
  return Problem({field}, absl::StrCat("must be in [", FormatDouble(lo), ", ", FormatDouble(hi),
                                       hi_inclusive ? "]" : ")", ", got ", FormatDouble(value)));
}

std::optional<ConfigProblem> CheckPositive(const char* field, double value) {
  if (value > 0) return std::nullopt;
  return Problem({field}, absl::StrCat("must be positive, got ", FormatDouble(value)));
}

std::optional<ConfigProblem> CheckNonNegative(const char* field, double value) {
  if (value >= 0) return std::nullopt;
  return Problem({field}, absl::StrCat("must not be negative, got ", FormatDouble(value)));
}

}  // namespace

std::optional<ConfigProblem> FindConfigProblem(const RunConfig& c) {
  const auto* descriptor = RunConfig::descriptor();
  const auto* reflection = c.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const auto* field = descriptor->field(i);
    if (!reflection->HasField(c, field)) {
      return Problem({field->name()}, "is not set (ApplyDefaults fills every setting)");
    }
    const auto& allowed = AllowedValues(field->name());
    if (!allowed.empty()) {
      auto canonical = CanonicalValue(field, reflection->GetString(c, field));
      if (!canonical.ok())
        return Problem({field->name()}, std::string(canonical.status().message()));
    }
  }

  std::optional<ConfigProblem> p;
  if ((p = CheckAtLeast("n_layer", c.n_layer(), 1))) return p;
  if ((p = CheckAtLeast("n_head", c.n_head(), 1))) return p;
  if ((p = CheckAtLeast("n_embd", c.n_embd(), 1))) return p;
  if ((p = CheckAtLeast("block_size", c.block_size(), 2))) return p;
  if (c.n_embd() % c.n_head() != 0) {
    return Problem(
        {"n_head", "n_embd"},
        absl::StrCat("n_embd (", c.n_embd(), ") is not divisible by n_head (", c.n_head(), ")"));
  }
  if (c.pos() == "rope" && (c.n_embd() / c.n_head()) % 2 != 0) {
    return Problem({"pos", "n_head", "n_embd"},
                   absl::StrCat("rope needs an even head dimension, but n_embd/n_head = ",
                                c.n_embd() / c.n_head()));
  }
  if ((p = CheckRange("dropout", c.dropout(), 0, 1, false))) return p;
  if ((p = CheckNonNegative("attn_softcap", c.attn_softcap()))) return p;
  if ((p = CheckNonNegative("z_loss", c.z_loss()))) return p;
  if ((p = CheckPositive("qk_norm_eps", c.qk_norm_eps()))) return p;
  if ((p = CheckPositive("norm_eps", c.norm_eps()))) return p;

  if ((p = CheckPositive("lr", c.lr()))) return p;
  if ((p = CheckRange("min_lr_ratio", c.min_lr_ratio(), 0, 1, true))) return p;
  if ((p = CheckNonNegative("min_lr", c.min_lr()))) return p;
  if (c.min_lr() > c.lr()) {
    return Problem({"min_lr", "lr"}, absl::StrCat("min_lr (", FormatDouble(c.min_lr()),
                                                  ") is above lr (", FormatDouble(c.lr()), ")"));
  }
  if ((p = CheckRange("beta1", c.beta1(), 0, 1, false))) return p;
  if ((p = CheckRange("beta2", c.beta2(), 0, 1, false))) return p;
  if ((p = CheckPositive("eps", c.eps()))) return p;
  if ((p = CheckNonNegative("weight_decay", c.weight_decay()))) return p;
  if ((p = CheckAtLeast("steps", c.steps(), 1))) return p;
  if ((p = CheckAtLeast("warmup", c.warmup(), 0))) return p;
  if (c.warmup() > c.steps()) {
    return Problem({"warmup", "steps"}, absl::StrCat("warmup (", c.warmup(),
                                                     ") is longer than steps (", c.steps(), ")"));
  }
  if ((p = CheckNonNegative("grad_clip", c.grad_clip()))) return p;
  if ((p = CheckAtLeast("batch_size", c.batch_size(), 1))) return p;
  if ((p = CheckAtLeast("grad_accum", c.grad_accum(), 1))) return p;
  if ((p = CheckAtLeast("seed", c.seed(), 0))) return p;

  if ((p = CheckAtLeast("eval_every", c.eval_every(), 1))) return p;
  if ((p = CheckAtLeast("eval_batches", c.eval_batches(), 1))) return p;
  if ((p = CheckAtLeast("probe_every", c.probe_every(), 1))) return p;
  if ((p = CheckAtLeast("log_every", c.log_every(), 1))) return p;
  if ((p = CheckAtLeast("checkpoint_every", c.checkpoint_every(), 1))) return p;

  // bfloat16 is autocast on CUDA and CPU; LibTorch has no bf16 autocast for MPS, and running
  // float32 there instead would mislabel the results.
  if (c.dtype() == "bfloat16" && c.device() == "mps") {
    return Problem({"dtype", "device"}, "bfloat16 needs device cuda, cpu or auto, not mps");
  }
  return std::nullopt;
}

absl::Status ValidateConfig(const RunConfig& config) {
  auto problem = FindConfigProblem(config);
  if (!problem) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(problem->fields[0], ": ", problem->message));
}

}  // namespace ablate::sweep
