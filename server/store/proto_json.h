// JSON for the protobuf messages the store keeps in jsonb columns (run specs, configs, results),
// written and read by walking the message's fields directly.
//
// protobuf's own converter (util::MessageToJsonString / JsonStringToMessage) goes through the
// binary wire format and a type resolver on every call: a 100,000-run submit spent most of its
// server CPU there, and a ListRuns page of 1,000 runs ~100 ms decoding (issue #22). These
// functions give the same JSON mapping (proto field names as written, 64-bit integers as
// strings, enums by name, NaN and infinities as "NaN"/"Infinity"/"-Infinity", default values
// left out, unknown fields ignored when reading) for the message shapes the store holds: scalars,
// strings, enums, nested messages, repeated fields and maps with string keys. For anything else
// (bytes, well-known types, other map keys) they return false, and the caller uses protobuf's
// converter, which also gives the error text for JSON that is malformed.
#ifndef ABLATE_SERVER_STORE_PROTO_JSON_H_
#define ABLATE_SERVER_STORE_PROTO_JSON_H_

#include <string>
#include <string_view>

#include "google/protobuf/message.h"

namespace ablate::server::pg {

// Appends `message` as a JSON object to `out`. False (and `out` as it was) for a shape it does
// not handle.
bool AppendMessageJson(const google::protobuf::Message& message, std::string* out);

// Merges the JSON object `json` into `message`. False for malformed JSON, a value of the wrong
// type for its field, or a shape it does not handle; `message` may then be partly set.
bool MergeMessageJson(std::string_view json, google::protobuf::Message* message);

}  // namespace ablate::server::pg

#endif  // ABLATE_SERVER_STORE_PROTO_JSON_H_
