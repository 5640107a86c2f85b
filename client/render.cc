#include "client/render.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/run/run_state.h"
#include "common/util/fields.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace ablate::cli {
namespace {

bool LooksNumeric(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!(absl::ascii_isdigit(c) || c == '.' || c == '-' || c == 'e' || c == '+' || c == '%')) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string Table::Render() const {
  // Every cell as the terminal may show it (util::Printable): a device name or an error text
  // a worker sent cannot move the cursor, recolour the screen or forge a row with a newline.
  std::vector<std::vector<std::string>> rows;
  rows.reserve(rows_.size());
  for (const auto& r : rows_) {
    rows.emplace_back();
    for (const auto& c : r) rows.back().push_back(util::Printable(c));
  }
  std::vector<size_t> width(header_.size(), 0);
  for (size_t i = 0; i < header_.size(); ++i) width[i] = header_[i].size();
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells, bool header) {
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string& c = i < cells.size() ? cells[i] : "";
      const size_t pad = width[i] - std::min(width[i], c.size());
      const bool right = !header && LooksNumeric(c);
      if (right) out.append(pad, ' ');
      out += c;
      if (!right && i + 1 < width.size()) out.append(pad, ' ');
      if (i + 1 < width.size()) out += "  ";
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += '\n';
  };
  line(header_, true);
  for (const auto& r : rows) line(r, false);
  return out;
}

std::string StateName(v1::RunState state) { return std::string(util::RunStateName(state)); }

std::string Bar(double fraction, int width) {
  fraction = std::clamp(std::isfinite(fraction) ? fraction : 0.0, 0.0, 1.0);
  const int filled = static_cast<int>(std::round(fraction * width));
  return absl::StrCat("[", std::string(filled, '#'), std::string(width - filled, '.'), "]");
}

std::string Fixed(double value, int decimals) {
  const double step = std::pow(10.0, -decimals);
  const double magnitude = std::fabs(value);
  if (!std::isfinite(value) || magnitude == 0 || magnitude >= step) {
    return absl::StrFormat("%.*f", decimals, value);
  }
  // Beyond 12 decimals (a picohour) there is nothing a person reads; it prints as 0.
  const int digits = std::min(12, 2 - static_cast<int>(std::floor(std::log10(magnitude))));
  std::string out = absl::StrFormat("%.*f", digits, value);
  while (out.back() == '0') out.pop_back();
  if (out.back() == '.') out.pop_back();
  return out == "-0" ? "0" : out;
}

std::string Duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  if (seconds > 0 && seconds < 1) return absl::StrCat(Fixed(seconds, 0), "s");
  const int64_t s = static_cast<int64_t>(std::round(seconds));
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

std::string Num(double value, int precision) {
  if (!std::isfinite(value)) return std::isnan(value) ? "-" : (value > 0 ? "inf" : "-inf");
  return absl::StrFormat("%.*g", precision, value);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string TimeAgo(double unix_seconds) {
  if (unix_seconds <= 0) return "-";
  // Whole seconds: a clock's sub-second difference is not worth reading.
  return Duration(std::round(Now() - unix_seconds)) + " ago";
}

std::vector<std::pair<const char*, int>> CountsByState(const v1::SweepCounts& c) {
  return {{"running", c.running()},     {"leased", c.leased()},     {"queued", c.queued()},
          {"succeeded", c.succeeded()}, {"diverged", c.diverged()}, {"failed", c.failed()},
          {"cancelled", c.cancelled()}, {"skipped", c.skipped()}};
}

std::string CountsLine(const v1::SweepCounts& c, bool color) {
  std::string out =
      absl::StrCat(c.succeeded() + c.diverged() + c.failed() + c.cancelled() + c.skipped(), "/",
                   c.total(), " done");
  auto add = [&](int n, const char* name) {
    if (n <= 0) return;
    const std::string part = absl::StrCat(n, " ", name);
    absl::StrAppend(&out, ", ", color ? Colored(name, part) : part);
  };
  for (const auto& [name, n] : CountsByState(c)) add(n, name);
  add(c.refined(), "added by refinement");
  return out;
}

int VisibleWidth(const std::string& s) {
  int n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch == 0x1b && i + 1 < s.size() && s[i + 1] == '[') {  // ESC [ ... letter: no column
      i += 2;
      while (i < s.size() && !absl::ascii_isalpha(s[i])) ++i;
      continue;
    }
    if ((ch & 0xC0) != 0x80) ++n;  // UTF-8 continuation bytes share their character's column
  }
  return n;
}

