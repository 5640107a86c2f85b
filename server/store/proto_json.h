// JSON for the protobuf messages the store keeps in jsonb columns (run specs, configs, results),
// written and read by walking the message's fields directly: the store's one JSON reader and
// writer (pg::ToJson and pg::FromJson in pg_codec.h call these; protobuf's converter is reached
// only to word the error for text these refuse, since no message the store holds has a shape they
// do not handle).
//
// Why a hand-written one (issue #37 measured it again, bench/submit/json_bench, one core,
// 2026-12-04; protobuf's util converter = JsonStringToMessage / MessageToJsonString, nlohmann =
// nlohmann::json::parse alone, a tree not yet a message):
//                                        here       protobuf        nlohmann (parse only)
//   ListRuns page, 1,000 runs decoded    3.8 ms     34.2 ms (8.9x)   8.2 ms
//   1,000 Leases' specs (base + delta)   7.1 ms     66.5 ms (9.3x)  14.8 ms
//   100,000 run deltas written (submit)  0.67 s     2.09 s  (3.1x)   -
//   100,000 runs read back (GetSweep)    0.21 s     2.34 s (11.0x)   0.21 s
// protobuf's converter goes through the binary wire format and a type resolver on every call: it
// alone would take a 100,000-run submit past its 2 s target and a 1,000-run page from ~4 ms of
// decoding to ~35 ms. nlohmann only parses into a tree, already as slow as this reader's whole
// job before a field is set.
//
// These functions give the same JSON mapping (proto field names as written, 64-bit integers as
// strings, enums by name, NaN and infinities as "NaN"/"Infinity"/"-Infinity", default values
// left out, unknown fields ignored when reading) for the message shapes the store holds: scalars,
// strings, enums, nested messages, repeated fields and maps with string keys. For anything else
// (bytes, well-known types, other map keys) they return false, and the caller uses protobuf's
// converter, which also gives the error text for JSON that is malformed.
#ifndef ABLATE_SERVER_STORE_PROTO_JSON_H_
#define ABLATE_SERVER_STORE_PROTO_JSON_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace ablate::server::pg {

// Appends `message` as a JSON object to `out`. False (and `out` as it was) for a shape it does
// not handle.
bool AppendMessageJson(const google::protobuf::Message& message, std::string* out);

// The JSON of messages that share most of their values, written as what each holds apart from a
// base message of the same type (run specs: the sweep's first run is the base, migration 0014).
// An object with each field whose JSON differs from the base's, `null` for each field the base
// has and the message does not (read back as unset), and for the singular message field named
// `nested`, when both have it, an object of its fields written the same way (omitted when they
// all match). Merged over the base's JSON (jsonb `||`, and `||` of the two `nested` objects) it
// is the message's JSON (AppendMessageJson).
class JsonDelta {
 public:
  // The base's values, written once. nullopt for a shape AppendMessageJson does not handle, or
  // for a `nested` that is not a singular message field (no field of that name: no nesting).
  static std::optional<JsonDelta> Make(const google::protobuf::Message& base,
                                       std::string_view nested);

  // Appends `message`'s delta. False (and `out` as it was) for a message of another type or a
  // shape AppendMessageJson does not handle.
  bool Append(const google::protobuf::Message& message, std::string* out) const;

 private:
  struct Level {
    const google::protobuf::Descriptor* type = nullptr;
    std::vector<std::optional<std::string>> values;  // by field index: the base's JSON, if set
    bool Fill(const google::protobuf::Message& base);
  };
  bool AppendLevel(const google::protobuf::Message& m, const Level& level,
                   const google::protobuf::FieldDescriptor* nested, std::string* out) const;

  Level top_, inner_;
  const google::protobuf::FieldDescriptor* nested_ = nullptr;
};

// Merges the JSON object `json` into `message`. False for malformed JSON, a value of the wrong
// type for its field, or a shape it does not handle; `message` may then be partly set.
bool MergeMessageJson(std::string_view json, google::protobuf::Message* message);

// Merges a JsonDelta's object `delta` into `message`, which holds the base it was written
// against: what jsonb `base || delta` (with `||` of the two `nested` objects) gives, read as a
// message. Each field the delta names replaces the message's (null: unset), except the singular
// message field `nested` when both have it, whose fields are replaced one by one. False as for
// MergeMessageJson.
bool MergeDeltaJson(std::string_view delta, std::string_view nested,
                    google::protobuf::Message* message);

}  // namespace ablate::server::pg

#endif  // ABLATE_SERVER_STORE_PROTO_JSON_H_
