// See proto_json.h. The writer walks Reflection::ListFields (exactly the fields protobuf's
// printer shows without always_print_primitive_fields); the reader is a recursive-descent JSON
// parser that sets each field as it reads its value, with no document tree in between.
#include "server/store/proto_json.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "absl/strings/charconv.h"
#include "google/protobuf/descriptor.h"

namespace ablate::server::pg {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Messages protobuf maps to special JSON (Timestamp, Struct, wrappers, Any, ...).
bool IsWellKnown(const Descriptor* d) { return d->file()->package() == "google.protobuf"; }

void AppendString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out->append("\\u00");
          out->push_back(kHex[(c >> 4) & 0xf]);
          out->push_back(kHex[c & 0xf]);
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

template <typename T>
void AppendNumber(T v, std::string* out) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}

template <typename T>
void AppendFloating(T v, std::string* out) {
  if (std::isnan(v)) {
    out->append("\"NaN\"");
  } else if (std::isinf(v)) {
    out->append(v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
  } else {
    AppendNumber(v, out);  // shortest text that reads back as the same value
  }
}

bool AppendMessage(const Message& m, std::string* out);

// One value of `f` (element `index` of a repeated field, or the singular value at -1).
bool AppendValue(const Message& m, const FieldDescriptor* f, int index, std::string* out) {
  const Reflection* r = m.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      AppendNumber(rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f), out);
      return true;
    case FieldDescriptor::CPPTYPE_UINT32:
      AppendNumber(rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f), out);
      return true;
    case FieldDescriptor::CPPTYPE_INT64:
      out->push_back('"');
      AppendNumber(rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f), out);
      out->push_back('"');
      return true;
    case FieldDescriptor::CPPTYPE_UINT64:
      out->push_back('"');
      AppendNumber(rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f), out);
      out->push_back('"');
      return true;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      AppendFloating(rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f), out);
      return true;
    case FieldDescriptor::CPPTYPE_FLOAT:
      AppendFloating(rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f), out);
      return true;
    case FieldDescriptor::CPPTYPE_BOOL:
      out->append((rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f)) ? "true" : "false");
      return true;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const int number = rep ? r->GetRepeatedEnumValue(m, f, index) : r->GetEnumValue(m, f);
      const EnumValueDescriptor* v = f->enum_type()->FindValueByNumber(number);
      if (v != nullptr) {
        AppendString(v->name(), out);
      } else {
        AppendNumber(number, out);
      }
      return true;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      if (f->type() == FieldDescriptor::TYPE_BYTES) return false;  // base64: protobuf's printer
      std::string scratch;
      const std::string& s = rep ? r->GetRepeatedStringReference(m, f, index, &scratch)
                                 : r->GetStringReference(m, f, &scratch);
      AppendString(s, out);
      return true;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return AppendMessage(rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f), out);
  }
  return false;
}

// The value of field `f` of `m` (a set field: ListFields lists it): an object for a map, an
// array for a repeated field, else the one value.
bool AppendFieldValue(const Message& m, const FieldDescriptor* f, std::string* out) {
  if (f->is_extension()) return false;
  const Reflection* r = m.GetReflection();
  if (f->is_map()) {
    const FieldDescriptor* key = f->message_type()->map_key();
    const FieldDescriptor* value = f->message_type()->map_value();
    if (key->cpp_type() != FieldDescriptor::CPPTYPE_STRING) return false;
    out->push_back('{');
    const int n = r->FieldSize(m, f);
    for (int i = 0; i < n; ++i) {
      const Message& entry = r->GetRepeatedMessage(m, f, i);
      if (i > 0) out->push_back(',');
      std::string scratch;
      AppendString(entry.GetReflection()->GetStringReference(entry, key, &scratch), out);
      out->push_back(':');
      if (!AppendValue(entry, value, -1, out)) return false;
    }
    out->push_back('}');
    return true;
  }
  if (f->is_repeated()) {
    out->push_back('[');
    const int n = r->FieldSize(m, f);
    for (int i = 0; i < n; ++i) {
      if (i > 0) out->push_back(',');
      if (!AppendValue(m, f, i, out)) return false;
    }
    out->push_back(']');
    return true;
  }
  return AppendValue(m, f, -1, out);
}

bool AppendMessage(const Message& m, std::string* out) {
  const Descriptor* d = m.GetDescriptor();
  if (IsWellKnown(d)) return false;
  std::vector<const FieldDescriptor*> fields;
  m.GetReflection()->ListFields(m, &fields);
  out->push_back('{');
  bool first = true;
  for (const FieldDescriptor* f : fields) {
    if (!first) out->push_back(',');
    first = false;
    AppendString(f->name(), out);
    out->push_back(':');
    if (!AppendFieldValue(m, f, out)) return false;
  }
  out->push_back('}');
  return true;
}

