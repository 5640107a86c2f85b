#include "common/util/fields.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ablate::util {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is not valid.
size_t Utf8Length(absl::string_view s, size_t i) {
  const auto b = static_cast<uint8_t>(s[i]);
  size_t n = 0;
  uint32_t cp = 0;
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) {
    n = 2;
    cp = b & 0x1F;
  } else if ((b & 0xF0) == 0xE0) {
    n = 3;
    cp = b & 0x0F;
  } else if ((b & 0xF8) == 0xF0) {
    n = 4;
    cp = b & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<uint8_t>(s[i + k]);
    if ((c & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (c & 0x3F);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are invalid.
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
      (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
    return 0;
  }
  return n;
}

std::string Shown(absl::string_view value) { return LogQuote(value, 64); }

}  // namespace

absl::Status CheckName(absl::string_view field, absl::string_view value, size_t max_bytes) {
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": must not be empty"));
  if (value.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", value.size(), " bytes is too long (at most ", max_bytes, "): ", Shown(value)));
  }
  for (char ch : value) {
    const auto c = static_cast<uint8_t>(ch);
    if (c < 0x20 || c >= 0x7F) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": only printable ASCII is allowed (found byte 0x",
                       absl::StrFormat("%02x", c), "): ", Shown(value)));
    }
  }
  if (value.front() == ' ' || value.back() == ' ') {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must not start or end with a space: ", Shown(value)));
  }
  return absl::OkStatus();
}

absl::Status CheckText(absl::string_view field, absl::string_view value, size_t max_bytes) {
  if (value.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", value.size(), " bytes is too long (at most ", max_bytes, ")"));
  }
  for (size_t i = 0; i < value.size();) {
    if (value[i] == '\0') {
      return absl::InvalidArgumentError(absl::StrCat(field, ": contains a NUL byte at offset ", i));
    }
    const size_t n = Utf8Length(value, i);
    if (n == 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": not valid UTF-8 at offset ", i));
    }
    i += n;
  }
  return absl::OkStatus();
}

namespace {

// `value` onto `out` with control characters (C0, DEL, C1) and bytes that are not valid UTF-8
// escaped; with `quotes`, '"' and '\\' too (inside LogQuote's quotes).
void AppendEscaped(std::string* out, absl::string_view value, bool quotes) {
  for (size_t i = 0; i < value.size();) {
    const auto c = static_cast<uint8_t>(value[i]);
    if (quotes && (c == '"' || c == '\\')) {
      *out += '\\';
      *out += value[i++];
    } else if (c == '\n') {
      *out += "\\n";
      ++i;
    } else if (c == '\r') {
      *out += "\\r";
      ++i;
    } else if (c == '\t') {
      *out += "\\t";
      ++i;
    } else if (c < 0x20 || c == 0x7F) {
      absl::StrAppendFormat(out, "\\x%02x", c);
      ++i;
    } else if (c < 0x80) {
      *out += value[i++];
    } else if (const size_t n = Utf8Length(value, i); n > 0) {
      // C1 controls (U+0080..U+009F, 0xC2 0x80..0x9F): CSI (U+009B) starts an escape sequence on
      // many terminals, as ESC [ does.
      const auto next = static_cast<uint8_t>(value[i + 1]);
      if (n == 2 && c == 0xC2 && next < 0xA0) {
        absl::StrAppendFormat(out, "\\u%04x", next);
      } else {
        out->append(value.data() + i, n);
      }
      i += n;
    } else {
      absl::StrAppendFormat(out, "\\x%02x", c);
      ++i;
    }
  }
}

}  // namespace

std::string LogQuote(absl::string_view value, size_t max_bytes) {
  std::string out = "\"";
  const bool cut = value.size() > max_bytes;
  if (cut) value = value.substr(0, max_bytes);
  AppendEscaped(&out, value, /*quotes=*/true);
  out += '"';
  if (cut) out += "...";
  return out;
}

std::string Printable(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  AppendEscaped(&out, value, /*quotes=*/false);
  return out;
}

absl::Status CheckNumber(absl::string_view field, double value, double lo, double hi) {
  if (!(value >= lo && value <= hi)) {  // NaN fails both
    return absl::InvalidArgumentError(absl::StrCat(field, " must be a finite number from ", lo,
                                                   " to ", hi, " (got ", value, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckInteger(absl::string_view field, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be from ", lo, " to ", hi, " (got ", value, ")"));
  }
  return absl::OkStatus();
}

}  // namespace ablate::util
