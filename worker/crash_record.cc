#include "worker/crash_record.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/util/file.h"

namespace ablate::worker {
namespace {

namespace fs = std::filesystem;

constexpr char kProcessFile[] = "process";
constexpr char kReportFile[] = "report";
constexpr char kRunPrefix[] = "run-";

// The open record of this process, for the handlers (one CrashRecord per process).
int g_record_fd = -1;

// Async-signal-safe: write(2) of a line built without allocating.
void RecordLine(const char* key, const char* value) {
  if (g_record_fd < 0) return;
  char line[512];
  size_t n = 0;
  for (const char* p = key; *p != '\0' && n < sizeof(line) - 2; ++p) line[n++] = *p;
  line[n++] = '=';
  for (const char* p = value; *p != '\0' && n < sizeof(line) - 1; ++p) {
    line[n++] = (*p == '\n' || *p == '\r') ? ' ' : *p;
  }
  line[n++] = '\n';
  (void)!write(g_record_fd, line, n);
}

void RecordSignal(int sig) {
  char digits[16];
  size_t n = 0;
  for (int v = sig; v > 0 && n < sizeof(digits) - 1; v /= 10) digits[n++] = char('0' + v % 10);
  char value[16];
  for (size_t i = 0; i < n; ++i) value[i] = digits[n - 1 - i];
  value[n] = '\0';
  RecordLine("signal", value);
}

extern "C" void OnCrashSignal(int sig) {
  RecordSignal(sig);
  // SA_RESETHAND put the default action back: raising again ends the process as the signal
  // would have (a core dump where enabled), with the same exit status.
  raise(sig);
}

// std::terminate (an exception nobody caught, a joinable thread destroyed, ...): what it was,
// then the message the default handler prints, then abort (whose SIGABRT is recorded too).
void OnTerminate() {
  std::string what = "no active exception";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = absl::StrCat("an uncaught exception: ", x.what());
    } catch (...) {
      what = "an uncaught exception of unknown type";
    }
  }
  RecordLine("terminate", what.c_str());
  const std::string message = absl::StrCat("terminate called: ", what, "\n");
  (void)!write(STDERR_FILENO, message.data(), message.size());
  std::abort();
}

void InstallHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnCrashSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_NODEFER;
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE}) sigaction(sig, &sa, nullptr);
  std::set_terminate(OnTerminate);
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGABRT:
      return "SIGABRT: aborted";
    case SIGSEGV:
      return "SIGSEGV: segmentation fault";
    case SIGBUS:
      return "SIGBUS: bus error";
    case SIGILL:
      return "SIGILL: illegal instruction";
    case SIGFPE:
      return "SIGFPE: arithmetic error";
    default:
      return "a fatal signal";
  }
}

// The previous process's record: key=value lines.
std::map<std::string, std::string> ReadRecord(const std::string& path) {
  std::map<std::string, std::string> out;
  auto text = util::ReadFile(path);
  if (!text.ok()) return out;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    // The first of each: a crash records its signal once, but abort after terminate adds one.
    out.emplace(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
  }
  return out;
}

// Whether process `pid` is an ablate-worker running now (on this boot).
bool WorkerAlive(int64_t pid, const HostPaths& paths) {
  if (pid <= 0 || pid == getpid()) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  auto comm = util::ReadFile(absl::StrCat(paths.proc, "/", pid, "/comm"));
  return comm.ok() && absl::StartsWith(absl::StripAsciiWhitespace(*comm), "ablate-worker");
}

// Why the previous process died, from its record, on the same boot.
std::string Cause(const std::map<std::string, std::string>& record,
                  std::optional<int64_t> oom_now) {
  auto get = [&](const char* key) {
    auto it = record.find(key);
    return it == record.end() ? std::string() : it->second;
  };
  int sig = 0;
  if (absl::SimpleAtoi(get("signal"), &sig) && sig > 0) {
    std::string out =
        absl::StrCat("the worker process died of signal ", sig, " (", SignalName(sig), ")");
    if (const std::string t = get("terminate"); !t.empty()) {
      absl::StrAppend(&out, " in std::terminate: ", t);
    }
    return out;
  }
  int64_t oom_then = 0;
  if (oom_now && absl::SimpleAtoi(get("oom_kills"), &oom_then) && *oom_now > oom_then) {
    return absl::StrCat(
        "the worker process was killed by the kernel's OOM killer (its memory cgroup's oom_kill "
        "count went from ",
        oom_then, " to ", *oom_now, ")");
  }
  return "the worker process ended without a trace: killed by SIGKILL (the kernel's OOM killer, "
         "a container's memory limit, kill -9) or a crash that left no record";
}

}  // namespace

