#include "client/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/cli/server_flags.h"
#include "yaml-cpp/yaml.h"

namespace ablate::cli {
namespace {

absl::StatusOr<cli_edge::ServerFlags> ReadConfig(const std::string& path, bool must_exist) {
  cli_edge::ServerFlags out;
  if (!std::filesystem::exists(path)) {
    if (must_exist) return absl::NotFoundError(absl::StrCat("--config ", path, ": no such file"));
    return out;
  }
  try {
    YAML::Node root = YAML::LoadFile(path);
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      if (key == "tls") {
        out.tls = kv.second.as<bool>();
        continue;
      }
      const std::string value = kv.second.as<std::string>();
      if (key == "server") {
        out.server = value;
      } else if (key == "token") {
        out.token = value;
      } else if (key == "token_file") {
        out.token_file = value;
      } else if (key == "tls_ca") {
        out.tls_ca = value;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", kv.first.Mark().line + 1, ": unknown key '", key,
                         "' (expected server, token, token_file, tls_ca, tls)"));
      }
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
  return out;
}

}  // namespace

std::string ConfigPath(const ConnectionFlags& flags) {
  if (!flags.config_file.empty()) return flags.config_file;
  if (!cli_edge::Env("ABLATE_CONFIG").empty()) return cli_edge::Env("ABLATE_CONFIG");
  const std::string xdg = cli_edge::Env("XDG_CONFIG_HOME");
  return (xdg.empty() ? cli_edge::Env("HOME") + "/.config" : xdg) + "/ablate/config.yaml";
}

bool ServerUnconfigured(const ConnectionFlags& flags) {
  if (!flags.server.empty() || !cli_edge::Env("ABLATE_SERVER").empty()) return false;
  auto file = ReadConfig(ConfigPath(flags), /*must_exist=*/false);
  return file.ok() && file->server.empty();
}

absl::StatusOr<rpc::ClientConfig> ResolveConnection(const ConnectionFlags& flags) {
  const std::string path = ConfigPath(flags);
  auto file = ReadConfig(path, !flags.config_file.empty());
  if (!file.ok()) return file.status();
  // A token_file in the config file is relative to the config file, not to where ablate runs.
  cli_edge::ServerFile from_file{*file, absl::StrCat(path, ": token_file")};
  std::string& token_file = from_file.settings.token_file;
  if (!token_file.empty() && std::filesystem::path(token_file).is_relative()) {
    token_file = (std::filesystem::path(path).parent_path() / token_file).string();
  }
  return cli_edge::ResolveServer(flags, from_file);
}

absl::Status WriteConfig(const std::string& path, const rpc::ClientConfig& cfg) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path() && !fs::exists(target.parent_path())) {
    fs::create_directories(target.parent_path(), ec);
    if (ec)
      return absl::InternalError(absl::StrCat(target.parent_path().string(), ": ", ec.message()));
    fs::permissions(target.parent_path(), fs::perms::owner_all, ec);
  }
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "server" << YAML::Value << cfg.server;
  if (!cfg.token.empty()) out << YAML::Key << "token" << YAML::Value << cfg.token;
  if (!cfg.tls_ca.empty()) out << YAML::Key << "tls_ca" << YAML::Value << cfg.tls_ca;
  if (cfg.tls) out << YAML::Key << "tls" << YAML::Value << true;
  out << YAML::EndMap;
  const std::string text = absl::StrCat(
      "# Written by `ablate login` / `ablate config init`. It holds a token: keep it mode 0600.\n",
      out.c_str(), "\n");
  // Created 0600 from the start (never briefly readable by others), then renamed over the old
  // file so a reader sees the old or the new file, never half of one.
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat(tmp, ": ", std::strerror(errno)));
  bool ok = ::fchmod(fd, 0600) == 0;
  size_t done = 0;
  while (ok && done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  ok = ::fsync(fd) == 0 && ok;
  const int saved = errno;
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(ok ? errno : saved);
    ::unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat(path, ": cannot write: ", why));
  }
  return absl::OkStatus();
}

}  // namespace ablate::cli
