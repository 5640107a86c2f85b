#include "common/sweep/yaml_source.h"

#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/util/fields.h"

namespace ablate::sweep {

int YamlSource::Line(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return mark.line >= 0 ? mark.line + 1 : 1;
}

absl::Status YamlSource::Error(int line, absl::string_view field, absl::string_view message) const {
  if (field.empty())
    return absl::InvalidArgumentError(absl::StrCat(file_name_, ":", line, ": ", message));
  return absl::InvalidArgumentError(
      absl::StrCat(file_name_, ":", line, ": ", field, ": ", message));
}

absl::Status YamlSource::CheckShape(absl::string_view text) const {
  enum class Quote { kNone, kSingle, kDouble };
  Quote quote = Quote::kNone;
  int flow = 0;                  // open [ and { brackets
  std::vector<size_t> indents;   // indentation of the enclosing block lines
  int block_scalar_parent = -1;  // >= 0: inside a | or > scalar under a line at this indent
  int64_t nodes = 0;
  int line = 0;
  for (size_t pos = 0; pos <= text.size();) {
    size_t end = text.find('\n', pos);
    if (end == absl::string_view::npos) end = text.size();
    absl::string_view l = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (auto s = util::CheckText("text", l, l.size()); !s.ok()) return Error(line, "", s.message());
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    size_t i = 0;
    if (quote == Quote::kNone && flow == 0) {
      while (i < l.size() && l[i] == ' ') ++i;
      const bool blank = i == l.size() || l[i] == '#';
      if (block_scalar_parent >= 0) {
        // Text of a literal/folded scalar: brackets and dashes there are characters, not nodes.
        if (blank || static_cast<int>(i) > block_scalar_parent) continue;
        block_scalar_parent = -1;
      }
      if (blank) continue;
      while (!indents.empty() && indents.back() >= i) indents.pop_back();
      indents.push_back(i);
      ++nodes;
    }
    const size_t line_indent = indents.empty() ? 0 : indents.back();
    int dashes = 0;
    char last = 0;       // last non-blank character outside quotes on this line (0: none yet)
    bool plain = false;  // inside a block-context plain scalar: only ": " and " #" end it
    auto too_deep = [&] { return static_cast<int>(indents.size()) + dashes + flow > kMaxDepth; };
    for (; i < l.size(); ++i) {
      const char c = l[i];
      if (quote == Quote::kDouble) {
        if (c == '\\') {
          ++i;
        } else if (c == '"') {
          quote = Quote::kNone;
          last = c;
        }
        continue;
      }
      if (quote == Quote::kSingle) {
        if (c == '\'') {
          if (i + 1 < l.size() && l[i + 1] == '\'') {
            ++i;  // '' is an escaped quote
          } else {
            quote = Quote::kNone;
            last = c;
          }
        }
        continue;
      }
      const char prev = i == 0 ? ' ' : l[i - 1];
      if (c == '#' && (prev == ' ' || prev == '\t')) break;  // comment
      if (c == ' ' || c == '\t') continue;
      const char next = i + 1 < l.size() ? l[i + 1] : ' ';
      if (plain && flow == 0) {
        if (c == ':' && (next == ' ' || next == '\t')) {
          plain = false;
          last = c;
          ++nodes;
        }
        continue;
      }
      // Quotes, brackets and block indicators start a token only after whitespace or a flow
      // indicator, and only where a value or key may begin: "it's [1]" is one plain scalar.
      const bool at_token = (i == 0 || std::strchr(" \t[{,", prev) != nullptr) &&
                            (last == 0 || std::strchr("[{,:-?", last) != nullptr);
      if ((c == '"' || c == '\'') && at_token) {
        quote = c == '"' ? Quote::kDouble : Quote::kSingle;
        ++nodes;
      } else if ((c == '[' || c == '{') && (flow > 0 || at_token)) {
        ++flow;
        ++nodes;
        if (too_deep()) break;
      } else if ((c == ']' || c == '}') && flow > 0) {
        --flow;
      } else if (c == ',' && flow > 0) {
        ++nodes;
      } else if (c == ':' && (next == ' ' || next == '\t' ||
                              (flow > 0 && std::strchr(",]}", next) != nullptr))) {
        ++nodes;
      } else if (c == '-' && flow == 0 && at_token && (next == ' ' || next == '\t')) {
        ++dashes;
        ++nodes;
        if (too_deep()) break;
      } else if ((c == '|' || c == '>') && flow == 0 && at_token) {
        block_scalar_parent = static_cast<int>(line_indent);
        break;
      } else if (flow == 0) {
        plain = true;
      }
      last = c;
    }
    if (too_deep()) {
      return Error(line, "", absl::StrCat("nested more than ", kMaxDepth, " levels deep"));
    }
    if (nodes > kMaxNodes) {
      return Error(line, "",
                   absl::StrCat("more than ", kMaxNodes,
                                " YAML nodes (a sweep file needs a few hundred; generate long "
                                "axes with logspace/linspace)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<YAML::Node> YamlSource::Load(const std::string& text) const {
  if (auto s = CheckShape(text); !s.ok()) return s;
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return Error(e.mark.line >= 0 ? e.mark.line + 1 : 1, "", absl::StrCat("invalid YAML: ", e.msg));
  }
}

absl::Status YamlSource::CatchYaml(const std::function<absl::Status()>& body) const {
  try {
    return body();
  } catch (const YAML::Exception& e) {
    return Error(e.mark.line >= 0 ? e.mark.line + 1 : 1, "", absl::StrCat("invalid YAML: ", e.msg));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(file_name_, ": ", e.what()));
  }
}

absl::StatusOr<std::string> YamlSource::Scalar(const YAML::Node& node, const std::string& field,
                                               size_t max_bytes) const {
  if (!node.IsDefined() || node.IsNull()) return Error(node, field, "missing value");
  if (!node.IsScalar()) return Error(node, field, "expected a single value, not a list or mapping");
  if (auto s = util::CheckText(field, node.Scalar(), max_bytes); !s.ok()) {
    return Error(Line(node), "", s.message());
  }
  return node.Scalar();
}

absl::StatusOr<int64_t> YamlSource::Int(const YAML::Node& node, const std::string& field) const {
  auto text = Scalar(node, field);
  if (!text.ok()) return text.status();
  int64_t value = 0;
  if (!absl::SimpleAtoi(*text, &value)) {
    return Error(node, field, absl::StrCat("expected an integer, got '", *text, "'"));
  }
  return value;
}

absl::StatusOr<double> YamlSource::Double(const YAML::Node& node, const std::string& field) const {
  auto text = Scalar(node, field);
  if (!text.ok()) return text.status();
  double value = 0;
  if (!absl::SimpleAtod(*text, &value) || !std::isfinite(value)) {
    return Error(node, field, absl::StrCat("expected a number, got '", *text, "'"));
  }
  return value;
}

absl::Status YamlSource::Mapping(const YAML::Node& node, const std::string& field) const {
  if (!node.IsMap()) {
    return Error(
        node, field,
        node.IsNull() ? "missing value, expected a mapping of keys" : "expected a mapping of keys");
  }
  // yaml-cpp keeps both copies of a repeated key; a silent "last one wins" would hide typos.
  std::set<std::string> seen;
  for (const auto& entry : node) {
    const auto key = entry.first.Scalar();
    // Keys are echoed in "unknown key" errors and compared against every setting name.
    if (auto s = util::CheckText(field.empty() ? "key" : absl::StrCat(field, " key"), key,
                                 util::kMaxNameBytes);
        !s.ok()) {
      return Error(entry.first, "", s.message());
    }
    if (!seen.insert(key).second) {
      return Error(entry.first, field.empty() ? key : absl::StrCat(field, ".", key),
                   "duplicate key");
    }
  }
  return absl::OkStatus();
}

}  // namespace ablate::sweep
