// login and config init: first-run setup writes the config file, so no later command needs the
// token on its command line (where `ps` shows it to every user of the machine).
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/render.h"
#include "common/cli/edge.h"
#include "common/cli/server_flags.h"

namespace ablate::cli {

int Setup(const ConnectionFlags& flags, bool verify) {
  const char* what = verify ? "login" : "config init";
  // Only what this command is given counts, not the file it is about to replace.
  auto resolved = cli_edge::ResolveServer(flags);
  if (!resolved.ok()) return Fail(resolved.status());
  rpc::ClientConfig cfg = *resolved;
  if (!cfg.tls_ca.empty()) {
    std::error_code ec;
    auto abs = std::filesystem::absolute(cfg.tls_ca, ec);
    if (!ec) cfg.tls_ca = abs.string();  // the file is read from wherever ablate runs later
  }
  if (cfg.token.empty() && verify) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        what,
        ": no token: give --token-file FILE (a file holding what `ablate-server token create "
        "--role user` printed) or set ABLATE_TOKEN_FILE / ABLATE_TOKEN")));
  }
  if (verify) {
    // Checked before anything is written, so a typo in the address or a worker token does not
    // become every later command's error.
    Context ctx;
    ctx.conn = cfg;
    ctx.timeout_seconds = 10;
    auto channel = rpc::MakeChannel(cfg);
    if (!channel.ok()) return Fail(channel.status());
    ctx.stub = v1::SweepService::NewStub(*channel);
    v1::ListSweepsRequest req;
    req.set_limit(1);
    auto resp = ctx.Call("login", &v1::SweepService::Stub::ListSweeps, req);
    if (!resp.ok()) return Fail(resp.status());
  }
  const std::string path = ConfigPath(flags);
  if (absl::Status s = WriteConfig(path, cfg); !s.ok()) return Fail(s);
  std::cout << "wrote " << path << " (mode 0600): server " << cfg.server
            << (cfg.token.empty() ? ", no token" : ", token") << (verify ? " (checked)" : "")
            << "\n"
            << "flags and ABLATE_SERVER / ABLATE_TOKEN / ABLATE_TOKEN_FILE still override it\n";
  return 0;
}

}  // namespace ablate::cli