std::string HeldReason(const v1::Sweep& sweep) {
  absl::string_view basis = sweep.eta_basis();
  if (sweep.state() != "active" || !absl::ConsumePrefix(&basis, "held: ")) return "";
  return std::string(basis);
}

std::string SweepStateLabel(const v1::Sweep& sweep, bool compact) {
  const std::string held = HeldReason(sweep);
  if (held.empty()) return sweep.state();
  if (!compact || held.size() <= 14) return held;
  if (absl::StrContains(held, "benched")) return "all benched";
  if (absl::StrContains(held, "memory")) return "fits no worker";
  return held.substr(0, 14);
}

std::string SweepsTable(const std::vector<v1::Sweep>& sweeps, bool wide) {
  // Compact: 5 + 15 + 14 + 19 + 6 + 9 columns and 5 gaps of 2 fit 80 with ids up to 99999 (the
  // state column holds "budget reached").
  constexpr int kCompactName = 15;
  Table t(
      wide ? std::vector<std::string>{"ID", "NAME", "STATE", "PROGRESS", "RUNS", "ETA", "CREATED"}
           : std::vector<std::string>{"ID", "NAME", "STATE", "PROGRESS", "ETA", "CREATED"});
  for (const auto& s : sweeps) {
    const auto& c = s.counts();
    const int done = c.succeeded() + c.diverged() + c.failed() + c.cancelled() + c.skipped();
    const double frac = c.total() > 0 ? double(done) / c.total() : 0;
    const bool held = !HeldReason(s).empty();
    const std::string eta = s.state() == "active" && !held ? Duration(s.eta_seconds()) : "-";
    if (wide) {
      t.Add({std::to_string(s.id()), s.name(), SweepStateLabel(s, false), Bar(frac, 20),
             CountsLine(c), eta, TimeAgo(s.created_at())});
    } else {
      t.Add({std::to_string(s.id()), FitWidth(s.name(), kCompactName), SweepStateLabel(s, true),
             absl::StrCat(Bar(frac, 8), " ", done, "/", c.total()), eta, TimeAgo(s.created_at())});
    }
  }
  return t.Render();
}

namespace {

// `parts` joined by ", " after `first`, onto lines of at most `width` visible columns,
// continuation lines indented by `indent`: a part is never cut, a line holds at least one.
std::vector<std::string> Wrap(const std::string& first, const std::vector<std::string>& parts,
                              int width, int indent) {
  std::vector<std::string> out{first};
  int used = VisibleWidth(first);
  bool fresh = used == 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string sep = i + 1 < parts.size() ? "," : "";
    const int w = VisibleWidth(parts[i]) + static_cast<int>(sep.size());
    if (!fresh && used + 1 + w > width) {
      out.push_back(std::string(indent, ' '));
      used = indent;
      fresh = true;
    }
    if (!fresh) {
      out.back() += ' ';
      ++used;
    }
    absl::StrAppend(&out.back(), parts[i], sep);
    used += w;
    fresh = false;
  }
  return out;
}

// `s` in at most `width` columns (UTF-8 characters), cut in the middle ("a-worker~name-2"): worker
// names that share a prefix differ at their end.
std::string MiddleCut(const std::string& s, int width) {
  if (VisibleWidth(s) <= width || width < 3) return s;
  std::vector<std::string> chars;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 || chars.empty()) chars.emplace_back();
    chars.back() += s[i];
  }
  const size_t head = static_cast<size_t>(width - 1) / 2;
  const size_t tail = static_cast<size_t>(width - 1) - head;
  std::string out;
  for (size_t i = 0; i < head; ++i) out += chars[i];
  out += "~";
  for (size_t i = chars.size() - tail; i < chars.size(); ++i) out += chars[i];
  return out;
}

