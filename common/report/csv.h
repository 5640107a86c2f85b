// RFC 4180 CSV: quoting on write, splitting one line on read. Shared by the report's CSVs and
// the export's metrics.csv.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ablate::report {

// `field` quoted when it holds a comma, quote, CR or LF.
std::string CsvField(const std::string& field);

// The fields joined by commas, each quoted as needed, with a trailing "\n".
std::string CsvLine(const std::vector<std::string>& fields);

// Splits one line (no embedded newlines) into fields, undoing the quoting.
absl::StatusOr<std::vector<std::string>> SplitCsvLine(const std::string& line);

}  // namespace ablate::report
