// What every command shares: sweep references, exit codes, how errors print, and a sweep
// fetched with all its runs.
#include <iostream>

#include "absl/strings/numbers.h"
#include "client/commands.h"

namespace ablate::cli {

v1::SweepRef ParseSweepRef(const std::string& text) {
  v1::SweepRef ref;
  int64_t id = 0;
  if (absl::SimpleAtoi(text, &id) && id > 0) {
    ref.set_id(id);
  } else {
    ref.set_name(text);
  }
  return ref;
}

int ExitCode(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 2;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return 3;
    case absl::StatusCode::kNotFound:
      return 4;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return 5;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
      return 6;
    default:
      return 1;
  }
}

namespace {
std::string& UnreachableHint() {
  static auto* hint = new std::string;
  return *hint;
}
}  // namespace

void SetUnreachableHint(std::string hint) { UnreachableHint() = std::move(hint); }

int Fail(const absl::Status& status) {
  std::cerr << "ablate: " << status.message() << "\n";
  const int code = ExitCode(status);
  if (code == 5 && !UnreachableHint().empty()) std::cerr << UnreachableHint();
  return code;
}

absl::StatusOr<v1::GetSweepResponse> FetchSweep(Context& ctx, const std::string& sweep) {
  v1::GetSweepRequest req;
  *req.mutable_sweep() = ParseSweepRef(sweep);
  auto resp = ctx.Call("get sweep", &v1::SweepService::Stub::GetSweep, req);
  if (!resp.ok()) return resp;
  // The runs page by page (the server answers at most kRunsPerPage a call, so no reply of a
  // 100,000-run sweep carries them all), newest first, then turned into queue order.
  v1::ListRunsRequest page;
  page.mutable_sweep()->set_id(resp->sweep().id());
  std::vector<v1::Run> runs;
  while (true) {
    page.set_limit(kRunsPerPage);
    page.set_offset(static_cast<int>(runs.size()));
    auto got = ctx.Call("list runs", &v1::SweepService::Stub::ListRuns, page);
    if (!got.ok()) return got.status();
    for (auto& r : *got->mutable_runs()) runs.push_back(std::move(r));
    if (got->runs().empty() || got->total() == 0 ||
        static_cast<int64_t>(runs.size()) >= got->total()) {
      break;
    }
  }
  for (auto it = runs.rbegin(); it != runs.rend(); ++it) *resp->add_runs() = std::move(*it);
  return resp;
}

}  // namespace ablate::cli
