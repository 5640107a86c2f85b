// When the worker's metric sender (worker/run_session.cc) sends what the spool holds: a run's
// points coalesce into requests by size and age. A request costs the server and PostgreSQL about
// what 100 points do (issue #37: ~375 us server + ~430 us PostgreSQL a request, ~6 us a point),
// and a slot logging at the study's rates produces ~100 points a second: sending every half
// second, as the sender did, made 50-point requests and spent most of ingest on the requests. At
// these constants a real worker's request holds ~500 points (bench/queue, "the size a real worker
// sends").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ablate::worker {

// The most points one ReportMetrics carries, and the number pending at which they go at once.
inline constexpr size_t kMetricBatch = 500;
// The age past which the oldest unsent point goes, however few are pending: how far `ablate
// watch`, `ablate logs --follow` and the dashboards lag a live run at most (plus the round trip;
// the heartbeat carries the step meanwhile). Five seconds keeps a watched run moving every few
// seconds while a slot at the study's rates fills a whole request (kMetricBatch); shorter would
// send smaller requests (~0.6 of a raw COPY at 200 points, against ~0.75 at 500: bench/queue).
inline constexpr std::chrono::milliseconds kSenderMaxAge{5000};

// Whether `pending` unsent points, the oldest of them `oldest_age` old, are due to be sent. A
// checkpoint to upload and the end of the run send whatever is pending regardless.
inline bool SendDue(int64_t pending, std::chrono::steady_clock::duration oldest_age) {
  return pending >= static_cast<int64_t>(kMetricBatch) ||
         (pending > 0 && oldest_age >= kSenderMaxAge);
}

}  // namespace ablate::worker
