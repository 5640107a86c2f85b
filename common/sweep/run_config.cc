// The RunConfig table and what reads it.
//
// Defaults: nanoGPT train.py's optimizer settings on a small, CPU-friendly model. The model is
// deliberately smaller than nanoGPT's GPT-2 default (4 layers, 256 wide, context 256) so an
// unconfigured run finishes on a laptop CPU; the optimizer keeps train.py's values (AdamW 6e-4,
// betas 0.9/0.95, weight decay 0.1, clip 1.0) because they are what the LR study perturbs.
#include "common/sweep/run_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/util/did_you_mean.h"

namespace ablate::sweep {
namespace {

using ablate::v1::RunConfig;
using google::protobuf::FieldDescriptor;
using Kind = Bound::Kind;

constexpr Bound AtLeast(double lo) { return {Kind::kAtLeast, lo, 0}; }
constexpr Bound Positive() { return {Kind::kPositive, 0, 0}; }
constexpr Bound NonNegative() { return {Kind::kNonNegative, 0, 0}; }
constexpr Bound HalfOpen(double lo, double hi) { return {Kind::kHalfOpen, lo, hi}; }
constexpr Bound Closed(double lo, double hi) { return {Kind::kClosed, lo, hi}; }

std::optional<ConfigProblem> Problem(std::vector<std::string> fields, std::string message) {
  return ConfigProblem{std::move(fields), std::move(message)};
}

std::optional<ConfigProblem> HeadsDivideWidth(const RunConfig& c) {
  if (c.n_embd() % c.n_head() == 0) return std::nullopt;
  return Problem(
      {"n_head", "n_embd"},
      absl::StrCat("n_embd (", c.n_embd(), ") is not divisible by n_head (", c.n_head(), ")"));
}

std::optional<ConfigProblem> RopeHeadDimEven(const RunConfig& c) {
  if (c.pos() != "rope" || (c.n_embd() / c.n_head()) % 2 == 0) return std::nullopt;
  return Problem({"pos", "n_head", "n_embd"},
                 absl::StrCat("rope needs an even head dimension, but n_embd/n_head = ",
                              c.n_embd() / c.n_head()));
}

std::optional<ConfigProblem> MinLrNotAboveLr(const RunConfig& c) {
  if (c.min_lr() <= c.lr()) return std::nullopt;
  return Problem({"min_lr", "lr"}, absl::StrCat("min_lr (", FormatDouble(c.min_lr()),
                                                ") is above lr (", FormatDouble(c.lr()), ")"));
}

std::optional<ConfigProblem> WarmupWithinSteps(const RunConfig& c) {
  if (c.warmup() <= c.steps()) return std::nullopt;
  return Problem({"warmup", "steps"},
                 absl::StrCat("warmup (", c.warmup(), ") is longer than steps (", c.steps(), ")"));
}

// bfloat16 is autocast on CUDA and CPU; LibTorch has no bf16 autocast for MPS, and running
// float32 there instead would mislabel the results.
std::optional<ConfigProblem> Bfloat16NotOnMps(const RunConfig& c) {
  if (c.dtype() != "bfloat16" || c.device() != "mps") return std::nullopt;
  return Problem({"dtype", "device"}, "bfloat16 needs device cuda, cpu or auto, not mps");
}

// A sweep's runs go to whichever worker leases them. The lease matches `device` only, and an
// MPS worker cannot run bfloat16: it would take such a run and fail it for good.
std::optional<ConfigProblem> Bfloat16SweepPinsDevice(const RunConfig& c) {
  if (c.dtype() != "bfloat16" || c.device() != "auto") return std::nullopt;
  return Problem({"dtype", "device"},
                 "bfloat16 in a sweep needs device: cuda or cpu (with device auto an MPS worker, "
                 "which cannot run bfloat16, could lease the run)");
}

// min_lr follows each run's own lr, so an LR grid keeps the same schedule shape at every lr.
void DeriveMinLr(RunConfig* c) { c->set_min_lr(c->lr() * c->min_lr_ratio()); }

absl::StatusOr<int64_t> ParseInteger(const std::string& text) {
  int64_t value = 0;
  if (absl::SimpleAtoi(text, &value)) return value;
  // Accept integral floats ("5e3", "1000.0") — people write step counts that way.
  double d = 0;
  if (absl::SimpleAtod(text, &d) && std::isfinite(d) && d == std::floor(d) &&
      std::fabs(d) < 9.0e15) {
    return static_cast<int64_t>(d);
  }
  return absl::InvalidArgumentError(absl::StrCat("expected an integer, got '", text, "'"));
}

absl::StatusOr<std::string> CanonicalInteger(const FieldDescriptor* field, int64_t value) {
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_INT32 &&
      (value < std::numeric_limits<int32_t>::min() ||
       value > std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(value, " does not fit a 32-bit integer"));
  }
  return absl::StrCat(value);
}

std::vector<Setting>* BuildTable() {
  auto* table = new std::vector<Setting>{
      // Model (nanoGPT GPTConfig + the study's switches). block_size before n_embd: the sizes'
      // own bounds are all checked before n_embd's relation to n_head.
      {.name = "n_layer", .doc = "transformer blocks", .default_value = "4", .bound = AtLeast(1)},
      {.name = "n_head",
       .doc = "attention heads per block",
       .default_value = "4",
       .bound = AtLeast(1)},
      {.name = "block_size",
       .doc = "context length in tokens",
       .default_value = "256",
       .bound = AtLeast(2)},
      {.name = "n_embd",
       .doc = "residual stream width",
       .default_value = "256",
       .bound = AtLeast(1),
       .relations = {{"n_embd % n_head == 0", HeadsDivideWidth}}},
      {.name = "pos",
       .doc = "position encoding",
       .default_value = "learned",
       .allowed = {"learned", "rope", "none"},
       .relations = {{"rope needs an even head dimension", RopeHeadDimEven}}},
      {.name = "dropout",
       .doc = "dropout probability",
       .default_value = "0",
       .bound = HalfOpen(0, 1)},
      {.name = "bias", .doc = "biases in linear layers and LayerNorms", .default_value = "false"},
      {.name = "tie_embeddings",
       .doc = "output head shares the token embedding",
       .default_value = "true"},
      {.name = "qk_norm",
       .doc = "normalisation of queries and keys per head",
       .default_value = "none",
       .allowed = {"none", "layernorm", "rmsnorm"}},
      {.name = "attn_softcap",
       .doc = "0 = off, else c*tanh(z/c) on attention logits",
       .default_value = "0",
       .bound = NonNegative()},
      {.name = "z_loss",
       .doc = "0 = off, else coef * logsumexp(logits)^2",
       .default_value = "0",
       .bound = NonNegative()},
      {.name = "init",
       .doc = "weight initialisation",
       .default_value = "nanogpt",
       .allowed = {"nanogpt", "wortsman"}},
      {.name = "qk_norm_eps",
       .doc = "epsilon of the QK norm",
       .default_value = "1e-06",
       .bound = Positive()},
      {.name = "norm_eps",
       .doc = "epsilon of the blocks' LayerNorms",
       .default_value = "1e-05",
       .bound = Positive()},

      // Optimizer and schedule (AdamW, linear warmup, cosine to min_lr).
      {.name = "lr", .doc = "peak learning rate", .default_value = "0.0006", .bound = Positive()},
      {.name = "min_lr_ratio",
       .doc = "min_lr as a fraction of lr, when min_lr is unset",
       .default_value = "0.1",
       .bound = Closed(0, 1)},
      {.name = "min_lr",
       .doc = "learning rate the cosine decays to, absolute",
       .derived_from = "lr x min_lr_ratio",
       .derive = DeriveMinLr,
       .bound = NonNegative(),
       .relations = {{"min_lr <= lr", MinLrNotAboveLr}}},
      {.name = "beta1", .doc = "AdamW beta1", .default_value = "0.9", .bound = HalfOpen(0, 1)},
      {.name = "beta2", .doc = "AdamW beta2", .default_value = "0.95", .bound = HalfOpen(0, 1)},
      {.name = "eps", .doc = "AdamW epsilon", .default_value = "1e-08", .bound = Positive()},
      {.name = "weight_decay",
       .doc = "AdamW weight decay, on rank >= 2 tensors only",
       .default_value = "0.1",
       .bound = NonNegative()},
      {.name = "weight_decay_mode",
       .doc = "decay scaled by lr (coupled) or not (independent)",
       .default_value = "coupled",
       .allowed = {"coupled", "independent"}},
      {.name = "steps", .doc = "optimizer steps", .default_value = "1000", .bound = AtLeast(1)},
      {.name = "warmup",
       .doc = "linear warmup steps",
       .default_value = "100",
       .bound = AtLeast(0),
       .relations = {{"warmup <= steps", WarmupWithinSteps}}},
      {.name = "grad_clip",
       .doc = "global gradient norm clip, 0 = off",
       .default_value = "1",
       .bound = NonNegative()},
      {.name = "batch_size",
       .doc = "sequences per micro-batch",
       .default_value = "16",
       .bound = AtLeast(1)},
      {.name = "grad_accum",
       .doc = "micro-batches per optimizer step",
       .default_value = "1",
       .bound = AtLeast(1)},
      {.name = "seed",
       .doc = "seed of init, data order and dropout",
       .default_value = "0",
       .bound = AtLeast(0)},

      // Measurement.
      {.name = "eval_every",
       .doc = "steps between validation passes",
       .default_value = "100",
       .bound = AtLeast(1)},
      {.name = "eval_batches",
       .doc = "batches per validation pass",
       .default_value = "8",
       .bound = AtLeast(1)},
      {.name = "probe_every",
       .doc = "steps between probe passes",
       .default_value = "50",
       .bound = AtLeast(1)},
      {.name = "log_every",
       .doc = "steps between grad_norm and lr points",
       .default_value = "10",
       .bound = AtLeast(1)},
      {.name = "checkpoint_every",
       .doc = "steps between resume checkpoints",
       .default_value = "250",
       .bound = AtLeast(1)},

      // Placement.
      {.name = "device",
       .doc = "which workers may lease the run",
       .default_value = "auto",
       .allowed = {"auto", "cpu", "cuda", "mps"}},
      {.name = "dtype",
       .doc = "float32, or bfloat16 autocast",
       .default_value = "float32",
       .allowed = {"float32", "bfloat16"},
       .relations = {{"bfloat16 needs device cuda, cpu or auto", Bfloat16NotOnMps},
                     {"bfloat16 in a sweep needs device cuda or cpu", Bfloat16SweepPinsDevice,
                      ConfigScope::kSweep}}},
  };
  return table;
}

// The fields' descriptors in table order (nullptr for a row naming no field, which
// unit.run_config refuses), so the hot paths (ApplyDefaults and FindConfigProblem run once per
// expanded run) look nothing up by name.
const std::vector<const FieldDescriptor*>& TableFields() {
  static const auto* fields = [] {
    auto* out = new std::vector<const FieldDescriptor*>;
    for (const Setting& s : RunConfigSettings()) out->push_back(FindSetting(s.name));
    return out;
  }();
  return *fields;
}

// Every constant default, set once through the same text path as a file's values.
const RunConfig& ConstantDefaults() {
  static const auto* defaults = [] {
    auto* out = new RunConfig;
    const auto& fields = TableFields();
    for (size_t i = 0; i < fields.size(); ++i) {
      const Setting& s = RunConfigSettings()[i];
      if (fields[i] != nullptr && !s.default_value.empty()) {
        SetSetting(out, fields[i], s.default_value);
      }
    }
    return out;
  }();
  return *defaults;
}

void CopyField(const RunConfig& from, const FieldDescriptor* field, RunConfig* to) {
  const auto* in = from.GetReflection();
  const auto* out = to->GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      out->SetInt32(to, field, in->GetInt32(from, field));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      out->SetInt64(to, field, in->GetInt64(from, field));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      out->SetDouble(to, field, in->GetDouble(from, field));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      out->SetBool(to, field, in->GetBool(from, field));
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      out->SetString(to, field, in->GetString(from, field));
      break;
    default:
      break;
  }
}

