// Whose fault ended an attempt (issue #38, docs/server.md#failures): the run's, the worker's, or
// unknown. The server acts on the answer, so the cost of a wrong one decides the rules: a run
// wrongly blamed ends `failed` for good, a worker wrongly blamed costs the run a retry elsewhere
// and the worker a step toward its bench. Where the two disagree the worker is blamed.
//
// The rules, first match wins:
//  1. A class the source attached (WithFault): the fault injection of tests, a trainer crash.
//  2. Where it happened: the attempt's spool, its run dir, a thread the worker cannot start are
//     the machine's (kSpool, kRunDir, kThread), whatever the error says.
//  3. Status codes the sources set for the machine's causes: RESOURCE_EXHAUSTED (out of memory
//     on the device or the host, a full disk, no thread left), UNAVAILABLE (the device or a
//     library is not there), PERMISSION_DENIED (files this machine will not let it write).
//  4. The message table (failure_class.cc), for errors whose source cannot set a code: LibTorch's
//     and the OS's texts. It is asked before rule 5, so a device error some source wrapped as
//     INVALID_ARGUMENT still blames the machine. One entry blames the run: a CUDA "device-side
//     assert" is an index out of range in a kernel, in this trainer always a token id or position
//     the run's data or config put there; it fails the same on every GPU.
//  5. Codes the sources set for the run's causes: INVALID_ARGUMENT (a spec or config the trainer
//     refuses, data that is not valid: a token file too short or malformed, text a tokenizer
//     cannot be trained on; the data came with its SHA-256, so every machine sees the same bytes),
//     FAILED_PRECONDITION (the run's inputs disagree: a data file without a content hash, a
//     checkpoint written under other settings), OUT_OF_RANGE.
//  6. Anything else is unknown (the server counts it against the run's max_attempts). A data set
//     or checkpoint whose download did not match its SHA-256 (DATA_LOSS) is unknown too: the wire,
//     this disk or the server's store may have changed the bytes.
#pragma once

#include <optional>
#include <string>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/status.h"

namespace ablate::worker {

// Where in an attempt the error came from.
enum class FaultStage {
  kFetchInputs,  // data sets, the resume checkpoint, the fleet's prepared files
  kTrain,        // the trainer, from setting up to the last write
  kSpool,        // the attempt's metric spool (created, written, read back)
  kRunDir,       // the attempt's run dir under the work dir
  kThread,       // a thread the worker could not start (std::system_error)
};

// The class of what ended an attempt; FAULT_UNKNOWN for OK (no failure to attribute).
v1::FaultClass ClassifyFailure(const absl::Status& status, FaultStage stage);

// What part of the machine a worker-side failure points at: what a benched worker's self-check
// tests again before it registers (worker/self_check.h). The work dir's disk (the spool, the run
// dir, a full or read-only disk, files it may not write), memory (out of memory on the device or
// the host, a thread it could not start), the device's runtime, or none of them.
enum class FaultArea { kOther, kDisk, kMemory, kDevice };
FaultArea AreaOf(const absl::Status& status, FaultStage stage);
const char* FaultAreaName(FaultArea area);  // "disk", "memory", "device", "other"

// `status` with `fault` attached, for a source that knows whose fault it is (rule 1). Survives
// being returned through RETURN_IF_ERROR, not a rewrite of the message.
absl::Status WithFault(absl::Status status, v1::FaultClass fault);

// "run", "worker" or "unknown", as in RunEvent.fault and the worker's logs.
const char* FaultClassName(v1::FaultClass fault);

// Fault injection for tests (the hidden --test-fault-file PATH of ablate-worker): while the file
// at `path` exists, every attempt the worker starts fails at step 0 with the file's contents as
// its error, blamed on the worker; contents whose first line starts with `run:` blame the run
// instead (the text after it is the error). An empty file gives kDefaultInjectedFault. nullopt
// when `path` is empty or no file is there (the worker has healed).
inline constexpr char kDefaultInjectedFault[] =
    "CUDA error: an illegal memory access was encountered (injected)";
std::optional<absl::Status> InjectedFault(const std::string& path);
// Whether the fault file says `crash:`: the attempt does not fail, the whole worker process dies
// in training (std::terminate, as "terminate called without an active exception" did under a
// memory cap), for the tests of what its next process reports (worker/crash_record.h). The
// self-check fails meanwhile, as for any injected worker-side fault.
bool InjectedCrash(const std::string& path);

}  // namespace ablate::worker