// Whether ListFields lists `f` of `m` (and AppendMessage writes it).
bool IsSet(const Message& m, const FieldDescriptor* f) {
  const Reflection* r = m.GetReflection();
  return f->is_repeated() ? r->FieldSize(m, f) > 0 : r->HasField(m, f);
}

// The reader. Every method returns false on malformed input or a value it does not take, and
// the caller falls back to protobuf's parser (which says what is wrong).
class Reader {
 public:
  explicit Reader(std::string_view text) : s_(text) {}

  bool Document(Message* m) {
    if (!Object(m)) return false;
    Space();
    return i_ == s_.size();
  }

  // A JsonDelta's object over the message it was written against (see MergeDeltaJson): each
  // field it names replaces the message's, but `nested`, when both have it, is merged field by
  // field the same way.
  bool Delta(Message* m, const FieldDescriptor* nested) {
    replace_ = true;
    nested_ = nested;
    return Document(m);
  }

 private:
  void Space() {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) {
      ++i_;
    }
  }
  bool Eat(char c) {
    Space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  char Peek() {
    Space();
    return i_ < s_.size() ? s_[i_] : '\0';
  }
  bool Literal(std::string_view word) {
    Space();
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }
  bool Hex4(uint32_t* v) {
    if (i_ + 4 > s_.size()) return false;
    *v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      *v <<= 4;
      if (c >= '0' && c <= '9') {
        *v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        *v |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        *v |= c - 'A' + 10;
      } else {
        return false;
      }
    }
    return true;
  }
  bool String(std::string* out) {
    out->clear();
    if (!Eat('"')) return false;
    while (i_ < s_.size()) {
      // Copy the run up to the next quote or backslash in one piece.
      size_t j = i_;
      while (j < s_.size() && s_[j] != '"' && s_[j] != '\\') {
        if (static_cast<unsigned char>(s_[j]) < 0x20) return false;
        ++j;
      }
      out->append(s_.data() + i_, j - i_);
      i_ = j;
      if (i_ >= s_.size()) return false;
      if (s_[i_++] == '"') return true;
      if (i_ >= s_.size()) return false;
      const char e = s_[i_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xd800 && cp < 0xdc00) {  // a surrogate pair
            uint32_t low;
            if (s_.substr(i_, 2) != "\\u") return false;
            i_ += 2;
            if (!Hex4(&low) || low < 0xdc00 || low >= 0xe000) return false;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          } else if (cp >= 0xdc00 && cp < 0xe000) {
            return false;
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }
  // The text of a JSON number, checked for JSON's grammar.
  bool NumberText(std::string_view* text) {
    Space();
    const size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    auto digits = [&] {
      const size_t from = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ > from;
    };
    if (!digits()) return false;
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!digits()) return false;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digits()) return false;
    }
    *text = s_.substr(start, i_ - start);
    return true;
  }
  // Skips any value (an unknown field's).
  bool Skip(int depth = 0) {
    if (depth > 64) return false;
    switch (Peek()) {
      case '{': {
        Eat('{');
        if (Eat('}')) return true;
        std::string key;
        do {
          if (!String(&key) || !Eat(':') || !Skip(depth + 1)) return false;
        } while (Eat(','));
        return Eat('}');
      }
      case '[':
        Eat('[');
        if (Eat(']')) return true;
        do {
          if (!Skip(depth + 1)) return false;
        } while (Eat(','));
        return Eat(']');
      case '"': {
        std::string ignored;
        return String(&ignored);
      }
      case 't':
        return Literal("true");
      case 'f':
        return Literal("false");
      case 'n':
        return Literal("null");
      default: {
        std::string_view t;
        return NumberText(&t);
      }
    }
  }

  // A number or a string holding one (protobuf takes both for every numeric field).
  bool NumericText(std::string_view* text, std::string* holder) {
    if (Peek() == '"') {
      if (!String(holder)) return false;
      *text = *holder;
      return !text->empty();
    }
    return NumberText(text);
  }
  template <typename T>
  bool Integer(T* v) {
    std::string_view t;
    std::string holder;
    if (!NumericText(&t, &holder)) return false;
    auto r = std::from_chars(t.data(), t.data() + t.size(), *v);
    if (r.ec == std::errc() && r.ptr == t.data() + t.size()) return true;
    // 1.0 and 1e3 are integers too, if exactly integral and in range.
    // absl::from_chars, not std::: Apple's libc++ (the laptop) has no floating-point
    // std::from_chars before libc++ 20 (scripts/check-includes refuses it).
    double d;
    auto rd = absl::from_chars(t.data(), t.data() + t.size(), d);
    if (rd.ec != std::errc() || rd.ptr != t.data() + t.size()) return false;
    const double hi = std::ldexp(1.0, std::numeric_limits<T>::digits);  // 2^31, 2^32, 2^63, 2^64
    const double lo = std::is_signed_v<T> ? -hi : 0.0;
    if (d != std::floor(d) || d < lo || d >= hi) return false;
    *v = static_cast<T>(d);
    return true;
  }
  template <typename T>
  bool Floating(T* v) {
    std::string_view t;
    std::string holder;
    const bool quoted = Peek() == '"';
    if (!NumericText(&t, &holder)) return false;
    if (quoted) {
      if (t == "NaN") {
        *v = std::numeric_limits<T>::quiet_NaN();
        return true;
      }
      if (t == "Infinity" || t == "-Infinity") {
        *v = t[0] == '-' ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
        return true;
      }
    }
    double d;
    auto r = absl::from_chars(t.data(), t.data() + t.size(), d);
    if (r.ec != std::errc() || r.ptr != t.data() + t.size() || !std::isfinite(d)) return false;
    if constexpr (std::is_same_v<T, float>) {
      if (std::fabs(d) > std::numeric_limits<float>::max()) return false;
    }
    *v = static_cast<T>(d);
    return true;
  }

  // One value for field `f` of `m`: added to a repeated field, or set on a singular one.
  bool Value(Message* m, const FieldDescriptor* f, bool add, int depth) {
    const Reflection* r = m->GetReflection();
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32: {
        int32_t v;
        if (!Integer(&v)) return false;
        add ? r->AddInt32(m, f, v) : r->SetInt32(m, f, v);
        return true;
      }
      case FieldDescriptor::CPPTYPE_UINT32: {
        uint32_t v;
        if (!Integer(&v)) return false;
        add ? r->AddUInt32(m, f, v) : r->SetUInt32(m, f, v);
        return true;
      }
      case FieldDescriptor::CPPTYPE_INT64: {
        int64_t v;
        if (!Integer(&v)) return false;
        add ? r->AddInt64(m, f, v) : r->SetInt64(m, f, v);
        return true;
      }
      case FieldDescriptor::CPPTYPE_UINT64: {
        uint64_t v;
        if (!Integer(&v)) return false;
        add ? r->AddUInt64(m, f, v) : r->SetUInt64(m, f, v);
        return true;
      }
      case FieldDescriptor::CPPTYPE_DOUBLE: {
        double v;
        if (!Floating(&v)) return false;
        add ? r->AddDouble(m, f, v) : r->SetDouble(m, f, v);
        return true;
      }
      case FieldDescriptor::CPPTYPE_FLOAT: {
        float v;
        if (!Floating(&v)) return false;
        add ? r->AddFloat(m, f, v) : r->SetFloat(m, f, v);
        return true;
      }
      case FieldDescriptor::CPPTYPE_BOOL: {
        bool v;
        if (Literal("true")) {
          v = true;
        } else if (Literal("false")) {
          v = false;
        } else {
          return false;
        }
        add ? r->AddBool(m, f, v) : r->SetBool(m, f, v);
        return true;
      }
      case FieldDescriptor::CPPTYPE_ENUM: {
        int number;
        if (Peek() == '"') {
          std::string name;
          if (!String(&name)) return false;
          const EnumValueDescriptor* v = f->enum_type()->FindValueByName(name);
          if (v == nullptr) return false;  // protobuf decides what an unknown name means
          number = v->number();
        } else if (!Integer(&number)) {
          return false;
        }
        add ? r->AddEnumValue(m, f, number) : r->SetEnumValue(m, f, number);
        return true;
      }
      case FieldDescriptor::CPPTYPE_STRING: {
        if (f->type() == FieldDescriptor::TYPE_BYTES) return false;
        std::string v;
        if (!String(&v)) return false;
        add ? r->AddString(m, f, std::move(v)) : r->SetString(m, f, std::move(v));
        return true;
      }
      case FieldDescriptor::CPPTYPE_MESSAGE:
        return Object(add ? r->AddMessage(m, f) : r->MutableMessage(m, f), depth + 1);
    }
    return false;
  }

  bool Object(Message* m, int depth = 0) {
    if (depth > 64 || IsWellKnown(m->GetDescriptor())) return false;
    if (!Eat('{')) return false;
    if (Eat('}')) return true;
    const Descriptor* d = m->GetDescriptor();
    const Reflection* r = m->GetReflection();
    std::string key;
    do {
      if (!String(&key) || !Eat(':')) return false;
      const FieldDescriptor* f = d->FindFieldByName(key);
      if (f == nullptr)
        f = d->FindFieldByCamelcaseName(key);  // lowerCamelCase, as protobuf prints by default
      if (f == nullptr) {
        if (!Skip()) return false;  // unknown fields are ignored, as the store always asked
        continue;
      }
      if (Literal("null")) {  // null: the field's default
        r->ClearField(m, f);
        continue;
      }
      if (replace_) {
        if (depth == 0 && f == nested_ && r->HasField(*m, f) && Peek() == '{') {
          if (!Object(r->MutableMessage(m, f), depth + 1)) return false;
          continue;
        }
        r->ClearField(m, f);  // jsonb `||`: the delta's value, not a merge into the base's
      }
      if (f->is_map()) {
        const FieldDescriptor* kf = f->message_type()->map_key();
        const FieldDescriptor* vf = f->message_type()->map_value();
        if (kf->cpp_type() != FieldDescriptor::CPPTYPE_STRING) return false;
        if (!Eat('{')) return false;
        if (Eat('}')) continue;
        std::string map_key;
        do {
          if (!String(&map_key) || !Eat(':')) return false;
          Message* entry = r->AddMessage(m, f);
          entry->GetReflection()->SetString(entry, kf, map_key);
          if (!Value(entry, vf, false, depth)) return false;
        } while (Eat(','));
        if (!Eat('}')) return false;
      } else if (f->is_repeated()) {
        if (!Eat('[')) return false;
        if (Eat(']')) continue;
        do {
          if (!Value(m, f, true, depth)) return false;
        } while (Eat(','));
        if (!Eat(']')) return false;
      } else if (!Value(m, f, false, depth)) {
        return false;
      }
    } while (Eat(','));
    return Eat('}');
  }

  std::string_view s_;
  size_t i_ = 0;
  bool replace_ = false;                     // Delta: a field read replaces what was there
  const FieldDescriptor* nested_ = nullptr;  // Delta: the field merged a level down
};

}  // namespace

