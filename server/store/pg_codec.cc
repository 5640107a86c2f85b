#include "server/store/pg_codec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/run/run_state.h"
#include "common/util/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "server/store/pqxx_compat.h"
#include "server/store/proto_json.h"

namespace ablate::server::pg {
namespace {

template <typename T, typename F>
std::string Join(const std::vector<T>& values, F&& format) {
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    format(values[i], &out);
  }
  out += '}';
  return out;
}

// Why nothing of sweep `s`'s remaining work can run now ("" when some can): its budget, no
// worker that may lease (none live, or every live one benched), or queued runs that no live
// worker can hold with nothing in flight. `progressing`: its runs in flight on live workers.
std::string HeldBy(const v1::Sweep& s, const SweepHolds* holds, int progressing) {
  const v1::SweepCounts& c = s.counts();
  if (c.queued() > 0 && s.has_budget()) {
    const v1::Budget& b = s.budget();
    const double limit = b.usd() > 0 ? b.usd() : b.gpu_hours();
    if (b.reached() || (limit > 0 && b.spent() >= limit)) return "budget reached";
  }
  if (holds == nullptr || holds->can_lease < 0) return "";
  const int64_t pending = c.queued() + holds->lost_in_flight;
  if (pending > 0 && holds->can_lease == 0 && progressing == 0) {
    return holds->benched > 0 ? "every live worker is benched" : "no live worker";
  }
  if (c.queued() > 0 && c.unfittable() >= c.queued() && holds->lost_in_flight == 0 &&
      progressing == 0) {
    return absl::StrCat(c.unfittable(), c.unfittable() == 1 ? " run fits" : " runs fit",
                        " no live worker's device memory");
  }
  return "";
}

}  // namespace

void AppendTextArrayElement(std::string* literal, const std::string& value) {
  if (literal->size() > 1) literal->push_back(',');
  literal->push_back('"');
  for (char c : value) {
    if (c == '"' || c == '\\') literal->push_back('\\');
    literal->push_back(c);
  }
  literal->push_back('"');
}

std::string TextArray(const std::vector<std::string>& values) {
  std::string out = "{";
  for (const auto& v : values) AppendTextArrayElement(&out, v);
  out += '}';
  return out;
}

std::string Int64Array(const std::vector<int64_t>& values) {
  return Join(values, [](int64_t v, std::string* out) { absl::StrAppend(out, v); });
}

std::string DoubleArray(const std::vector<double>& values) {
  return Join(values, [](double v, std::string* out) {
    if (std::isnan(v)) {
      out->append("NaN");
    } else if (std::isinf(v)) {
      out->append(v > 0 ? "Infinity" : "-Infinity");
    } else {
      // Shortest text that parses back to the same double (exact round trip, and cheap).
      char buf[32];
      auto r = std::to_chars(buf, buf + sizeof(buf), v);
      out->append(buf, r.ptr);
    }
  });
}

std::string ToJson(const google::protobuf::Message& message) {
  std::string out;
  if (AppendMessageJson(message, &out)) return out;  // the fast path (proto_json.h)
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  // Serialising a well-formed message cannot fail; an empty object keeps the column valid.
  if (!google::protobuf::util::MessageToJsonString(message, &out, options).ok()) return "{}";
  return out;
}

absl::Status FromJson(const std::string& json, google::protobuf::Message* message) {
  // The fast path (proto_json.h) reads what the store writes; protobuf's parser takes the rest
  // and says what is wrong with JSON that is not valid, from a clean message.
  // Like JsonStringToMessage, it replaces what `message` held.
  message->Clear();
  if (MergeMessageJson(json, message)) return absl::OkStatus();
  message->Clear();
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto status = google::protobuf::util::JsonStringToMessage(json, message, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("stored ", message->GetTypeName(), " is not valid JSON: ", status.ToString()));
  }
  return absl::OkStatus();
}

std::vector<std::string> StateNames(const std::vector<v1::RunState>& states) {
  std::vector<std::string> out;
  for (auto s : states) out.push_back(std::string(util::RunStateName(s)));
  return out;
}

double OrZero(const pqxx::field& field) { return field.is_null() ? 0.0 : field.as<double>(); }

absl::Status GridValuesFromJson(const pqxx::field& field,
                                google::protobuf::Map<std::string, std::string>* out) {
  out->clear();
  if (field.is_null()) return absl::OkStatus();
  v1::RunSpec holder;
  absl::Status s =
      FromJson(absl::StrCat("{\"grid_values\":", field.as<std::string>(), "}"), &holder);
  if (s.ok()) out->swap(*holder.mutable_grid_values());
  return s;
}

