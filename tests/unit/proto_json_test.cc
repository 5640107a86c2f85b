// server/store/proto_json: the store's JSON for protobuf messages must mean exactly what
// protobuf's own converter means, both ways, for every message of ablate.proto.
#include "server/store/proto_json.h"

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>

#include "ablate/v1/ablate.pb.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/util/field_comparator.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/store/pg_codec.h"

namespace ablate::server::pg {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Strings that need escaping, non-ASCII text and a character outside the BMP.
const char* const kStrings[] = {"",
                                "plain",
                                "quote \" and \\ backslash",
                                "line\nbreak\ttab\r",
                                "\x01\x1f control",
                                "naïve café",
                                "emoji \xF0\x9F\x98\x80",
                                "/"};

class Filler {
 public:
  explicit Filler(uint32_t seed) : rng_(seed) {}

  // Sets a random subset of `m`'s fields (every type; maps and repeated with 0-3 entries).
  void Fill(Message* m, int depth = 0) {
    const Descriptor* d = m->GetDescriptor();
    const auto* r = m->GetReflection();
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      if (Pick(10) < 3) continue;
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !f->is_map() && depth >= 3) continue;
      if (f->is_map()) {
        const int n = Pick(4);
        for (int k = 0; k < n; ++k) {
          Message* e = r->AddMessage(m, f);
          const FieldDescriptor* key = f->message_type()->map_key();
          if (key->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
            e->GetReflection()->SetString(e, key,
                                          std::string(kStrings[Pick(8)]) + "k" + std::to_string(k));
          } else {
            SetOne(e, key, false, depth);
          }
          SetOne(e, f->message_type()->map_value(), false, depth);
        }
      } else if (f->is_repeated()) {
        const int n = Pick(4);
        for (int k = 0; k < n; ++k) SetOne(m, f, true, depth);
      } else {
        SetOne(m, f, false, depth);
      }
    }
  }

 private:
  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  template <typename T>
  T Int() {
    switch (Pick(4)) {
      case 0:
        return std::numeric_limits<T>::max();
      case 1:
        return std::numeric_limits<T>::min();
      default:
        return std::uniform_int_distribution<T>(std::numeric_limits<T>::min(),
                                                std::numeric_limits<T>::max())(rng_);
    }
  }
  double Double() {
    const double special[] = {0.1,      -1e300,    5e-324, std::numeric_limits<double>::quiet_NaN(),
                              HUGE_VAL, -HUGE_VAL, 3.0,    1e21};
    if (Pick(2) == 0) return special[Pick(8)];
    return std::uniform_real_distribution<double>(-1e6, 1e6)(rng_);
  }
  void SetOne(Message* m, const FieldDescriptor* f, bool add, int depth) {
    const auto* r = m->GetReflection();
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32: {
        auto v = Int<int32_t>();
        add ? r->AddInt32(m, f, v) : r->SetInt32(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_UINT32: {
        auto v = Int<uint32_t>();
        add ? r->AddUInt32(m, f, v) : r->SetUInt32(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_INT64: {
        auto v = Int<int64_t>();
        add ? r->AddInt64(m, f, v) : r->SetInt64(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_UINT64: {
        auto v = Int<uint64_t>();
        add ? r->AddUInt64(m, f, v) : r->SetUInt64(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_DOUBLE: {
        double v = Double();
        add ? r->AddDouble(m, f, v) : r->SetDouble(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_FLOAT: {
        float v = static_cast<float>(Pick(1000)) / 8.0f;
        add ? r->AddFloat(m, f, v) : r->SetFloat(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_BOOL: {
        bool v = Pick(2) == 1;
        add ? r->AddBool(m, f, v) : r->SetBool(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_ENUM: {
        const auto* e = f->enum_type();
        int v = e->value(Pick(e->value_count()))->number();
        add ? r->AddEnumValue(m, f, v) : r->SetEnumValue(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_STRING: {
        std::string v = kStrings[Pick(8)];
        add ? r->AddString(m, f, v) : r->SetString(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_MESSAGE:
        Fill(add ? r->AddMessage(m, f) : r->MutableMessage(m, f), depth + 1);
        break;
    }
  }
  std::mt19937 rng_;
};

bool Same(const Message& a, const Message& b, std::string* diff) {
  google::protobuf::util::DefaultFieldComparator cmp;
  cmp.set_treat_nan_as_equal(true);
  google::protobuf::util::MessageDifferencer d;
  d.set_field_comparator(&cmp);
  d.ReportDifferencesToString(diff);
  return d.Compare(a, b);
}

std::string ProtobufJson(const Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(m, &out, o).ok());
  return out;
}

// The same JSON document as protobuf's printer gives (numbers compared as values, keys in any
// order), and it reads back to the same message both through protobuf and through ours.
TEST(ProtoJson, EveryMessageOfTheApiMatchesProtobufBothWays) {
  const auto* file = v1::RunSpec::descriptor()->file();
  google::protobuf::DynamicMessageFactory factory;
  int checked = 0, fallbacks = 0;
  for (int t = 0; t < file->message_type_count(); ++t) {
    const Descriptor* d = file->message_type(t);
    const Message* prototype = factory.GetPrototype(d);
    for (uint32_t seed = 0; seed < 40; ++seed) {
      std::unique_ptr<Message> m(prototype->New());
      Filler(seed * 7919 + t).Fill(m.get());
      SCOPED_TRACE(d->full_name() + " seed " + std::to_string(seed));
      const std::string theirs = ProtobufJson(*m);
      std::string ours;
      if (!AppendMessageJson(*m, &ours)) {
        // A shape it leaves to protobuf (bytes): pg::ToJson falls back and still round-trips.
        ++fallbacks;
        EXPECT_TRUE(ours.empty());
        ours = ToJson(*m);
        EXPECT_EQ(ours, theirs);
        continue;
      }
      ++checked;
      EXPECT_EQ(nlohmann::json::parse(ours), nlohmann::json::parse(theirs)) << ours;

      std::string diff;
      std::unique_ptr<Message> back(prototype->New());
      google::protobuf::util::JsonParseOptions po;
      ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(ours, back.get(), po).ok()) << ours;
      EXPECT_TRUE(Same(*m, *back, &diff)) << "protobuf read ours: " << diff;

      back.reset(prototype->New());
      ASSERT_TRUE(MergeMessageJson(theirs, back.get())) << theirs;
      diff.clear();
      EXPECT_TRUE(Same(*m, *back, &diff)) << "we read protobuf's: " << diff;

      back.reset(prototype->New());
      ASSERT_TRUE(MergeMessageJson(ours, back.get())) << ours;
      diff.clear();
      EXPECT_TRUE(Same(*m, *back, &diff)) << "we read ours: " << diff;
    }
  }
  EXPECT_GT(checked, 1000);
  RecordProperty("fallbacks", fallbacks);
}

TEST(ProtoJson, ReadsWhatProtobufAcceptsForNumbersAndEscapes) {
  v1::RunConfig c;
  ASSERT_TRUE(MergeMessageJson(
      R"( { "steps" : "1e3", "n_layer": 4.0, "lr": "0.5", "seed": -7,
            "qk_norm": "caf\u00e9 \ud83d\ude00 \"q\" \/", "dtype": null } )",
      &c));
  EXPECT_EQ(c.steps(), 1000);
  EXPECT_EQ(c.n_layer(), 4);
  EXPECT_EQ(c.lr(), 0.5);
  EXPECT_EQ(c.seed(), -7);
  EXPECT_EQ(c.qk_norm(), "café \xF0\x9F\x98\x80 \"q\" /");
  v1::RunResult r;
  ASSERT_TRUE(MergeMessageJson(R"({"final_val_loss":"NaN","initial_loss":"-Infinity"})", &r));
  EXPECT_TRUE(std::isnan(r.final_val_loss()));
  EXPECT_EQ(r.initial_loss(), -HUGE_VAL);
}

TEST(ProtoJson, IgnoresUnknownFieldsOfAnyShape) {
  v1::RunConfig c;
  ASSERT_TRUE(MergeMessageJson(
      R"({"from_a_newer_server": {"a": [1, {"b": null}, "x\"y"], "c": true}, "lr": 0.01,
          "camelCaseUnknown": -1.5e-3})",
      &c));
  EXPECT_EQ(c.lr(), 0.01);
}

TEST(ProtoJson, RefusesWhatIsNotValidAndFromJsonSaysWhy) {
  for (const char* bad :
       {"", "{", "{\"lr\": }", "{\"steps\": 1.5}", "{\"steps\": \"ten\"}",
        "{\"n_layer\": 3000000000}", "{\"lr\": true}", "{\"qk_norm\": 3}", "{\"lr\": 0.1} x",
        "{\"qk_norm\": \"\\ud800\"}", "[1]", "{\"lr\": 01x}"}) {
    SCOPED_TRACE(bad);
    v1::RunConfig c;
    EXPECT_FALSE(MergeMessageJson(bad, &c));
    v1::RunConfig via;
    absl::Status s = FromJson(bad, &via);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("ablate.v1.RunConfig"), std::string::npos) << s;
  }
}

TEST(ProtoJson, FromJsonReplacesWhatTheMessageHeld) {
  v1::RunConfig c;
  c.set_n_layer(9);
  c.set_lr(3);
  ASSERT_TRUE(FromJson(R"({"lr": 0.25})", &c).ok());
  EXPECT_EQ(c.n_layer(), 0);
  EXPECT_EQ(c.lr(), 0.25);
}

// What run_spec() (migration 0014) does in PostgreSQL: the delta's fields over the base's, and
// the `nested` objects merged one level down.
std::string MergeLikeRunSpec(const std::string& base, const std::string& delta,
                             const std::string& nested) {
  nlohmann::json merged = nlohmann::json::parse(base);
  const nlohmann::json own = nlohmann::json::parse(delta);
  for (auto it = own.begin(); it != own.end(); ++it) {
    const std::string& key = it.key();
    if (key == nested && merged.contains(key) && merged[key].is_object() && it->is_object()) {
      for (auto sub = it->begin(); sub != it->end(); ++sub) merged[key][sub.key()] = *sub;
    } else {
      merged[key] = *it;
    }
  }
  return merged.dump();
}

// Clears each field of `m` with probability 1/4.
void ClearSome(Message* m, std::mt19937* rng) {
  const Descriptor* d = m->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    if (std::uniform_int_distribution<int>(0, 3)(*rng) == 0) {
      m->GetReflection()->ClearField(m, d->field(i));
    }
  }
}

// A message stored as its delta from a base reads back as itself, through our reader and
// protobuf's (nulls included), for messages that share most fields with the base and for ones
// that share none; and a field equal to the base's is not written.
TEST(ProtoJson, ADeltaOverItsBaseIsTheMessage) {
  int checked = 0;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    v1::RunSpec base;
    Filler(seed).Fill(&base);
    auto delta = JsonDelta::Make(base, "config");
    ASSERT_TRUE(delta.has_value());
    v1::RunSpec m;
    if (seed % 3 == 0) {
      Filler(seed + 100000).Fill(&m);  // unrelated
    } else {
      m = base;  // a neighbour: some fields changed, some cleared, in config too
      Filler(seed + 200000).Fill(m.mutable_config());
      ClearSome(m.mutable_config(), &rng);
      if (seed % 3 == 1) {
        m.set_cell(m.cell() + "x");
        ClearSome(&m, &rng);
      }
    }
    std::string own;
    ASSERT_TRUE(delta->Append(m, &own));
    const std::string merged = MergeLikeRunSpec(ToJson(base), own, "config");
    std::string diff;
    v1::RunSpec back;
    ASSERT_TRUE(MergeMessageJson(merged, &back)) << merged;
    EXPECT_TRUE(Same(m, back, &diff)) << "ours: " << diff << "\n" << own;
    v1::RunSpec theirs;
    google::protobuf::util::JsonParseOptions po;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(merged, &theirs, po).ok()) << merged;
    diff.clear();
    EXPECT_TRUE(Same(m, theirs, &diff)) << "protobuf's: " << diff;
    ++checked;
  }
  EXPECT_EQ(checked, 300);

  // A sweep's second run: only what differs, config fields one by one.
  v1::RunSpec first;
  first.set_sweep_name("s");
  first.set_cell("lr=0.001");
  (*first.mutable_grid_values())["lr"] = "0.001";
  first.mutable_config()->set_lr(0.001);
  first.mutable_config()->set_n_layer(4);
  first.mutable_config()->set_dropout(0.1);
  first.mutable_data()->set_train("a.txt");
  v1::RunSpec second = first;
  second.set_cell("lr=0.01");
  (*second.mutable_grid_values())["lr"] = "0.01";
  second.mutable_config()->set_lr(0.01);
  second.mutable_config()->clear_dropout();
  auto delta = JsonDelta::Make(first, "config");
  ASSERT_TRUE(delta.has_value());
  std::string own;
  ASSERT_TRUE(delta->Append(second, &own));
  EXPECT_EQ(nlohmann::json::parse(own), nlohmann::json::parse(R"({"cell": "lr=0.01",
      "grid_values": {"lr": "0.01"}, "config": {"lr": 0.01, "dropout": null}})"));
  own.clear();
  ASSERT_TRUE(delta->Append(first, &own));
  EXPECT_EQ(own, "{}");
  // Another type is refused, and leaves what was written.
  own = "x";
  EXPECT_FALSE(delta->Append(v1::RunConfig(), &own));
  EXPECT_EQ(own, "x");
}

}  // namespace
}  // namespace ablate::server::pg
