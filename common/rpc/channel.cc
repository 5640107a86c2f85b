#include "common/rpc/channel.h"

#include "absl/strings/str_cat.h"
#include "common/util/file.h"

namespace ablate::rpc {

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientConfig& config) {
  if (config.server.empty()) return absl::InvalidArgumentError("no server address given");
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!config.tls_ca.empty() || config.tls) {
    grpc::SslCredentialsOptions ssl;
    if (!config.tls_ca.empty()) {
      auto pem = util::ReadFile(config.tls_ca);
      if (!pem.ok()) {
        return absl::NotFoundError(absl::StrCat("--tls-ca ", config.tls_ca, ": cannot read file"));
      }
      ssl.pem_root_certs = *std::move(pem);
    }
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  // Workers sit behind NAT for hours between calls; keepalives keep the mapping open and detect
  // a dead path in under a minute instead of at the next long-poll's deadline.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // After an outage the channel reconnects at most this long after the server is back. Calls
  // made before then fail at once with the outage's error, and a worker's lease only survives
  // an outage shorter than the lease minus this, so keep it short; a refused connect costs
  // nothing.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel(config.server, creds, args);
}

void Authorize(grpc::ClientContext* context, const std::string& token) {
  if (!token.empty()) context->AddMetadata("authorization", absl::StrCat("Bearer ", token));
}

absl::Status ToAbsl(const grpc::Status& status, std::string_view what, std::string_view server,
                    std::string_view role) {
  if (status.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat(std::string(what), ": ", status.error_message());
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      if (!server.empty()) {
        absl::StrAppend(&msg, " (is ablate-server running and reachable at ", std::string(server),
                        "? set --server or ABLATE_SERVER)");
      }
      break;
    case grpc::StatusCode::UNAUTHENTICATED:
      absl::StrAppend(&msg,
                      " (pass a valid token with --token or ABLATE_TOKEN; create one with "
                      "`ablate-server token create --role ",
                      std::string(role), "`)");
      break;
    default:
      break;
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), msg);
}

bool IsTransient(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) ||
         absl::IsResourceExhausted(status) || absl::IsAborted(status);
}

}  // namespace ablate::rpc