absl::StatusOr<v1::RunSpec> MergeRunSpec(const v1::RunSpec* base, const pqxx::field& whole,
                                         const pqxx::field& own) {
  v1::RunSpec spec;
  if (own.is_null() || base == nullptr) {
    // A row from before migration 0014 (its whole spec), or a run of a sweep stored then whose
    // refinement wrote its whole spec as its own.
    const pqxx::field& stored = own.is_null() ? whole : own;
    if (stored.is_null()) return absl::InternalError("run has no stored spec");
    RETURN_IF_ERROR(FromJson(stored.as<std::string>(), &spec));
    return spec;
  }
  spec = *base;
  const std::string delta = own.as<std::string>();
  if (!MergeDeltaJson(delta, "config", &spec)) {
    // Only to word the error: protobuf's parser says what is wrong with the text.
    v1::RunSpec unused;
    RETURN_IF_ERROR(FromJson(delta, &unused));
    return absl::InternalError("stored run spec delta does not fit its sweep's base");
  }
  return spec;
}

absl::StatusOr<BaseSpecs> LoadBaseSpecs(pqxx::transaction_base& tx, const pqxx::result& rows) {
  std::vector<int64_t> sweeps;
  const ByName col(rows);
  for (const auto& row : rows) {
    if (col(row, "spec_own").is_null()) continue;
    const int64_t sweep = col(row, "sweep_id").as<int64_t>();
    if (std::find(sweeps.begin(), sweeps.end(), sweep) == sweeps.end()) sweeps.push_back(sweep);
  }
  BaseSpecs out;
  if (sweeps.empty()) return out;
  const pqxx::result bases = Exec(tx, "run_spec_bases", Int64Array(sweeps));
  const ByName base_col(bases);
  for (const auto& row : bases) {
    v1::RunSpec base;
    RETURN_IF_ERROR(FromJson(base_col(row, "spec").as<std::string>(), &base));
    // RunFromRow reads the config and the grid point; a copy of the rest per run would be waste.
    v1::RunSpec& kept = out[base_col(row, "sweep_id").as<int64_t>()];
    kept.mutable_config()->Swap(base.mutable_config());
    kept.mutable_grid_values()->swap(*base.mutable_grid_values());
  }
  return out;
}

absl::StatusOr<v1::Run> RunFromRow(const ByName& col, const pqxx::row& row,
                                   const BaseSpecs& bases) {
  v1::Run run;
  run.set_id(col(row, "id").as<int64_t>());
  run.set_sweep_id(col(row, "sweep_id").as<int64_t>());
  run.set_cell(col(row, "cell").as<std::string>());
  run.set_seed(col(row, "seed").as<int64_t>());
  run.set_state(util::RunStateFromName(col(row, "state").as<std::string>()));
  run.set_attempt(col(row, "attempt").as<int>());
  run.set_max_attempts(col(row, "max_attempts").as<int>());
  run.set_worker(col(row, "worker").as<std::string>());
  run.set_step(col(row, "step").as<int64_t>());
  run.set_total_steps(col(row, "total_steps").as<int64_t>());
  run.set_latest_train_loss(OrZero(col(row, "latest_train_loss")));
  run.set_latest_val_loss(OrZero(col(row, "latest_val_loss")));
  if (const pqxx::field result = col(row, "result"); !result.is_null()) {
    RETURN_IF_ERROR(FromJson(result.as<std::string>(), run.mutable_result()));
  }
  run.set_error(col(row, "error").as<std::string>());
  run.set_created_at(OrZero(col(row, "created_at")));
  run.set_started_at(OrZero(col(row, "started_at")));
  run.set_finished_at(OrZero(col(row, "finished_at")));
  run.set_lease_expires_at(OrZero(col(row, "lease_expires_at")));
  run.set_order_index(col(row, "order_index").as<int>());
  const pqxx::field whole = col(row, "spec_whole"), own = col(row, "spec_own");
  if (!whole.is_null() || !own.is_null()) {
    const auto base = bases.find(run.sweep_id());
    auto spec = MergeRunSpec(base == bases.end() ? nullptr : &base->second, whole, own);
    if (!spec.ok()) {
      return absl::Status(spec.status().code(),
                          absl::StrCat("run ", run.id(), ": ", spec.status().message()));
    }
    if (spec->has_config()) run.mutable_config()->Swap(spec->mutable_config());
    run.mutable_grid_values()->swap(*spec->mutable_grid_values());
  }
  run.set_refine_round(col(row, "refine_round").as<int>());
  if (const pqxx::field seconds = col(row, "device_seconds"); !seconds.is_null()) {
    auto* u = run.mutable_usage();  // charged attempts (run_usage)
    u->set_device_seconds(seconds.as<double>());
    u->set_usd(OrZero(col(row, "usd")));
    const pqxx::field priced = col(row, "priced"), device_class = col(row, "device_class");
    u->set_priced(!priced.is_null() && priced.as<bool>());
    u->set_device_class(device_class.is_null() ? std::string() : device_class.as<std::string>());
  }
  run.set_memory_bytes(col(row, "memory_bytes").as<int64_t>());
  run.set_preemptions(col(row, "preemptions").as<int>());
  run.set_worker_faults(col(row, "worker_faults").as<int>());
  // The names of the workers its attempts failed on for a cause not its own (a JSON array).
  for (const auto& name :
       nlohmann::json::parse(col(row, "faulted_workers").as<std::string>(), nullptr, false)) {
    if (name.is_string()) run.add_faulted_workers(name.get<std::string>());
  }
  return run;
}