bool AppendMessageJson(const Message& message, std::string* out) {
  const size_t size = out->size();
  if (AppendMessage(message, out)) return true;
  out->resize(size);
  return false;
}

bool MergeMessageJson(std::string_view json, Message* message) {
  return Reader(json).Document(message);
}

bool MergeDeltaJson(std::string_view delta, std::string_view nested, Message* message) {
  return Reader(delta).Delta(message,
                             message->GetDescriptor()->FindFieldByName(std::string(nested)));
}

std::optional<JsonDelta> JsonDelta::Make(const Message& base, std::string_view nested) {
  JsonDelta delta;
  const Descriptor* type = base.GetDescriptor();
  if (IsWellKnown(type) || !delta.top_.Fill(base)) return std::nullopt;
  delta.nested_ = type->FindFieldByName(std::string(nested));
  if (delta.nested_ != nullptr) {
    if (delta.nested_->is_repeated() ||
        delta.nested_->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE ||
        IsWellKnown(delta.nested_->message_type())) {
      return std::nullopt;
    }
    const Message& sub = base.GetReflection()->GetMessage(base, delta.nested_);
    if (!delta.inner_.Fill(sub)) return std::nullopt;
  }
  return delta;
}

bool JsonDelta::Level::Fill(const Message& base) {
  type = base.GetDescriptor();
  values.assign(type->field_count(), std::nullopt);
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* f = type->field(i);
    if (!IsSet(base, f)) continue;
    std::string text;
    if (!AppendFieldValue(base, f, &text)) return false;
    values[i] = std::move(text);
  }
  return true;
}

