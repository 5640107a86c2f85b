// The report's last section: what the study cost, per device class, from each run's charged
// usage (Run.usage), so `report --from EXPORT` prints it as well (docs/architecture.md#cost).
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/report/report.h"
#include "common/report/tables.h"

namespace ablate::report {
namespace {

struct ClassCost {
  int runs = 0;
  double device_seconds = 0;
  double usd = 0;
  bool priced = true;
};

std::string Hours(double seconds) { return absl::StrFormat("%.3f", seconds / 3600); }
std::string Dollars(double usd) { return absl::StrFormat("$%.2f", usd); }

}  // namespace

std::string CostTable(const std::vector<ablate::v1::Run>& runs, bool markdown, int width) {
  std::map<std::string, ClassCost> by_class;
  ClassCost total;
  for (const auto& r : runs) {
    if (!r.has_usage() || r.usage().device_seconds() <= 0) continue;
    ClassCost& c = by_class[r.usage().device_class().empty() ? std::string("unknown")
                                                             : r.usage().device_class()];
    for (ClassCost* t : {&c, &total}) {
      ++t->runs;
      t->device_seconds += r.usage().device_seconds();
      t->usd += r.usage().usd();
      if (!r.usage().priced()) t->priced = false;
    }
  }
  if (by_class.empty()) return "";
  std::vector<std::vector<std::string>> rows;
  for (const auto& [name, c] : by_class) {
    rows.push_back({name, absl::StrCat(c.runs), Hours(c.device_seconds),
                    c.priced ? Dollars(c.usd)
                             : (c.usd > 0 ? Dollars(c.usd) + " (partly priced)" : "unpriced")});
  }
  rows.push_back({"all", absl::StrCat(total.runs), Hours(total.device_seconds),
                  total.priced ? Dollars(total.usd)
                               : (total.usd > 0 ? Dollars(total.usd) + " (priced runs)" : "-")});
  const std::vector<std::string> header = {"device class", "runs", "GPU-hours", "cost"};
  std::string out;
  if (markdown) {
    out =
        "\n## Cost\n\nDevice time each run held a lease for (its slot's share of the worker), "
        "and money at the workers' declared prices (docs/architecture.md#cost).\n\n";
    absl::StrAppend(&out, "| ", absl::StrJoin(header, " | "), " |\n|---|---:|---:|---:|\n");
    for (const auto& row : rows) absl::StrAppend(&out, "| ", absl::StrJoin(row, " | "), " |\n");
    return out;
  }
  Table t;
  t.header = header;
  t.rows = rows;
  t.keys = 1;
  t.right = {false, true, true, true};
  t.rule = false;
  out = "\n" + WrapText("Cost (GPU-hours: device time each run held; money at the workers' prices)",
                        width);
  absl::StrAppend(&out, RenderText(t, width));
  return out;
}

}  // namespace ablate::report
