// common/cli/server_flags.h: the one precedence rule `ablate` and `ablate-worker` resolve their
// server, token and TLS settings by.
#include "common/cli/server_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <string>

namespace ablate::cli_edge {
namespace {

class ServerFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* k : {"ABLATE_SERVER", "ABLATE_TOKEN", "ABLATE_TOKEN_FILE", "ABLATE_TLS_CA"}) {
      unsetenv(k);
    }
  }
  void TearDown() override { SetUp(); }
  static std::string TokenFile(const std::string& name, const std::string& token) {
    const std::string path = ::testing::TempDir() + "/" + name;
    std::ofstream(path) << "  " << token << "\n";
    return path;
  }
};

TEST_F(ServerFlagsTest, FlagThenEnvironmentThenFileThenDefault) {
  ServerFile file{{.server = "file:1", .tls_ca = "file.pem"}, "config.yaml: token_file"};
  EXPECT_EQ(ResolveServer({}, {})->server, "127.0.0.1:7070");
  EXPECT_EQ(ResolveServer({}, file)->server, "file:1");
  setenv("ABLATE_SERVER", "env:2", 1);
  setenv("ABLATE_TLS_CA", "env.pem", 1);
  EXPECT_EQ(ResolveServer({}, file)->server, "env:2");
  EXPECT_EQ(ResolveServer({}, file)->tls_ca, "env.pem");
  ServerFlags flags{.server = "flag:3"};
  EXPECT_EQ(ResolveServer(flags, file)->server, "flag:3");
  EXPECT_EQ(ResolveServer(flags, file)->tls_ca, "env.pem");
}

TEST_F(ServerFlagsTest, ATokenFileOnTheCommandLineBeatsTheEnvironmentsToken) {
  setenv("ABLATE_TOKEN", "from-env", 1);
  ServerFlags flags{.token_file = TokenFile("t1", "from-file")};
  EXPECT_EQ(ResolveServer(flags)->token, "from-file");  // whitespace around it dropped
  flags.token = "from-flag";
  EXPECT_EQ(ResolveServer(flags)->token, "from-flag");
  // The environment's token beats a token file in the environment and the config file's token.
  setenv("ABLATE_TOKEN_FILE", TokenFile("t2", "env-file").c_str(), 1);
  ServerFile file{{.token = "config"}, "config.yaml: token_file"};
  EXPECT_EQ(ResolveServer({}, file)->token, "from-env");
  unsetenv("ABLATE_TOKEN");
  EXPECT_EQ(ResolveServer({}, file)->token, "env-file");
  unsetenv("ABLATE_TOKEN_FILE");
  EXPECT_EQ(ResolveServer({}, file)->token, "config");
}

TEST_F(ServerFlagsTest, AnUnreadableTokenFileNamesWhereItCameFrom) {
  ServerFlags flags{.token_file = "/nonexistent/token"};
  auto r = ResolveServer(flags);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("--token-file"));
  setenv("ABLATE_TOKEN_FILE", "/nonexistent/token", 1);
  r = ResolveServer({});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("ABLATE_TOKEN_FILE"));
  unsetenv("ABLATE_TOKEN_FILE");
  r = ResolveServer({}, {{.token_file = "/nonexistent/token"}, "c.yaml: token_file"});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("c.yaml: token_file"));
}

TEST_F(ServerFlagsTest, BothBinariesGetTheSameFiveFlags) {
  CLI::App app;
  ServerFlags flags;
  AddServerFlags(app, &flags);
  const char* argv[] = {"x", "--server", "h:1", "--token-file", "f", "--tls-ca", "ca", "--tls"};
  app.parse(8, const_cast<char**>(argv));
  EXPECT_EQ(flags.server, "h:1");
  EXPECT_EQ(flags.token_file, "f");
  EXPECT_EQ(flags.tls_ca, "ca");
  EXPECT_TRUE(flags.tls);
  EXPECT_NE(app.get_option("--token"), nullptr);
}

}  // namespace
}  // namespace ablate::cli_edge
