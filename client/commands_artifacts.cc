// artifacts ls and get: what the server keeps for a run, and its final checkpoint downloaded and
// verified.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/render.h"
#include "common/util/sha256.h"

namespace ablate::cli {
namespace {

namespace fs = std::filesystem;

// Streams the artifact into a temporary file beside `final_path`, checks its size and SHA-256
// against the header, flushes it to disk and only then renames it into place, so `final_path`
// is either absent or the complete, verified file.
absl::Status Download(Context& ctx, int64_t run, const fs::path& final_path,
                      v1::CheckpointRef* ref) {
  grpc::ClientContext gctx;
  ctx.Prepare(&gctx, -1);  // a large checkpoint may take long; no deadline
  v1::ArtifactRequest req;
  req.set_run_id(run);
  req.set_name("final");
  auto reader = ctx.stub->GetArtifact(&gctx, req);
  const fs::path tmp = fs::path(final_path).concat(absl::StrCat(".part-", getpid()));
  std::FILE* out = nullptr;
  Sha256 hash;
  int64_t size = 0;
  bool have_header = false;
  absl::Status failed;
  v1::ArtifactChunk chunk;
  while (reader->Read(&chunk)) {
    if (!have_header) {
      have_header = true;
      *ref = chunk.ref();
      out = std::fopen(tmp.c_str(), "wb");
      if (out == nullptr) {
        failed = absl::PermissionDeniedError(absl::StrCat("cannot write ", tmp.string()));
        gctx.TryCancel();
        break;
      }
      continue;
    }
    const std::string& data = chunk.data();
    if (size + static_cast<int64_t>(data.size()) > ref->size_bytes()) {
      failed = absl::DataLossError(absl::StrCat("run ", run, ": the server sent more than the ",
                                                ref->size_bytes(), " bytes it announced"));
      gctx.TryCancel();
      break;
    }
    hash.Update(data);
    size += static_cast<int64_t>(data.size());
    if (std::fwrite(data.data(), 1, data.size(), out) != data.size()) {
      failed = absl::ResourceExhaustedError(absl::StrCat("writing ", tmp.string(), " failed"));
      gctx.TryCancel();
      break;
    }
  }
  absl::Status rpc_status = rpc::ToAbsl(reader->Finish(), "artifact download", ctx.conn.server);
  bool flushed = out == nullptr;
  if (out != nullptr) {
    flushed = std::fflush(out) == 0 && fsync(fileno(out)) == 0;
    flushed = std::fclose(out) == 0 && flushed;
  }
  auto give_up = [&](absl::Status s) {
    std::error_code ec;
    fs::remove(tmp, ec);
    return s;
  };
  if (!failed.ok()) return give_up(failed);
  if (!rpc_status.ok()) return give_up(rpc_status);
  if (!have_header) {
    return give_up(absl::DataLossError(absl::StrCat("run ", run, ": the server sent nothing")));
  }
  if (!flushed) return give_up(absl::DataLossError(absl::StrCat("writing ", tmp.string())));
  if (size != ref->size_bytes()) {
    return give_up(absl::DataLossError(absl::StrCat("run ", run, ": got ", size, " bytes of ",
                                                    ref->size_bytes(), "; nothing written")));
  }
  if (const std::string got = hash.HexDigest(); got != ref->sha256()) {
    return give_up(
        absl::DataLossError(absl::StrCat("run ", run, ": SHA-256 mismatch (expected ",
                                         ref->sha256(), ", got ", got, "); nothing written")));
  }
  std::error_code ec;
  fs::rename(tmp, final_path, ec);
  if (ec)
    return give_up(
        absl::InternalError(absl::StrCat("rename to ", final_path.string(), ": ", ec.message())));
  return absl::OkStatus();
}

}  // namespace

int ArtifactsGet(Context& ctx, int64_t run, const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--out ", out_dir, ": ", ec.message())));
  }
  const fs::path path = fs::path(out_dir) / absl::StrCat("run-", run, "-final.pt");
  v1::CheckpointRef ref;
  if (absl::Status s = Download(ctx, run, path, &ref); !s.ok()) return Fail(s);
  if (ctx.json) {
    std::cout << "{\"run\":" << run << ",\"path\":\"" << path.string()
              << "\",\"step\":" << ref.step() << ",\"sha256\":\"" << ref.sha256()
              << "\",\"size_bytes\":" << ref.size_bytes() << "}\n";
  } else {
    std::cout << path.string() << "  (run " << run << " final weights at step " << ref.step()
              << ", " << ref.size_bytes() << " bytes, sha256 " << ref.sha256() << ")\n";
  }
  return 0;
}

int ArtifactsLs(Context& ctx, int64_t run) {
  v1::ListArtifactsRequest req;
  req.set_run_id(run);
  auto resp = ctx.Call("list artifacts", &v1::SweepService::Stub::ListArtifacts, req);
  if (!resp.ok()) return Fail(resp.status());
  if (ctx.json) {
    for (const auto& a : resp->artifacts()) std::cout << ToJson(a) << "\n";
    return 0;
  }
  if (resp->artifacts().empty()) {
    std::cout << "run " << run << " (" << StateName(resp->state()) << ") keeps no checkpoints\n";
    return 0;
  }
  Table t({"NAME", "STEP", "BYTES", "SHA256", "TRY", "STORED"});
  bool final = false;
  for (const auto& a : resp->artifacts()) {
    final = final || a.name() == "final";
    t.Add({a.name(), std::to_string(a.ref().step()), std::to_string(a.ref().size_bytes()),
           a.ref().sha256(), std::to_string(a.attempt()), TimeAgo(a.created_at())});
  }
  std::cout << t.Render();
  if (final) {
    std::cout << "download the final weights: ablate artifacts get " << run << " --out DIR\n";
  }
  return 0;
}

}  // namespace ablate::cli