bool JsonDelta::AppendLevel(const Message& m, const Level& level, const FieldDescriptor* nested,
                            std::string* out) const {
  if (m.GetDescriptor() != level.type) return false;
  out->push_back('{');
  bool first = true;
  auto key = [&](const FieldDescriptor* f) {
    if (!first) out->push_back(',');
    first = false;
    AppendString(f->name(), out);
    out->push_back(':');
  };
  std::string value;
  for (int i = 0; i < level.type->field_count(); ++i) {
    const FieldDescriptor* f = level.type->field(i);
    const std::optional<std::string>& base = level.values[i];
    if (!IsSet(m, f)) {
      if (base) {
        key(f);
        out->append("null");
      }
      continue;
    }
    value.clear();
    if (f == nested && base) {
      if (!AppendLevel(m.GetReflection()->GetMessage(m, f), inner_, nullptr, &value)) {
        return false;
      }
      if (value == "{}") continue;  // the base's fields, all of them
    } else {
      if (!AppendFieldValue(m, f, &value)) return false;
      if (base && *base == value) continue;
    }
    key(f);
    out->append(value);
  }
  out->push_back('}');
  return true;
}

bool JsonDelta::Append(const Message& message, std::string* out) const {
  const size_t size = out->size();
  if (AppendLevel(message, top_, nested_, out)) return true;
  out->resize(size);
  return false;
}

}  // namespace ablate::server::pg
