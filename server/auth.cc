#include "server/auth.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/util/sha256.h"

namespace ablate::server {
namespace {

constexpr auto kCacheFor = std::chrono::seconds(5);

bool Allowed(Role role, Surface surface) {
  if (role == Role::kAdmin) return true;
  return (role == Role::kWorker) == (surface == Surface::kWorker);
}

}  // namespace

absl::StatusOr<Caller> Authenticator::Check(const grpc::ServerContextBase& context, Surface surface,
                                            const char* method) {
  if (!enabled_) return Caller{"anonymous", Role::kAdmin, 0};
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return absl::UnauthenticatedError(
        "missing credentials: send metadata 'authorization: Bearer <token>' "
        "(create a token with `ablate-server token create --role ...`)");
  }
  absl::string_view header(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&header, "Bearer ") && !absl::ConsumePrefix(&header, "bearer ")) {
    return absl::UnauthenticatedError("malformed authorization header: expected 'Bearer <token>'");
  }
  const std::string digest = SecretDigest(std::string_view(header.data(), header.size()));
  const auto now = std::chrono::steady_clock::now();
  TokenInfo info;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto c = cache_.find(digest);
    if (c != cache_.end() && now - c->second.second < kCacheFor) {
      info = c->second.first;
      cached = true;
    }
  }
  if (!cached) {
    auto found = tokens_->Lookup(digest);
    if (!found.ok()) return found.status();
    if (!found->has_value()) {
      return absl::UnauthenticatedError("unknown or revoked token");
    }
    info = **found;
    std::lock_guard<std::mutex> lock(mu_);
    if (cache_.size() > 10000) cache_.clear();  // bound memory against junk tokens
    cache_[digest] = {info, now};
  }
  if (!Allowed(info.role, surface)) {
    return absl::PermissionDeniedError(
        absl::StrCat("token \"", info.name, "\" has role ", RoleName(info.role), "; ", method,
                     " needs role ", surface == Surface::kWorker ? "worker" : "user", " or admin"));
  }
  return Caller{info.name, info.role, info.id};
}

}  // namespace ablate::server
