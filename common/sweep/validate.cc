// A run's data rules (docs/sweep-file.md#data) and the worker's whole-spec check; RunConfig's
// rules live in run_config.cc.
#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/sweep/run_config.h"
#include "common/sweep/sweep.h"
#include "common/util/status_macros.h"

namespace ablate::sweep {

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