// A run's grid point: its grid values, else (a run from a server that sent none) its cell key
// read back ("axis=value" joined by ",").
std::map<std::string, std::string> GridOf(const v1::Run& r) {
  std::map<std::string, std::string> out(r.grid_values().begin(), r.grid_values().end());
  if (out.empty()) {
    for (absl::string_view part : absl::StrSplit(r.cell(), ',', absl::SkipEmpty())) {
      const size_t eq = part.find('=');
      if (eq != absl::string_view::npos) {
        out[std::string(part.substr(0, eq))] = std::string(part.substr(eq + 1));
      }
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> FleetLines(const v1::SweepCounts& c) {
  std::vector<std::string> out;
  if (c.unfittable() > 0) {
    out.push_back(absl::StrCat(
        c.unfittable(), c.unfittable() == 1 ? " queued run fits" : " queued runs fit",
        " no live worker (they wait for a worker of their device kind with the memory)"));
  }
  if (c.fault_held() > 0) {
    out.push_back(absl::StrCat(
        "held: ", c.fault_held(),
        c.fault_held() == 1 ? " queued run waits for a worker it has not failed on"
                            : " queued runs wait for a worker they have not failed on",
        c.fault_held_until() > Now()
            ? absl::StrCat(" (at most ", Duration(c.fault_held_until() - Now()), " more)")
            : ""));
  }
  std::vector<std::string> faults;
  if (c.preemptions() > 0) faults.push_back(absl::StrCat("preempted ", c.preemptions()));
  if (c.worker_faults() > 0) faults.push_back(absl::StrCat("worker faults ", c.worker_faults()));
  if (!faults.empty()) out.push_back(absl::StrCat(absl::StrJoin(faults, ", "), " (requeued)"));
  return out;
}

std::string ShortValue(const std::string& text, int digits) {
  double v = 0;
  if (!absl::SimpleAtod(text, &v) || !std::isfinite(v)) return text;
  if (text.find_first_of(".eE") == std::string::npos) return text;  // an integer, as written
  std::string s = absl::StrFormat("%.*g", digits, v);
  return s.size() < text.size() ? s : text;
}

std::vector<std::string> CellLabels(const google::protobuf::RepeatedPtrField<v1::Run>& runs,
                                    const google::protobuf::RepeatedPtrField<std::string>& axes) {
  std::vector<std::map<std::string, std::string>> grids;
  std::map<std::string, std::set<std::string>> values;  // axis -> its values ("" where absent)
  for (const auto& r : runs) grids.push_back(GridOf(r));
  for (const auto& g : grids) {
    for (const auto& [axis, value] : g) values[axis];
  }
  for (const auto& g : grids) {
    for (auto& [axis, seen] : values) {
      auto it = g.find(axis);
      seen.insert(it == g.end() ? "" : it->second);
    }
  }
  // The axes that tell rows apart, the sweep's order first, then any it does not list.
  std::vector<std::string> varied;
  auto consider = [&](const std::string& axis) {
    auto it = values.find(axis);
    if (axis == "seed" || it == values.end() || it->second.size() < 2) return;
    if (std::find(varied.begin(), varied.end(), axis) == varied.end()) varied.push_back(axis);
  };
  for (const auto& axis : axes) consider(axis);
  for (const auto& [axis, seen] : values) consider(axis);
  std::vector<std::string> out;
  out.reserve(runs.size());
  if (varied.empty()) {
    for (const auto& r : runs) out.push_back(r.cell());
    return out;
  }
  // Per axis, the fewest digits (3 at least) that keep its values apart.
  std::map<std::string, int> digits;
  for (const auto& axis : varied) {
    int d = 3;
    for (; d < 17; ++d) {
      std::set<std::string> shown;
      for (const auto& v : values[axis]) shown.insert(ShortValue(v, d));
      if (shown.size() == values[axis].size()) break;
    }
    digits[axis] = d;
  }
  for (const auto& g : grids) {
    std::vector<std::string> parts;
    for (const auto& axis : varied) {
      auto it = g.find(axis);
      if (it != g.end())
        parts.push_back(absl::StrCat(axis, "=", ShortValue(it->second, digits[axis])));
    }
    out.push_back(absl::StrJoin(parts, ","));
  }
  return out;
}

std::vector<std::string> WatchFrame(const v1::SweepUpdate& update, const std::string& eta_text,
                                    int width, int height, bool color) {
  const auto& s = update.sweep();
  const auto& c = s.counts();
  const int fit = std::max(20, width - 1);  // the last column would park the cursor mid-wrap
  const int done = c.succeeded() + c.diverged() + c.failed() + c.cancelled() + c.skipped();
  const double frac = c.total() > 0 ? double(done) / c.total() : 0;
  std::vector<std::string> lines;
  lines.push_back(FitWidth(absl::StrCat("sweep ", s.id(), " '", s.name(), "'"), fit));
  // The summary: every count, wrapped, never cut (a cut hid failed and diverged at 80 columns).
  std::vector<std::string> parts = absl::StrSplit(CountsLine(c, color), ", ");
  std::string head =
      absl::StrCat(Bar(frac, 20), " ", static_cast<int>(std::round(100 * frac)), "%");
  if (!eta_text.empty()) absl::StrAppend(&head, "  ", eta_text);
  for (auto& l : Wrap(head, parts, fit, 2)) lines.push_back(FitWidth(l, fit));
  if (s.has_refine()) lines.push_back(FitWidth("  " + RefineLine(s.refine()), fit));
  // What it cost so far, and the budget: wrapped like the summary, never cut.
  std::vector<std::string> spend = CostLines(s.cost(), false);
  if (s.has_budget()) spend.push_back(BudgetLine(s.budget(), std::to_string(s.id())));
  for (auto& line : FleetLines(c)) spend.push_back(std::move(line));
  for (const auto& text : spend) {
    std::vector<std::string> words =
        absl::StrSplit(absl::StrReplaceAll(text, {{"; ", ", "}}), ", ");
    for (auto& l : Wrap("", words, fit, 2)) lines.push_back(FitWidth(l, fit));
  }
  // Each active run, with its cell's label (what the rows do not all share).
  std::vector<std::pair<const v1::Run*, std::string>> active;
  const std::vector<std::string> labels = CellLabels(update.runs(), s.axes());
  size_t id_width = 1, total_width = 1;
  int label_width = 0;
  for (int i = 0; i < update.runs_size(); ++i) {
    const v1::Run& r = update.runs(i);
    id_width = std::max(id_width, std::to_string(r.id()).size());
    total_width = std::max(total_width, std::to_string(r.total_steps()).size());
    if (r.state() == v1::RUNNING || r.state() == v1::LEASED) {
      active.emplace_back(
          &r, absl::StrCat(labels[i], r.refine_round() > 0
                                          ? absl::StrCat(" (refine r", r.refine_round(), ")")
                                          : ""));
      label_width = std::max(label_width, VisibleWidth(active.back().second));
    }
  }
  const size_t room = static_cast<size_t>(std::max(1, height - static_cast<int>(lines.size()) - 1));
  // Fixed-width facts first (each padded, so columns stay put), the seed among them, then the
  // cell's label (padded to the widest): the axes that tell the rows apart, the one under study
  // among them. The worker comes last, cut in the middle to the room left (16 columns at least):
  // a narrow terminal cuts it, not the cell. The progress bar
  // says what step/total says, so it is dropped where it would push the label past the width.
  size_t loss_width = 6, seed_width = 1;
  for (const auto& [r, label] : active) {
    loss_width = std::max(
        loss_width,
        (r->latest_train_loss() > 0 ? Num(r->latest_train_loss()) : std::string("-")).size());
    seed_width = std::max(seed_width, std::to_string(r->seed()).size());
  }
  auto facts = [&](const v1::Run& r, const std::string& label, bool bar) {
    const double f = r.total_steps() > 0 ? double(r.step()) / r.total_steps() : 0;
    const std::string state = StateName(r.state());
    const std::string padded = absl::StrFormat("%-7s", state);
    const std::string loss = r.latest_train_loss() > 0 ? Num(r.latest_train_loss()) : "-";
    return absl::StrCat("  ", absl::StrFormat("%*d", static_cast<int>(id_width), r.id()), " ",
                        color ? Colored(state, padded) : padded, " ", bar ? Bar(f, 10) + " " : "",
                        absl::StrFormat("%*d/%-*d", static_cast<int>(total_width), r.step(),
                                        static_cast<int>(total_width), r.total_steps()),
                        " loss ", absl::StrFormat("%-*s", static_cast<int>(loss_width), loss),
                        " seed=", absl::StrFormat("%-*d", static_cast<int>(seed_width), r.seed()),
                        " ", label, std::string(label_width - VisibleWidth(label), ' '));
  };
  bool bar = true;
  for (const auto& [r, label] : active) bar = bar && VisibleWidth(facts(*r, label, true)) <= fit;
  for (size_t i = 0; i < active.size(); ++i) {
    if (i + 1 == room && active.size() > room) {
      lines.push_back(absl::StrCat("  ... and ", active.size() - i, " more"));
      break;
    }
    const v1::Run& r = *active[i].first;
    const std::string head = facts(r, active[i].second, bar);
    const int room = std::max(16, fit - VisibleWidth(head) - 2);
    lines.push_back(FitWidth(
        absl::StrCat(head, "  ",
                     MiddleCut(r.worker().empty() ? "-" : util::Printable(r.worker()), room)),
        fit));
  }
  return lines;
}

std::string RefineLine(const v1::RefineStatus& r) {
  return absl::StrCat(
      "refine ", r.axis(), " (", absl::StrJoin(r.boundaries(), ", "), ") until ratio ",
      Num(r.until_ratio()),
      r.seeds_max() > 0 ? absl::StrCat(", seeds up to ", r.seeds_max(), " where within noise") : "",
      ": ", r.new_runs(), " of ", r.max_new_runs(), " new runs, round ", r.rounds());
}

namespace {

// A run state as the tables print it ("SUCCEEDED" -> "succeeded"), so JSON and tables, run and
// sweep states ("active") share one casing; anything else is left alone.
void LowerRunState(nlohmann::ordered_json& v) {
  v1::RunState st;
  if (v.is_string() && v1::RunState_Parse(v.get<std::string>(), &st)) v = StateName(st);
}

// Drops "<...>run_id": "0" at any depth (zero is "no run", which a field's absence says) and
// lowers run states.
void Normalize(nlohmann::ordered_json& j) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end();) {
      const std::string& key = it.key();
      if (key == "state") LowerRunState(*it);
      if (key == "states" && it->is_array()) {
        for (auto& e : *it) LowerRunState(e);
      }
      const bool run_id = key == "run_id" || (key.size() > 7 && key.ends_with("_run_id"));
      if (run_id && ((it->is_string() && *it == "0") || (it->is_number() && *it == 0))) {
        it = j.erase(it);
      } else {
        Normalize(*it);
        ++it;
      }
    }
  } else if (j.is_array()) {
    for (auto& e : j) Normalize(e);
  }
}

}  // namespace