// "[0, 1)", "[0, 1]".
std::string Interval(const Bound& bound) {
  return absl::StrCat("[", FormatDouble(bound.lo), ", ", FormatDouble(bound.hi),
                      bound.kind == Kind::kClosed ? "]" : ")");
}

int64_t IntegerValue(const RunConfig& c, const FieldDescriptor* field) {
  const auto* reflection = c.GetReflection();
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_INT32) return reflection->GetInt32(c, field);
  return reflection->GetInt64(c, field);
}

std::optional<ConfigProblem> CheckBound(const RunConfig& c, const FieldDescriptor* field,
                                        const Bound& bound) {
  const std::string& name = field->name();
  if (bound.kind == Kind::kNone) return std::nullopt;
  if (bound.kind == Kind::kAtLeast) {
    const int64_t value = IntegerValue(c, field);
    const auto min = static_cast<int64_t>(bound.lo);
    if (value >= min) return std::nullopt;
    return Problem({name}, absl::StrCat("must be at least ", min, ", got ", value));
  }
  const double value = c.GetReflection()->GetDouble(c, field);
  switch (bound.kind) {
    case Kind::kPositive:
      if (value > 0) return std::nullopt;
      return Problem({name}, absl::StrCat("must be positive, got ", FormatDouble(value)));
    case Kind::kNonNegative:
      if (value >= 0) return std::nullopt;
      return Problem({name}, absl::StrCat("must not be negative, got ", FormatDouble(value)));
    default: {
      const bool closed = bound.kind == Kind::kClosed;
      if (value >= bound.lo && (closed ? value <= bound.hi : value < bound.hi)) {
        return std::nullopt;
      }
      return Problem({name},
                     absl::StrCat("must be in ", Interval(bound), ", got ", FormatDouble(value)));
    }
  }
}

}  // namespace

