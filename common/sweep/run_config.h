// RunConfig's one home: every setting's default (or how it is derived from others), its rules,
// its allowed values and a line of documentation, in one table (RunConfigSettings) that
// ApplyDefaults, validation, the sweep parser's value checks and the trainer's schedule all read.
// Adding a setting means its proto field and its row in run_config.cc; unit.run_config fails
// until every RunConfig field has exactly one row.
//
// Every value that enters a RunConfig from a file goes through its canonical text first, so the
// number a run trains with is exactly the number in its grid_values and cell key (a logspace
// value 2.15443469e-4 becomes "0.000215443" in both places, never two slightly different numbers).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"

namespace ablate::sweep {

// The first problem with a complete RunConfig, with every setting involved in it.
//
// ValidateConfig only needs a message, but the sweep parser must point at a line: for
// "n_embd % n_head != 0" the culprit is whichever of the two the file varies, so a problem
// names all involved settings (most specific first) and the parser picks the one it can locate.
struct ConfigProblem {
  std::vector<std::string> fields;  // non-empty; fields[0] is the one the message is about
  std::string message;              // without the field prefix
};

// A setting's bound on its own value. Integer settings take kAtLeast, decimal ones the others.
struct Bound {
  enum class Kind {
    kNone,
    kAtLeast,      // value >= lo
    kPositive,     // value > 0
    kNonNegative,  // value >= 0
    kHalfOpen,     // lo <= value < hi
    kClosed,       // lo <= value <= hi
  };
  Kind kind = Kind::kNone;
  double lo = 0;
  double hi = 0;
};

// Which runs a rule applies to.
enum class ConfigScope {
  kRun,    // every run a worker trains (ValidateConfig, single-run files)
  kSweep,  // also runs a sweep queues, which any worker whose device matches may lease
};

// A rule involving other settings, checked right after its setting's bound.
struct Relation {
  std::string doc = {};  // e.g. "n_embd % n_head == 0"
  std::optional<ConfigProblem> (*check)(const ablate::v1::RunConfig& config) = nullptr;
  ConfigScope scope = ConfigScope::kRun;
};

// One RunConfig setting: everything the code knows about it.
struct Setting {
  std::string name = {};  // the RunConfig field, and the key in sweep and run files
  std::string doc = {};   // one line: what it sets
  // The default as canonical text (SettingText's form), or empty when `derive` makes it.
  std::string default_value = {};
  // A default made from other settings, which already hold theirs (they come earlier in the
  // table), e.g. min_lr = lr x min_lr_ratio: `derived_from` says how, for people.
  std::string derived_from = {};
  void (*derive)(ablate::v1::RunConfig* config) = nullptr;
  std::vector<std::string> allowed = {};  // a string setting's values
  Bound bound = {};
  std::vector<Relation> relations = {};
};

// Every setting, in the order defaults are applied and rules checked (so a derived default
// follows what it derives from, and a relation the settings it reads).
const std::vector<Setting>& RunConfigSettings();

// The setting's row, or nullptr.
const Setting* FindSettingRow(const std::string& name);

// The RunConfig field of that name, or nullptr.
const google::protobuf::FieldDescriptor* FindSetting(const std::string& name);

// Every RunConfig setting name, in declaration order.
const std::vector<std::string>& SettingNames();

// The allowed values of a string setting (qk_norm, pos, ...); empty for other settings.
const std::vector<std::string>& AllowedValues(const std::string& setting);

// "at least 1", "in [0, 1)", ...: a bound for people; empty for kNone.
std::string BoundText(const Bound& bound);

// Fills every unset setting with its default (nanoGPT's train.py where it has one), deriving
// those made from others from the config's own values.
void ApplyDefaults(ablate::v1::RunConfig* config);

// min_lr as a run trains with it: the config's own, else derived exactly as ApplyDefaults
// derives it (lr x min_lr_ratio, each at its default when unset). The schedule reads this.
double EffectiveMinLr(const ablate::v1::RunConfig& config);

// The first problem with a complete config (after ApplyDefaults): unset settings, allowed
// values, then each setting's bound and relations in table order. kSweep adds the rules for
// runs a sweep queues.
std::optional<ConfigProblem> FindConfigProblem(const ablate::v1::RunConfig& config,
                                               ConfigScope scope = ConfigScope::kRun);

// FindConfigProblem as a status, "field: message"; callers add file and line.
absl::Status ValidateConfig(const ablate::v1::RunConfig& config);

// Canonical text of a double: "%.6g" ("0.001", "3e-05"), so cell keys are stable.
std::string FormatDouble(double value);

// Checks `text` (a YAML scalar) against the setting's type and returns its canonical text.
// The error message names only the problem; callers prefix file, line and field.
absl::StatusOr<std::string> CanonicalValue(const google::protobuf::FieldDescriptor* field,
                                           const std::string& text);

// The canonical text of a generated number (logspace/linspace) for a numeric setting; integer
// settings accept only integral values.
absl::StatusOr<std::string> CanonicalNumber(const google::protobuf::FieldDescriptor* field,
                                            double value);

// Sets `field` from text that CanonicalValue accepted.
void SetSetting(ablate::v1::RunConfig* config, const google::protobuf::FieldDescriptor* field,
                const std::string& canonical);

// The canonical text of the setting's current value.
std::string SettingText(const ablate::v1::RunConfig& config,
                        const google::protobuf::FieldDescriptor* field);

}  // namespace ablate::sweep