v1::Sweep SweepFromRow(const ByName& col, const pqxx::row& row, const SweepHolds* holds) {
  v1::Sweep s;
  s.set_id(col(row, "id").as<int64_t>());
  s.set_name(col(row, "name").as<std::string>());
  s.set_state(col(row, "state").as<std::string>());
  s.set_spec_yaml(col(row, "spec_yaml").as<std::string>());
  s.set_file_name(col(row, "file_name").as<std::string>());
  s.set_created_at(OrZero(col(row, "created_at")));
  s.set_finished_at(OrZero(col(row, "finished_at")));
  s.set_priority(col(row, "priority").as<int>());
  for (const auto& axis :
       nlohmann::json::parse(col(row, "axes").as<std::string>(), nullptr, false)) {
    if (axis.is_string()) s.add_axes(axis.get<std::string>());
  }
  s.set_submitted_by(col(row, "submitted_by").as<std::string>());
  auto* c = s.mutable_counts();
  c->set_queued(col(row, "queued").as<int>());
  c->set_leased(col(row, "leased").as<int>());
  c->set_running(col(row, "running").as<int>());
  c->set_succeeded(col(row, "succeeded").as<int>());
  c->set_diverged(col(row, "diverged").as<int>());
  c->set_failed(col(row, "failed").as<int>());
  c->set_cancelled(col(row, "cancelled").as<int>());
  c->set_total(col(row, "total").as<int>());
  c->set_skipped(col(row, "skipped").as<int>());
  c->set_refined(col(row, "refined").as<int>());
  if (!col(row, "refine").is_null()) {
    // Written by Insert from a parsed sweep file; an unreadable value leaves refine unset.
    if (FromJson(col(row, "refine").as<std::string>(), s.mutable_refine()).ok()) {
      s.mutable_refine()->set_new_runs(c->refined());
      s.mutable_refine()->set_rounds(col(row, "rounds").as<int>());
    } else {
      s.clear_refine();
    }
  }
  s.set_prune_above_divergence(col(row, "prune_above_divergence").as<bool>());
  if (!col(row, "budget_gpu_hours").is_null() || !col(row, "budget_usd").is_null()) {
    // The keeper's last figures (budget_state), then the limits from their columns, which a
    // raise updates at once.
    if (col(row, "budget_state").is_null() ||
        !FromJson(col(row, "budget_state").as<std::string>(), s.mutable_budget()).ok()) {
      s.mutable_budget()->Clear();
    }
    s.mutable_budget()->set_gpu_hours(OrZero(col(row, "budget_gpu_hours")));
    s.mutable_budget()->set_usd(OrZero(col(row, "budget_usd")));
  }
  if (holds != nullptr && holds->counted) {
    c->set_unfittable(static_cast<int>(holds->unfittable));
    c->set_preemptions(static_cast<int>(holds->preemptions));
    c->set_worker_faults(static_cast<int>(holds->worker_faults));
    c->set_fault_held(static_cast<int>(holds->fault_held));
    c->set_fault_held_until(holds->fault_held_until);
  }
  // ETA: the runs that can run times the mean duration of finished runs, divided by the runs in
  // flight on live workers (a proxy for the workers on this sweep). Crude while few runs have
  // finished; -1 until one has. Held (-1, eta_basis "held: why") when the sweep cannot finish as
  // things are: its budget stopped it, or no worker may lease what is left, or no live worker can
  // hold any queued run and nothing is in flight
  // (docs/server.md#workers-states-and-benching-read-side).
  const int in_flight = c->leased() + c->running();
  const int remaining = c->queued() + in_flight;
  const int lost = holds != nullptr ? static_cast<int>(holds->lost_in_flight) : 0;
  const int progressing = std::max(0, in_flight - lost);
  const int runnable = std::max(0, remaining - c->unfittable());
  const std::string held =
      s.state() != "active" || remaining == 0 ? std::string() : HeldBy(s, holds, progressing);
  if (s.state() != "active" || remaining == 0) {
    s.set_eta_seconds(0);
  } else if (!held.empty()) {
    s.set_eta_seconds(-1);
    s.set_eta_basis(std::string(kEtaHeld) + held);
  } else if (col(row, "avg_seconds").is_null()) {
    s.set_eta_seconds(-1);
  } else {
    s.set_eta_seconds(col(row, "avg_seconds").as<double>() * runnable / std::max(1, progressing));
  }
  return s;
}

}  // namespace ablate::server::pg
