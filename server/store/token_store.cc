#include "server/store/token_store.h"

#include "absl/strings/str_cat.h"
#include "common/util/fields.h"
#include "common/util/sha256.h"
#include "server/store/rows.h"

namespace ablate::server {

absl::StatusOr<Role> ParseRole(const std::string& name) {
  if (name == "worker") return Role::kWorker;
  if (name == "user") return Role::kUser;
  if (name == "admin") return Role::kAdmin;
  return absl::InvalidArgumentError(
      absl::StrCat("role must be worker, user or admin (got \"", name, "\")"));
}

std::string RoleName(Role role) {
  switch (role) {
    case Role::kWorker:
      return "worker";
    case Role::kUser:
      return "user";
    case Role::kAdmin:
      return "admin";
  }
  return "user";
}

namespace {

// A row of token_create, token_list or token_lookup (the same columns).
TokenInfo InfoFromRow(const pg::ByName& col, const pqxx::row& row) {
  TokenInfo t;
  t.id = col(row, "id").as<int64_t>();
  t.name = col(row, "name").as<std::string>();
  t.role = ParseRole(col(row, "role").as<std::string>()).value_or(Role::kUser);
  t.created_at = col(row, "created_at").as<double>();
  t.revoked = col(row, "revoked").as<bool>();
  return t;
}

}  // namespace

absl::StatusOr<NewToken> TokenStore::Create(Role role, const std::string& name) {
  // The name shows in logs, `token list` and permission errors: a label, not free text.
  if (auto s = util::CheckName("token name", name); !s.ok()) return s;
  auto random = RandomHex(32);
  if (!random.ok())
    return absl::InternalError(absl::StrCat("token create: ", random.status().message()));
  NewToken out;
  // The prefix makes a leaked token recognisable by secret scanners.
  out.secret = absl::StrCat("ablt_", *random);
  const std::string digest = SecretDigest(out.secret);
  auto row = db_->Tx<TokenInfo>("token create", [&](pqxx::work& tx) -> absl::StatusOr<TokenInfo> {
    pqxx::result r = pg::Exec(tx, "token_create", name, RoleName(role), digest);
    return InfoFromRow(pg::ByName(r), r.front());  // INSERT ... RETURNING: one row
  });
  if (!row.ok()) return row.status();
  out.info = *row;
  return out;
}

absl::StatusOr<std::vector<TokenInfo>> TokenStore::List() {
  using Out = std::vector<TokenInfo>;
  return db_->Tx<Out>("token list", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "token_list");
    pg::ByName col(r);
    Out out;
    for (const auto& row : r) out.push_back(InfoFromRow(col, row));
    return out;
  });
}

absl::Status TokenStore::Revoke(int64_t id) {
  return db_
      ->Tx<bool>("token revoke",
                 [&](pqxx::work& tx) -> absl::StatusOr<bool> {
                   pqxx::result r = pg::Exec(tx, "token_revoke", id);
                   if (r.empty()) return absl::NotFoundError(absl::StrCat("no token with id ", id));
                   return true;
                 })
      .status();
}

absl::StatusOr<std::optional<TokenInfo>> TokenStore::Lookup(const std::string& sha256) {
  using Out = std::optional<TokenInfo>;
  return db_->Tx<Out>("authenticate", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "token_lookup", sha256);
    if (r.empty()) return Out();
    return Out(InfoFromRow(pg::ByName(r), r.front()));
  });
}

}  // namespace ablate::server
