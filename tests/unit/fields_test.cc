#include "common/util/fields.h"

#include <cmath>
#include <limits>
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
  // C1 controls too: CSI (U+009B) starts an escape sequence on many terminals.
  EXPECT_EQ(LogQuote("a\xc2\x9b"
                     "31m"),
            "\"a\\u009b31m\"");
}

// What the CLI prints of text a worker or user sent: every control character escaped, nothing
// else changed (quotes and backslashes stay, UTF-8 stays).
TEST(Printable, EscapesControlCharactersOnly) {
  EXPECT_EQ(Printable("gpu \"A100\" caf\xc3\xa9"), "gpu \"A100\" caf\xc3\xa9");
  // An OSC title, a bell, a colour, a newline that would forge a row, a DEL, a C1 CSI.
  EXPECT_EQ(Printable("\x1b]0;pwned\x07\x1b[31mred\nrow\x7f\xc2\x9b"
                      "2J"),
            "\\x1b]0;pwned\\x07\\x1b[31mred\\nrow\\x7f\\u009b2J");
  EXPECT_EQ(Printable("tab\there\rcr"), "tab\\there\\rcr");
  EXPECT_EQ(Printable("bad \xff byte"), "bad \\xff byte");
}

TEST(CheckNumber, FiniteAndWithinTheRangeNamingTheField) {
  EXPECT_TRUE(CheckNumber("tokens_per_second", 12.5, 0, 1e12).ok());
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -1.0, 2e12}) {
    const absl::Status s = CheckNumber("tokens_per_second", bad, 0, 1e12);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("tokens_per_second must be"));
  }
  EXPECT_TRUE(CheckInteger("step", 5, 0, 10).ok());
  EXPECT_THAT(std::string(CheckInteger("step", 11, 0, 10).message()),
              HasSubstr("step must be from 0 to 10 (got 11)"));
}

}  // namespace
}  // namespace ablate::util
