#include "server/store/pg_codec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/util/run_state.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "server/store/pqxx_compat.h"
#include "server/store/proto_json.h"
#include "server/store/statements.h"

namespace ablate::server::pg {
namespace {

// What a statement reads: its text after the leading comment, up to the outer WHERE (columns,
// joins, LATERAL counts). The decoders below read one row shape each, and two statements return
// each shape. One copy of it would take a view, that is a migration; until then the copies are
// checked to stay the same.
constexpr std::string_view RowShape(std::string_view sql) {
  while (sql.starts_with("--") && sql.find('\n') != std::string_view::npos) {
    sql.remove_prefix(sql.find('\n') + 1);
  }
  return sql.substr(0, sql.find("\nWHERE "));
}
static_assert(RowShape(sql::Name("runs_page").text()) ==
                  RowShape(sql::Name("refine_load_runs").text()),
              "runs_page and refine_load_runs must select the columns RunFromRow reads");
static_assert(RowShape(sql::Name("sweep_get").text()) == RowShape(sql::Name("sweep_list").text()),
              "sweep_get and sweep_list must select the columns SweepFromRow reads");

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

absl::StatusOr<BaseConfigs> LoadBaseConfigs(pqxx::transaction_base& tx, const pqxx::result& rows) {
  std::vector<int64_t> sweeps;
  for (const auto& row : rows) {
    if (!row[26].as<bool>()) continue;
    const int64_t sweep = row[1].as<int64_t>();
    if (std::find(sweeps.begin(), sweeps.end(), sweep) == sweeps.end()) sweeps.push_back(sweep);
  }
  BaseConfigs out;
  if (sweeps.empty()) return out;
  for (const auto& row : Exec(tx, "run_spec_base_configs", Int64Array(sweeps))) {
    v1::RunConfig& config = out[row[0].as<int64_t>()];
    if (row[1].is_null()) continue;
    if (absl::Status s = FromJson(row[1].as<std::string>(), &config); !s.ok()) return s;
  }
  return out;
}

absl::StatusOr<v1::Run> RunFromRow(const pqxx::row& row, const BaseConfigs& bases) {
  v1::Run run;
  run.set_id(row[0].as<int64_t>());
  run.set_sweep_id(row[1].as<int64_t>());
  run.set_cell(row[2].as<std::string>());
  run.set_seed(row[3].as<int64_t>());
  run.set_state(util::RunStateFromName(row[4].as<std::string>()));
  run.set_attempt(row[5].as<int>());
  run.set_max_attempts(row[6].as<int>());
  run.set_worker(row[7].as<std::string>());
  run.set_step(row[8].as<int64_t>());
  run.set_total_steps(row[9].as<int64_t>());
  run.set_latest_train_loss(OrZero(row[10]));
  run.set_latest_val_loss(OrZero(row[11]));
  if (!row[12].is_null()) {
    absl::Status s = FromJson(row[12].as<std::string>(), run.mutable_result());
    if (!s.ok()) return s;
  }
  run.set_error(row[13].as<std::string>());
  run.set_created_at(OrZero(row[14]));
  run.set_started_at(OrZero(row[15]));
  run.set_finished_at(OrZero(row[16]));
  run.set_lease_expires_at(OrZero(row[17]));
  run.set_order_index(row[18].as<int>());
  if (absl::Status s = GridValuesFromJson(row[19], run.mutable_grid_values()); !s.ok()) return s;
  const bool delta = row[26].as<bool>();
  if (delta) {
    const auto base = bases.find(run.sweep_id());
    if (base == bases.end()) {
      return absl::InternalError(
          absl::StrCat("run ", run.id(), ": no base config for sweep ", run.sweep_id()));
    }
    *run.mutable_config() = base->second;
  }
  if (!row[20].is_null()) {
    const std::string config = row[20].as<std::string>();
    if (config == "null") {  // a delta: the run has no config (the base has)
      run.clear_config();
    } else if (delta) {
      // The run's own values over the base's; a field the run lacks is null, read as unset.
      if (!MergeMessageJson(config, run.mutable_config())) {
        return absl::InternalError(absl::StrCat("run ", run.id(), ": stored config is not valid"));
      }
    } else if (absl::Status s = FromJson(config, run.mutable_config()); !s.ok()) {
      return s;
    }
  }
  run.set_refine_round(row[21].as<int>());
  if (!row[22].is_null()) {  // charged attempts (run_usage)
    auto* u = run.mutable_usage();
    u->set_device_seconds(row[22].as<double>());
    u->set_usd(OrZero(row[23]));
    u->set_priced(!row[24].is_null() && row[24].as<bool>());
    u->set_device_class(row[25].is_null() ? std::string() : row[25].as<std::string>());
  }
  run.set_memory_bytes(row[27].as<int64_t>());
  run.set_preemptions(row[28].as<int>());
  run.set_worker_faults(row[29].as<int>());
  // The names of the workers its attempts failed on for a cause not its own (a JSON array).
  for (const auto& name : nlohmann::json::parse(row[30].as<std::string>(), nullptr, false)) {
    if (name.is_string()) run.add_faulted_workers(name.get<std::string>());
  }
  return run;
}

v1::Sweep SweepFromRow(const pqxx::row& row, const SweepHolds* holds) {
  v1::Sweep s;
  s.set_id(row[0].as<int64_t>());
  s.set_name(row[1].as<std::string>());
  s.set_state(row[2].as<std::string>());
  s.set_spec_yaml(row[3].as<std::string>());
  s.set_file_name(row[4].as<std::string>());
  s.set_created_at(OrZero(row[5]));
  s.set_finished_at(OrZero(row[6]));
  s.set_priority(row[7].as<int>());
  for (const auto& axis : nlohmann::json::parse(row[8].as<std::string>(), nullptr, false)) {
    if (axis.is_string()) s.add_axes(axis.get<std::string>());
  }
  s.set_submitted_by(row[9].as<std::string>());
  auto* c = s.mutable_counts();
  c->set_queued(row[10].as<int>());
  c->set_leased(row[11].as<int>());
  c->set_running(row[12].as<int>());
  c->set_succeeded(row[13].as<int>());
  c->set_diverged(row[14].as<int>());
  c->set_failed(row[15].as<int>());
  c->set_cancelled(row[16].as<int>());
  c->set_total(row[17].as<int>());
  c->set_skipped(row[19].as<int>());
  c->set_refined(row[20].as<int>());
  if (!row[22].is_null()) {
    // Written by Insert from a parsed sweep file; an unreadable value leaves refine unset.
    if (FromJson(row[22].as<std::string>(), s.mutable_refine()).ok()) {
      s.mutable_refine()->set_new_runs(c->refined());
      s.mutable_refine()->set_rounds(row[21].as<int>());
    } else {
      s.clear_refine();
    }
  }
  s.set_prune_above_divergence(row[23].as<bool>());
  if (!row[24].is_null() || !row[25].is_null()) {
    // The keeper's last figures (budget_state), then the limits from their columns, which a
    // raise updates at once.
    if (row[26].is_null() || !FromJson(row[26].as<std::string>(), s.mutable_budget()).ok()) {
      s.mutable_budget()->Clear();
    }
    s.mutable_budget()->set_gpu_hours(OrZero(row[24]));
    s.mutable_budget()->set_usd(OrZero(row[25]));
  }
  if (holds != nullptr && holds->counted) {
    c->set_unfittable(static_cast<int>(holds->unfittable));
    c->set_preemptions(static_cast<int>(holds->preemptions));
    c->set_worker_faults(static_cast<int>(holds->worker_faults));
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
  } else if (row[18].is_null()) {
    s.set_eta_seconds(-1);
  } else {
    s.set_eta_seconds(row[18].as<double>() * runnable / std::max(1, progressing));
  }
  return s;
}

}  // namespace ablate::server::pg
