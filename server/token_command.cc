#include "server/token_command.h"

#include <cstdio>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/util/fields.h"
#include "server/store/db.h"
#include "server/store/migrator.h"
#include "server/store/token_store.h"

namespace ablate::server {
namespace {

absl::Status NeedUrl(const std::string& url) {
  if (url.empty()) {
    return absl::InvalidArgumentError("--database-url (or ABLATE_DATABASE_URL) is required");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TokenCreate(const std::string& url, const std::string& role_name,
                         const std::string& name) {
  if (auto s = NeedUrl(url); !s.ok()) return s;
  auto role = ParseRole(role_name);
  if (!role.ok()) return role.status();
  Db db(url, 1);
  TokenStore tokens(&db);
  auto token = tokens.Create(*role, name.empty() ? role_name : name);
  if (!token.ok()) return token.status();
  // The secret goes to stdout alone (scriptable: TOKEN=$(ablate-server token create ...));
  // the note goes to stderr.
  std::printf("%s\n", token->secret.c_str());
  std::fprintf(stderr, "token %lld (%s, role %s) created; it is shown only this once\n",
               static_cast<long long>(token->info.id), token->info.name.c_str(), role_name.c_str());
  // Where it goes: a file only its owner can read, named by --token-file, never a command line
  // (where `ps` shows it to every user of the machine).
  const char* file = *role == Role::kWorker ? "worker.token" : "ablate.token";
  std::fprintf(stderr,
               "keep it in a file only you can read, e.g.\n"
               "  (umask 077; ablate-server token create --role %s --name NAME > %s)\n"
               "then %s\n",
               role_name.c_str(), file,
               *role == Role::kWorker
                   ? "ablate-worker --server HOST:7070 --token-file worker.token "
                     "(or ABLATE_TOKEN_FILE=worker.token)"
                   : "ablate login --server HOST:7070 --token-file ablate.token "
                     "(writes ~/.config/ablate/config.yaml, mode 0600)");
  return absl::OkStatus();
}

absl::Status TokenList(const std::string& url) {
  if (auto s = NeedUrl(url); !s.ok()) return s;
  Db db(url, 1);
  TokenStore tokens(&db);
  auto list = tokens.List();
  if (!list.ok()) return list.status();
  std::printf("%-6s %-8s %-8s %-20s %s\n", "ID", "ROLE", "STATE", "CREATED", "NAME");
  for (const auto& t : *list) {
    std::printf(
        "%-6lld %-8s %-8s %-20s %s\n", static_cast<long long>(t.id), RoleName(t.role).c_str(),
        t.revoked ? "revoked" : "active",
        absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixSeconds(t.created_at),
                         absl::UTCTimeZone())
            .c_str(),
        // Tokens named before names were checked may hold control characters.
        util::CheckName("name", t.name).ok() ? t.name.c_str() : util::LogQuote(t.name).c_str());
  }
  return absl::OkStatus();
}

absl::Status TokenRevoke(const std::string& url, int64_t id) {
  if (auto s = NeedUrl(url); !s.ok()) return s;
  Db db(url, 1);
  TokenStore tokens(&db);
  if (auto s = tokens.Revoke(id); !s.ok()) return s;
  std::fprintf(stderr, "token %lld revoked (servers stop accepting it within 5 s)\n",
               static_cast<long long>(id));
  return absl::OkStatus();
}

absl::Status RunMigrations(const std::string& url) {
  if (auto s = NeedUrl(url); !s.ok()) return s;
  Db db(url, 1);
  auto applied = Migrate(&db, BuiltinMigrations());
  if (!applied.ok()) return applied.status();
  if (applied->empty()) std::fprintf(stderr, "schema up to date\n");
  for (const auto& v : *applied) std::fprintf(stderr, "applied %s\n", v.c_str());
  return absl::OkStatus();
}

}  // namespace ablate::server
