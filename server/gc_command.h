// `ablate-server gc`: removes checkpoint-store files no row references (docs/server.md#retention).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace ablate::server {

absl::Status RunGc(const std::string& database_url, const std::string& store_dir,
                   int64_t min_age_seconds, bool dry_run);

}  // namespace ablate::server
