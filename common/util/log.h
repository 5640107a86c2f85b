// Logging: spdlog, plus a formatter so absl::string_view (Debian's Abseil does not alias it to
// std::string_view) and absl::Status can be passed to log calls directly.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<std::string_view> {
  template <typename Ctx>
  auto format(absl::string_view s, Ctx& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(s.data(), s.size()), ctx);
  }
};

template <>
struct fmt::formatter<absl::Status> : fmt::formatter<std::string_view> {
  template <typename Ctx>
  auto format(const absl::Status& s, Ctx& ctx) const {
    const std::string text = s.ToString();
    return fmt::formatter<std::string_view>::format(std::string_view(text), ctx);
  }
};
