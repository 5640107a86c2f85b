#include "client/config.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "yaml-cpp/yaml.h"

namespace ablate::cli {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

std::string DefaultConfigPath() {
  if (!Env("ABLATE_CONFIG").empty()) return Env("ABLATE_CONFIG");
  const std::string xdg = Env("XDG_CONFIG_HOME");
  return (xdg.empty() ? Env("HOME") + "/.config" : xdg) + "/ablate/config.yaml";
}

}  // namespace

absl::StatusOr<rpc::ClientConfig> ResolveConnection(const ConnectionFlags& flags) {
  rpc::ClientConfig file_cfg;
  file_cfg.server.clear();
  const std::string path = flags.config_file.empty() ? DefaultConfigPath() : flags.config_file;
  if (std::filesystem::exists(path)) {
    try {
      YAML::Node root = YAML::LoadFile(path);
      for (const auto& kv : root) {
        const std::string key = kv.first.as<std::string>();
        const std::string value = kv.second.as<std::string>();
        if (key == "server") {
          file_cfg.server = value;
        } else if (key == "token") {
          file_cfg.token = value;
        } else if (key == "tls_ca") {
          file_cfg.tls_ca = value;
        } else if (key == "tls") {
          file_cfg.tls = kv.second.as<bool>();
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ":", kv.first.Mark().line + 1, ": unknown key '", key,
                           "' (expected server, token, tls_ca, tls)"));
        }
      }
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
    }
  } else if (!flags.config_file.empty()) {
    return absl::NotFoundError(absl::StrCat("--config ", path, ": no such file"));
  }
  auto pick = [](const std::string& flag, const std::string& env, const std::string& file,
                 const std::string& fallback) {
    if (!flag.empty()) return flag;
    if (!env.empty()) return env;
    if (!file.empty()) return file;
    return fallback;
  };
  rpc::ClientConfig cfg;
  cfg.server = pick(flags.server, Env("ABLATE_SERVER"), file_cfg.server, "127.0.0.1:7070");
  cfg.token = pick(flags.token, Env("ABLATE_TOKEN"), file_cfg.token, "");
  cfg.tls_ca = pick(flags.tls_ca, Env("ABLATE_TLS_CA"), file_cfg.tls_ca, "");
  cfg.tls = flags.tls || file_cfg.tls;
  return cfg;
}

}  // namespace ablate::cli
