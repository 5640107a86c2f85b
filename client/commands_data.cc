// `ablate data fetch`: public corpora into the data directory (client/download.h does the
// transfer; client/data_manifest.h says what a named data set is).
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "client/data_manifest.h"
#include "client/download.h"
#include "common/util/sha256.h"
#include "common/util/status_macros.h"

namespace ablate::cli {
namespace {

namespace fs = std::filesystem;

bool IsHex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// The trust-on-first-use record: one `sha256sum` line, so `sha256sum -c` checks it too.
std::string RecordPath(const std::string& dest) { return dest + ".sha256"; }

absl::StatusOr<std::string> ReadRecord(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::string();
  std::string sha;
  in >> sha;
  if (!IsHex64(sha)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": not a sha256sum line (\"<64 hex digits>  <file>\"); fix or delete it"));
  }
  return sha;
}

absl::Status WriteRecord(const std::string& path, const std::string& sha,
                         const std::string& file_name) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << sha << "  " << file_name << "\n";
    out.flush();
    if (!out) return absl::FailedPreconditionError(absl::StrCat(tmp, ": write failed"));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat(path, ": ", ec.message()));
  return absl::OkStatus();
}

struct Target {
  std::string name;  // file name under dir
  std::string url;
  std::string sha256;  // pinned (manifest or --sha256), or empty
  std::string source;  // where the pinned hash comes from
};

absl::Status FetchOne(const DataFetchArgs& args, Target t) {
  const std::string dest = (fs::path(args.to) / t.name).string();
  const std::string record = RecordPath(dest);
  auto recorded = ReadRecord(record);
  if (!recorded.ok()) return recorded.status();
  if (t.sha256.empty() && !recorded->empty()) {
    t.sha256 = *recorded;
    t.source = absl::StrCat("the record ", record, " made by its first download");
  }
  std::error_code ec;
  if (fs::exists(dest, ec)) {
    auto sha = Sha256File(dest);
    if (!sha.ok()) return sha.status();
    if (!t.sha256.empty() && *sha != t.sha256) {
      return absl::FailedPreconditionError(
          absl::StrCat(dest, " exists but its sha256 is ", *sha, ", expected ", t.sha256, " (from ",
                       t.source, "); delete it to download it again"));
    }
    if (t.sha256.empty()) {
      RETURN_IF_ERROR(WriteRecord(record, *sha, t.name));
      std::cerr << dest << ": already present; no sha256 is pinned for it, recorded " << *sha
                << " in " << record << " (trust on first use)\n";
    } else {
      std::cerr << dest << ": already present, sha256 verified against " << t.source << "\n";
    }
    return absl::OkStatus();
  }
  DownloadOptions d;
  d.url = t.url;
  d.dest = dest;
  d.sha256 = t.sha256;
  d.sha256_source = t.source;
  d.low_speed_bytes = args.low_speed_limit;
  d.low_speed_seconds = args.low_speed_time;
  d.progress = !args.quiet;
  auto r = Download(d);
  if (!r.ok()) return r.status();
  if (t.sha256.empty()) {
    RETURN_IF_ERROR(WriteRecord(record, r->sha256, t.name));
    std::cerr << dest << ": no sha256 is pinned for it; recorded " << r->sha256 << " in " << record
              << " (trust on first use: later fetches verify against it)\n";
  } else {
    std::cerr << dest << ": sha256 verified against " << t.source << "\n";
  }
  std::cout << dest << "\t" << r->bytes << "\t" << r->sha256 << "\n";
  return absl::OkStatus();
}

}  // namespace

int DataFetch(const DataFetchArgs& args) {
  std::vector<Target> targets;
  if (!args.url.empty()) {
    if (!args.dataset.empty()) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("data fetch: give a data set name (",
                                                          args.dataset, ") or --url, not both")));
    }
    Target t;
    t.url = args.url;
    t.name = args.name;
    if (t.name.empty()) {
      std::string path = args.url.substr(0, args.url.find_first_of("?#"));
      t.name = path.substr(path.find_last_of('/') + 1);
    }
    if (t.name.empty() || t.name == "." || t.name == ".." ||
        t.name.find('/') != std::string::npos) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "data fetch: --url ", args.url, " does not end in a file name; give --name FILE")));
    }
    t.sha256 = absl::AsciiStrToLower(args.sha256);
    if (!t.sha256.empty() && !IsHex64(t.sha256)) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "data fetch: --sha256 must be 64 hex digits (got ", args.sha256.size(), " characters)")));
    }
    t.source = "--sha256";
    targets.push_back(std::move(t));
  } else {
    if (!args.sha256.empty() || !args.name.empty()) {
      return Fail(absl::InvalidArgumentError("data fetch: --sha256 and --name go with --url"));
    }
    const ManifestDataset* found = nullptr;
    std::vector<std::string> known;
    for (const auto& d : DataManifest()) {
      known.emplace_back(d.name);
      if (d.name == args.dataset) found = &d;
    }
    if (found == nullptr) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "data fetch: unknown data set \"", args.dataset,
          "\" (known: ", absl::StrJoin(known, ", "), "; or use --url URL [--sha256 HEX])")));
    }
    if (!args.quiet) std::cerr << found->name << ": " << found->what << "\n";
    std::string base = args.base_url.empty() ? std::string(found->base_url) : args.base_url;
    if (!base.empty() && base.back() != '/') base += '/';
    for (const auto& f : found->files) {
      targets.push_back({std::string(f.name), base + std::string(f.url), std::string(f.sha256),
                         "the manifest (client/data_manifest.h)"});
    }
  }
  for (const auto& t : targets) {
    if (auto s = FetchOne(args, t); !s.ok()) return Fail(s);
  }
  return 0;
}

}  // namespace ablate::cli
