#include "common/util/fields.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ablate::util {
namespace {

using ::testing::HasSubstr;

TEST(CheckName, AcceptsPlainNames) {
  EXPECT_TRUE(CheckName("worker name", "gpu-4090.a_1").ok());
  EXPECT_TRUE(CheckName("sweep name", "qk norm / lr").ok());
}

TEST(CheckName, RefusesEmptyLongControlAndNonAscii) {
  EXPECT_THAT(std::string(CheckName("worker name", "").message()), HasSubstr("empty"));
  auto s = CheckName("worker name", std::string(129, 'a'));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("129 bytes is too long"));
  s = CheckName("worker name", "w1\n2026-11-30 [info] forged");
  EXPECT_THAT(std::string(s.message()), HasSubstr("0x0a"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("\\n"));
  EXPECT_FALSE(CheckName("n", std::string("a\0b", 3)).ok());
  EXPECT_FALSE(CheckName("n", "caf\xc3\xa9").ok());
  EXPECT_FALSE(CheckName("n", " padded").ok());
}

TEST(CheckName, ErrorQuotesOnlyAPrefixOfAHugeValue) {
  const std::string huge(1 << 20, 'x');
  auto s = CheckName("sweep name", huge + "\x01");
  EXPECT_LT(s.message().size(), 300u);
}

TEST(CheckText, RefusesNulAndInvalidUtf8) {
  EXPECT_TRUE(CheckText("error", "caf\xc3\xa9 \xf0\x9f\x98\x80").ok());
  EXPECT_THAT(std::string(CheckText("error", std::string("ab\0c", 4)).message()),
              HasSubstr("NUL byte at offset 2"));
  EXPECT_THAT(std::string(CheckText("error", "a\xff").message()), HasSubstr("UTF-8"));
  EXPECT_FALSE(CheckText("error", "\xc0\xaf").ok());      // overlong '/'
  EXPECT_FALSE(CheckText("error", "\xed\xa0\x80").ok());  // surrogate
  EXPECT_FALSE(CheckText("error", std::string(11, 'a'), 10).ok());
}

TEST(LogQuote, EscapesEverythingThatCouldForgeALine) {
  EXPECT_EQ(LogQuote("w1"), "\"w1\"");
  EXPECT_EQ(LogQuote("a\nb\r\"c\\"), "\"a\\nb\\r\\\"c\\\\\"");
  EXPECT_EQ(LogQuote(std::string("\x1b[31m\0", 6)), "\"\\x1b[31m\\x00\"");
  EXPECT_EQ(LogQuote("caf\xc3\xa9\xff"), "\"caf\xc3\xa9\\xff\"");
  EXPECT_EQ(LogQuote("abcdef", 3), "\"abc\"...");
}

}  // namespace
}  // namespace ablate::util