const std::vector<Setting>& RunConfigSettings() {
  static const std::vector<Setting>* table = BuildTable();
  return *table;
}

const Setting* FindSettingRow(const std::string& name) {
  static const auto* index = [] {
    auto* out = new std::map<std::string, const Setting*, std::less<>>;
    for (const Setting& s : RunConfigSettings()) out->emplace(s.name, &s);
    return out;
  }();
  auto it = index->find(name);
  return it == index->end() ? nullptr : it->second;
}

const FieldDescriptor* FindSetting(const std::string& name) {
  return RunConfig::descriptor()->FindFieldByName(name);
}

const std::vector<std::string>& SettingNames() {
  static const auto* names = [] {
    auto* out = new std::vector<std::string>;
    const auto* d = RunConfig::descriptor();
    for (int i = 0; i < d->field_count(); ++i) out->push_back(d->field(i)->name());
    return out;
  }();
  return *names;
}

const std::vector<std::string>& AllowedValues(const std::string& setting) {
  static const std::vector<std::string> kNone;
  const Setting* row = FindSettingRow(setting);
  return row == nullptr ? kNone : row->allowed;
}

std::string BoundText(const Bound& bound) {
  switch (bound.kind) {
    case Kind::kNone:
      return "";
    case Kind::kAtLeast:
      return absl::StrCat("at least ", static_cast<int64_t>(bound.lo));
    case Kind::kPositive:
      return "positive";
    case Kind::kNonNegative:
      return "not negative";
    case Kind::kHalfOpen:
    case Kind::kClosed:
      return absl::StrCat("in ", Interval(bound));
  }
  return "";
}