std::string ToJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, opts);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(out, nullptr, false);
  if (j.is_discarded()) return out;
  Normalize(j);
  return j.dump();
}

std::string Colored(const std::string& state, const std::string& text) {
  const char* code = nullptr;
  if (state == "running" || state == "leased") code = "36";  // cyan: in flight
  if (state == "succeeded") code = "32";                     // green
  if (state == "diverged") code = "33";                      // yellow: a result, not a fault
  if (state == "failed") code = "31";                        // red
  if (state == "cancelled") code = "35";                     // magenta
  if (state == "skipped") code = "90";                       // grey: inferred, not run
  if (code == nullptr) return text;
  return absl::StrCat("\033[", code, "m", text, "\033[0m");
}

bool UseColor() {
  const char* no_color = std::getenv("NO_COLOR");
  if (no_color != nullptr && *no_color != '\0') return false;
  return isatty(STDOUT_FILENO) != 0;
}

std::pair<int, int> TerminalSize() {
  int cols = 0, rows = 0;
  struct winsize ws {};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0) {
    cols = ws.ws_col;
    rows = ws.ws_row;
  }
  auto env = [](const char* name) {
    int v = 0;
    const char* text = std::getenv(name);
    return text != nullptr && absl::SimpleAtoi(text, &v) && v > 0 ? v : 0;
  };
  if (cols <= 0) cols = env("COLUMNS");
  if (rows <= 0) rows = env("LINES");
  return {cols > 0 ? cols : 80, rows > 0 ? rows : 24};
}

std::string FitWidth(const std::string& line, int width) {
  if (width <= 0 || VisibleWidth(line) <= width) return line;
  std::string out;
  int n = 0;
  bool colored = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const unsigned char ch = static_cast<unsigned char>(line[i]);
    if (ch == 0x1b && i + 1 < line.size() && line[i + 1] == '[') {
      size_t j = i + 2;
      while (j < line.size() && !absl::ascii_isalpha(line[j])) ++j;
      const std::string seq = line.substr(i, j - i + 1);
      out += seq;
      colored = seq != "\033[0m";
      i = j;
      continue;
    }
    if ((ch & 0xC0) != 0x80) {
      if (n == width - 1) break;  // room for the "~" that says the line was cut
      ++n;
    }
    out += static_cast<char>(ch);
  }
  if (colored) out += "\033[0m";
  return out + "~";
}

}  // namespace ablate::cli
