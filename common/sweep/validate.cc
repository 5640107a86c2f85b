#include <algorithm>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/sweep/config_check.h"
#include "common/sweep/config_fields.h"
#include "common/sweep/sweep.h"
#include "common/util/status_macros.h"

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

absl::Status CheckVocab(int64_t vocab) {
  if (vocab >= kMinVocab && vocab <= kMaxVocab) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("must be between ", kMinVocab, " and ", kMaxVocab, ", got ", vocab,
                   " (byte fallback needs 259 ids; token files are uint16)"));
}

absl::Status CheckTokenizerType(const std::string& type) {
  if (type.empty() || type == "bpe") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("'", type, "' is not one of bpe"));
}

absl::Status CheckDataPath(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("missing (a text file or synthetic:N)");
  absl::string_view rest = path;
  if (!absl::ConsumePrefix(&rest, "synthetic:")) return absl::OkStatus();
  int64_t n = 0;
  const bool digits = !rest.empty() && std::all_of(rest.begin(), rest.end(),
                                                   [](char c) { return c >= '0' && c <= '9'; });
  if (digits && absl::SimpleAtoi(rest, &n) && n >= 1 && n <= kMaxSyntheticStories) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("expected synthetic:N with N a whole number from 1 to ", kMaxSyntheticStories,
                   ", got '", path, "'"));
}

namespace {

absl::Status Field(const char* field, absl::Status s) {
  if (s.ok()) return s;
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", s.message()));
}

}  // namespace

absl::Status ValidateData(const ablate::v1::DataSpec& data) {
  RETURN_IF_ERROR(Field("data.train", CheckDataPath(data.train())));
  if (!data.val().empty()) RETURN_IF_ERROR(Field("data.val", CheckDataPath(data.val())));
  RETURN_IF_ERROR(Field("data.tokenizer.type", CheckTokenizerType(data.tokenizer().type())));
  if (data.tokenizer().vocab() != 0) {
    RETURN_IF_ERROR(Field("data.tokenizer.vocab", CheckVocab(data.tokenizer().vocab())));
  }
  return absl::OkStatus();
}

absl::Status ValidateRunSpec(const ablate::v1::RunSpec& spec) {
  RETURN_IF_ERROR(ValidateConfig(spec.config()));
  return ValidateData(spec.data());
}

}  // namespace ablate::sweep