void ApplyDefaults(RunConfig* config) {
  const auto* reflection = config->GetReflection();
  const auto& fields = TableFields();
  for (size_t i = 0; i < fields.size(); ++i) {
    const FieldDescriptor* field = fields[i];
    if (field == nullptr || reflection->HasField(*config, field)) continue;
    const Setting& s = RunConfigSettings()[i];
    if (s.derive != nullptr) {
      s.derive(config);
    } else {
      CopyField(ConstantDefaults(), field, config);
    }
  }
}

double EffectiveMinLr(const RunConfig& config) {
  if (config.has_min_lr()) return config.min_lr();
  RunConfig complete = config;
  ApplyDefaults(&complete);
  return complete.min_lr();
}

std::optional<ConfigProblem> FindConfigProblem(const RunConfig& c, ConfigScope scope) {
  const auto* descriptor = RunConfig::descriptor();
  const auto* reflection = c.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const auto* field = descriptor->field(i);
    if (!reflection->HasField(c, field)) {
      return Problem({field->name()}, "is not set (ApplyDefaults fills every setting)");
    }
    if (!AllowedValues(field->name()).empty()) {
      auto canonical = CanonicalValue(field, reflection->GetString(c, field));
      if (!canonical.ok()) {
        return Problem({field->name()}, std::string(canonical.status().message()));
      }
    }
  }
  const auto& fields = TableFields();
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i] == nullptr) continue;
    const Setting& s = RunConfigSettings()[i];
    if (auto p = CheckBound(c, fields[i], s.bound)) return p;
    for (const Relation& relation : s.relations) {
      if (relation.scope == ConfigScope::kSweep && scope != ConfigScope::kSweep) continue;
      if (auto p = relation.check(c)) return p;
    }
  }
  return std::nullopt;
}

