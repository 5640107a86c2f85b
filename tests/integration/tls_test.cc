// TLS: with --tls-cert/--tls-key the server speaks only TLS; a client that trusts the
// certificate gets through, a plaintext client does not.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TlsTest : public ServerFixture {
 protected:
  void Configure(server::ServerOptions* o) override {
    const std::string dir = tmp_;
    const std::string cmd = absl::StrCat(
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
        "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout ",
        dir, "/key.pem -out ", dir, "/cert.pem 2>/dev/null");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl is needed to make a test certificate";
    o->tls_cert = dir + "/cert.pem";
    o->tls_key = dir + "/key.pem";
  }
};

TEST_F(TlsTest, OnlyTlsClientsThatTrustTheCertificateGetThrough) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = Slurp(tmp_ + "/cert.pem");
  auto secure = grpc::CreateChannel(absl::StrCat("localhost:", servers_[0]->port()),
                                    grpc::SslCredentials(ssl));
  v1::ListSweepsRequest req;
  v1::ListSweepsResponse resp;
  auto ok = v1::SweepService::NewStub(secure)->ListSweeps(Ctx(admin_, 10).get(), req, &resp);
  EXPECT_TRUE(ok.ok()) << ok.error_message();

  auto plain = grpc::CreateChannel(absl::StrCat("127.0.0.1:", servers_[0]->port()),
                                   grpc::InsecureChannelCredentials());
  auto refused = v1::SweepService::NewStub(plain)->ListSweeps(Ctx(admin_, 5).get(), req, &resp);
  EXPECT_FALSE(refused.ok());

  grpc::SslCredentialsOptions untrusting;  // system roots: our self-signed cert is unknown
  auto wrong = grpc::CreateChannel(absl::StrCat("localhost:", servers_[0]->port()),
                                   grpc::SslCredentials(untrusting));
  auto rejected = v1::SweepService::NewStub(wrong)->ListSweeps(Ctx(admin_, 5).get(), req, &resp);
  EXPECT_FALSE(rejected.ok());
}

}  // namespace
}  // namespace ablate::testing