absl::StatusOr<std::unique_ptr<CrashRecord>> CrashRecord::Open(const std::string& work_dir,
                                                               bool install_handlers,
                                                               const HostPaths& paths) {
  const std::string dir = (fs::path(work_dir) / "held").string();
  if (auto s = util::MakeDirs(dir); !s.ok()) return s;
  std::unique_ptr<CrashRecord> out(new CrashRecord(dir));
  const std::string process_path = (fs::path(dir) / kProcessFile).string();
  const std::string report_path = (fs::path(dir) / kReportFile).string();
  const std::map<std::string, std::string> record = ReadRecord(process_path);
  const std::string boot = BootId(paths);
  int64_t pid = 0;
  const bool same_boot = [&] {
    auto it = record.find("boot");
    return it == record.end() || boot.empty() || it->second == boot;
  }();
  if (auto it = record.find("pid"); it != record.end() && absl::SimpleAtoi(it->second, &pid) &&
                                    same_boot && WorkerAlive(pid, paths)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--work-dir ", work_dir, " is in use by another ablate-worker (pid ", pid,
                     "); give each worker a work dir of its own"));
  }

  // What earlier processes left and the server has not had yet.
  std::map<std::pair<int64_t, int>, v1::CrashedAttempt> report;
  if (auto text = util::ReadFile(report_path); text.ok()) {
    v1::RegisterRequest pending;
    if (pending.ParseFromString(*text)) {
      for (const auto& c : pending.crashed()) report[{c.run_id(), c.attempt()}] = c;
    }
  }
  // The attempts the previous process still held.
  std::vector<v1::CrashedAttempt> held;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, kRunPrefix)) continue;
    if (auto text = util::ReadFile(entry.path().string()); text.ok()) {
      v1::CrashedAttempt c;
      if (c.ParseFromString(*text) && c.run_id() > 0) held.push_back(std::move(c));
    }
    fs::remove(entry.path(), ec);
  }
  if (!held.empty()) {
    if (!same_boot) {
      // The machine restarted under it: a preemption, as the server already counts it.
      out->note_ =
          absl::StrCat("the previous worker process went with the machine (another boot) ",
                       "holding ", held.size(), " run(s); their leases count as preempted");
    } else {
      const std::string cause = Cause(record, OomKills(paths));
      for (auto& c : held) {
        c.set_cause(cause);
        report[{c.run_id(), c.attempt()}] = std::move(c);
      }
      out->note_ = absl::StrCat("the previous worker process (pid ", pid, ") died holding ",
                                held.size(), " run(s): ", cause);
    }
  }
  v1::RegisterRequest pending;
  for (auto& [key, c] : report) {
    out->previous_.push_back(c);
    *pending.add_crashed() = c;
  }
  if (!out->previous_.empty()) {
    if (auto s = util::WriteFileAtomically(report_path, pending.SerializeAsString()); !s.ok()) {
      return s;
    }
  }
  // This process's record, kept open for the handlers.
  const std::optional<int64_t> oom = OomKills(paths);
  const std::string head = absl::StrCat("pid=", getpid(), "\nboot=", boot, "\n",
                                        oom ? absl::StrCat("oom_kills=", *oom, "\n") : "");
  const int fd =
      open(process_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, head.data(), head.size()) != static_cast<ssize_t>(head.size())) {
    const int err = errno;
    if (fd >= 0) close(fd);
    return util::FileError("write the worker's process record", process_path, err);
  }
  out->fd_ = fd;
  g_record_fd = fd;  // the newest record is the process's (one per process outside tests)
  if (install_handlers) InstallHandlers();
  return out;
}

CrashRecord::~CrashRecord() {
  std::lock_guard<std::mutex> lock(mu_);
  CloseFd();
}

void CrashRecord::CloseFd() {
  if (fd_ < 0) return;
  if (g_record_fd == fd_) g_record_fd = -1;
  close(fd_);
  fd_ = -1;
}

void CrashRecord::Reported() {
  std::lock_guard<std::mutex> lock(mu_);
  std::error_code ec;
  fs::remove(fs::path(dir_) / kReportFile, ec);
  previous_.clear();
}

std::string CrashRecord::RunPath(const RunLease& lease) const {
  return (fs::path(dir_) / absl::StrCat(kRunPrefix, lease.run_id(), "-a", lease.attempt()))
      .string();
}

void CrashRecord::Hold(const RunLease& lease) {
  v1::CrashedAttempt held;
  lease.Stamp(&held);
  // A record that cannot be written loses only the evidence: the lease expires as a preemption.
  (void)util::WriteFileAtomically(RunPath(lease), held.SerializeAsString(),
                                  util::Durability::kRename);
}

void CrashRecord::Drop(const RunLease& lease) {
  std::error_code ec;
  fs::remove(RunPath(lease), ec);
}

void CrashRecord::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  closed_ = true;
  CloseFd();
  std::error_code ec;
  fs::remove(fs::path(dir_) / kProcessFile, ec);
}

}  // namespace ablate::worker