absl::Status ValidateConfig(const RunConfig& config) {
  auto problem = FindConfigProblem(config);
  if (!problem) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(problem->fields[0], ": ", problem->message));
}

std::string FormatDouble(double value) { return absl::StrFormat("%.6g", value); }

absl::StatusOr<std::string> CanonicalValue(const FieldDescriptor* field, const std::string& text) {
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64: {
      auto value = ParseInteger(text);
      if (!value.ok()) return value.status();
      return CanonicalInteger(field, *value);
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double value = 0;
      if (!absl::SimpleAtod(text, &value)) {
        return absl::InvalidArgumentError(absl::StrCat("expected a number, got '", text, "'"));
      }
      if (!std::isfinite(value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("expected a finite number, got '", text, "'"));
      }
      return FormatDouble(value);
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      const std::string lower = absl::AsciiStrToLower(text);
      if (lower == "true" || lower == "yes" || lower == "on") return std::string("true");
      if (lower == "false" || lower == "no" || lower == "off") return std::string("false");
      return absl::InvalidArgumentError(absl::StrCat("expected true or false, got '", text, "'"));
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      const auto& allowed = AllowedValues(field->name());
      if (std::find(allowed.begin(), allowed.end(), text) == allowed.end()) {
        return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not one of ",
                                                       absl::StrJoin(allowed, "|"),
                                                       util::DidYouMean(text, allowed)));
      }
      return std::string(text);
    }
    default:
      return absl::InternalError(
          absl::StrCat("setting ", field->name(), " has an unsupported type"));
  }
}

absl::StatusOr<std::string> CanonicalNumber(const FieldDescriptor* field, double value) {
  // logspace {min: 1e-300, max: 1e300} computes max/min = inf, and linspace over +-1e308 overflows
  // max - min: a run must never be queued with lr = inf or nan.
  if (!std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat("generates ", FormatDouble(value),
                                                   "; values must be finite (narrow min/max)"));
  }
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64: {
      const double rounded = std::round(value);
      // Outside +-2^53 the cast below would be undefined (and the value no integer anyone means).
      if (std::fabs(rounded) > 9.0e15) {
        return absl::InvalidArgumentError(
            absl::StrCat("generates ", FormatDouble(value), ", too large for ", field->name()));
      }
      if (std::fabs(value - rounded) > 1e-9 * std::max(1.0, std::fabs(value))) {
        return absl::InvalidArgumentError(absl::StrCat("generates ", FormatDouble(value), ", but ",
                                                       field->name(), " takes integers"));
      }
      return CanonicalInteger(field, static_cast<int64_t>(rounded));
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return FormatDouble(value);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("logspace/linspace need a numeric setting; ", field->name(), " is not"));
  }
}

void SetSetting(ablate::v1::RunConfig* config, const FieldDescriptor* field,
                const std::string& canonical) {
  const auto* reflection = config->GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t v = 0;
      (void)absl::SimpleAtoi(canonical, &v);
      reflection->SetInt32(config, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t v = 0;
      (void)absl::SimpleAtoi(canonical, &v);
      reflection->SetInt64(config, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double v = 0;
      (void)absl::SimpleAtod(canonical, &v);
      reflection->SetDouble(config, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_BOOL:
      reflection->SetBool(config, field, canonical == "true");
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      reflection->SetString(config, field, canonical);
      break;
    default:
      break;
  }
}

std::string SettingText(const ablate::v1::RunConfig& config, const FieldDescriptor* field) {
  const auto* reflection = config.GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(reflection->GetInt32(config, field));
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(reflection->GetInt64(config, field));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return FormatDouble(reflection->GetDouble(config, field));
    case FieldDescriptor::CPPTYPE_BOOL:
      return reflection->GetBool(config, field) ? "true" : "false";
    case FieldDescriptor::CPPTYPE_STRING:
      return reflection->GetString(config, field);
    default:
      return "";
  }
}

}  // namespace ablate::sweep
