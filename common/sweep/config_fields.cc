#include "common/sweep/config_fields.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ablate::sweep {
namespace {

using google::protobuf::FieldDescriptor;

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

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

}  // namespace

const FieldDescriptor* FindSetting(const std::string& name) {
  return ablate::v1::RunConfig::descriptor()->FindFieldByName(std::string(name));
}

const std::vector<std::string>& SettingNames() {
  static const auto* names = [] {
    auto* out = new std::vector<std::string>;
    const auto* d = ablate::v1::RunConfig::descriptor();
    for (int i = 0; i < d->field_count(); ++i) out->push_back(d->field(i)->name());
    return out;
  }();
  return *names;
}

const std::vector<std::string>& AllowedValues(const std::string& setting) {
  static const auto* table = new std::map<std::string, std::vector<std::string>, std::less<>>{
      {"qk_norm", {"none", "layernorm", "rmsnorm"}},
      {"pos", {"learned", "rope", "none"}},
      {"init", {"nanogpt", "wortsman"}},
      {"weight_decay_mode", {"coupled", "independent"}},
      {"device", {"auto", "cpu", "cuda", "mps"}},
      {"dtype", {"float32", "bfloat16"}},
  };
  static const std::vector<std::string> kNone;
  auto it = table->find(setting);
  return it == table->end() ? kNone : it->second;
}

std::string DidYouMean(const std::string& word, const std::vector<std::string>& candidates) {
  // A third of the word's length keeps "learning_rate" from suggesting "warmup" while still
  // catching typos and plural/singular slips ("n_layers", "qknorm").
  // A long word is no typo of a short name, and the edit distance costs |word| * |candidate|.
  if (word.size() > 64) return "";
  const size_t budget = std::max<size_t>(2, word.size() / 3);
  const std::string* best = nullptr;
  size_t best_distance = budget + 1;
  for (const auto& c : candidates) {
    const size_t d = EditDistance(word, c);
    if (d < best_distance) {
      best = &c;
      best_distance = d;
    }
  }
  return best == nullptr ? "" : absl::StrCat(" (did you mean '", *best, "'?)");
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
        return absl::InvalidArgumentError(absl::StrCat(
            "'", text, "' is not one of ", absl::StrJoin(allowed, "|"), DidYouMean(text, allowed)));
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
