#include "spec/loader.h"

#include <sys/stat.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"

namespace traind::spec {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;

constexpr int kMaxDepth = 64;
// The converted spec is bounded by kMaxSpecNodes and kMaxSpecBytes
// (loader.h): YAML aliases repeat what their anchor names, so a short text
// can stand for an enormous tree ("billion laughs"), and specs are parsed by
// the server from any client.

// Where a value sits in the YAML text, by the JSON path protobuf reports
// ("model.layers[0].dense.units"). Keys are recorded both as written and in
// snake_case, since protobuf names fields by their proto names.
using MarkIndex = std::map<std::string, YAML::Mark>;

std::string LineSuffix(const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0) return "";
  return absl::StrCat(" (line ", mark.line + 1, ", column ", mark.column + 1, ")");
}

std::string ToSnakeCase(absl::string_view name) {
  std::string out;
  for (char c : name) {
    if (absl::ascii_isupper(static_cast<unsigned char>(c))) {
      out.push_back('_');
      out.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

void AppendJsonString(absl::string_view s, std::string* out) {
  out->push_back('"');
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
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
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out->append(buf);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

bool AllOf(std::string_view s, bool (*pred)(unsigned char)) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!pred(static_cast<unsigned char>(c))) return false;
  }
  return true;
}
bool IsDigit(unsigned char c) { return c >= '0' && c <= '9'; }
bool IsOctal(unsigned char c) { return c >= '0' && c <= '7'; }
bool IsHex(unsigned char c) { return absl::ascii_isxdigit(c); }

std::string StripLeadingZeros(std::string_view digits) {
  size_t i = 0;
  while (i + 1 < digits.size() && digits[i] == '0') ++i;
  return std::string(digits.substr(i));
}

// A YAML 1.2 core-schema number as JSON number text, or nullopt.
std::optional<std::string> JsonNumber(std::string_view s) {
  // 0x.. and 0o.. integers.
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) {
    std::string_view digits = s.substr(2);
    bool hex = s[1] == 'x';
    if (!AllOf(digits, hex ? IsHex : IsOctal)) return std::nullopt;
    errno = 0;
    unsigned long long v = std::strtoull(std::string(digits).c_str(), nullptr, hex ? 16 : 8);
    if (errno == ERANGE) return std::nullopt;
    return std::to_string(v);
  }
  // [-+]? ( \.[0-9]+ | [0-9]+ ( \.[0-9]* )? ) ( [eE] [-+]? [0-9]+ )?
  std::string out;
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) {
    if (s[i] == '-') out.push_back('-');
    ++i;
  }
  size_t int_begin = i;
  while (i < s.size() && IsDigit(s[i])) ++i;
  std::string_view int_part = s.substr(int_begin, i - int_begin);
  std::string_view frac_part;
  bool has_dot = false;
  if (i < s.size() && s[i] == '.') {
    has_dot = true;
    ++i;
    size_t frac_begin = i;
    while (i < s.size() && IsDigit(s[i])) ++i;
    frac_part = s.substr(frac_begin, i - frac_begin);
  }
  if (int_part.empty() && frac_part.empty()) return std::nullopt;
  if (has_dot && int_part.empty() && frac_part.empty()) return std::nullopt;
  out += int_part.empty() ? std::string("0") : StripLeadingZeros(int_part);
  if (!frac_part.empty()) {
    out += ".";
    out += frac_part;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    std::string exp = "e";
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) exp.push_back(s[i++]);
    size_t exp_begin = i;
    while (i < s.size() && IsDigit(s[i])) ++i;
    if (i == exp_begin) return std::nullopt;
    exp.append(s.substr(exp_begin, i - exp_begin));
    out += exp;
  }
  if (i != s.size()) return std::nullopt;
  return out;
}

enum class ScalarKind { kString, kPlain, kBool, kNull, kNumber };

// Converts a scalar node to JSON text, following the core schema for plain
// scalars and keeping quoted ones as strings.
void AppendScalar(const YAML::Node& node, std::string* out) {
  const std::string& tag = node.Tag();
  const std::string& s = node.Scalar();
  if (tag == "!" || tag == "tag:yaml.org,2002:str") {
    AppendJsonString(s, out);
    return;
  }
  // Plain scalar ("?"), or an explicit !!int/!!float/!!bool/!!null, or a tag
  // we do not know: resolve by content.
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") {
    out->append("null");
  } else if (s == "true" || s == "True" || s == "TRUE") {
    out->append("true");
  } else if (s == "false" || s == "False" || s == "FALSE") {
    out->append("false");
  } else if (s == ".inf" || s == ".Inf" || s == ".INF" || s == "+.inf" || s == "+.Inf" ||
             s == "+.INF") {
    out->append("\"Infinity\"");
  } else if (s == "-.inf" || s == "-.Inf" || s == "-.INF") {
    out->append("\"-Infinity\"");
  } else if (s == ".nan" || s == ".NaN" || s == ".NAN") {
    out->append("\"NaN\"");
  } else if (std::optional<std::string> number = JsonNumber(s)) {
    out->append(*number);
  } else {
    AppendJsonString(s, out);
  }
}

// Whether `path` (proto names, "[i]" indexes: "model.layers[0].conv2d.kernel")
// names a repeated field of numbers of JobSpec itself (not one element).
bool IsRepeatedNumberField(const std::string& path) {
  const google::protobuf::Descriptor* message = traind::v1::JobSpec::descriptor();
  const google::protobuf::FieldDescriptor* field = nullptr;
  bool element = false;
  for (absl::string_view segment : absl::StrSplit(path, '.')) {
    if (message == nullptr) return false;
    const size_t bracket = segment.find('[');
    element = bracket != absl::string_view::npos;
    if (element) segment = segment.substr(0, bracket);
    field = message->FindFieldByName(std::string(segment));
    if (field == nullptr) return false;
    message = field->message_type();
  }
  if (field == nullptr || element || !field->is_repeated()) return false;
  switch (field->cpp_type()) {
    case google::protobuf::FieldDescriptor::CPPTYPE_INT32:
    case google::protobuf::FieldDescriptor::CPPTYPE_INT64:
    case google::protobuf::FieldDescriptor::CPPTYPE_UINT32:
    case google::protobuf::FieldDescriptor::CPPTYPE_UINT64:
    case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE:
    case google::protobuf::FieldDescriptor::CPPTYPE_FLOAT:
      return true;
    default:
      return false;
  }
}

class YamlToJson {
 public:
  explicit YamlToJson(MarkIndex* marks) : marks_(marks) {}

  // Aliases (*a) refer to nodes that appear elsewhere: the JSON repeats
  // them, so a few lines of nested aliases would expand to gigabytes. The
  // conversion counts the nodes it writes and the JSON's size, and stops at
  // kMaxSpecNodes / kMaxSpecBytes.
  absl::Status Convert(const YAML::Node& node, const std::string& path, int depth,
                       std::string* out) {
    if (depth > kMaxDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": nested too deeply", LineSuffix(node.Mark())));
    }
    if (++nodes_ > kMaxSpecNodes || out->size() > kMaxSpecBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path.empty() ? "" : path + ": ", "the spec expands to more than ",
                       kMaxSpecNodes, " values or ", kMaxSpecBytes,
                       " bytes (YAML aliases are expanded)", LineSuffix(node.Mark())));
    }
    switch (node.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        out->append("null");
        return absl::OkStatus();
      case YAML::NodeType::Scalar:
        // One number where the spec takes a list of numbers is a list of
        // one ("kernel: 3" is "kernel: [3]").
        if (IsRepeatedNumberField(path)) {
          out->push_back('[');
          AppendScalar(node, out);
          out->push_back(']');
          return absl::OkStatus();
        }
        AppendScalar(node, out);
        return absl::OkStatus();
      case YAML::NodeType::Sequence: {
        out->push_back('[');
        for (size_t i = 0; i < node.size(); ++i) {
          if (i > 0) out->push_back(',');
          std::string child_path = absl::StrCat(path, "[", i, "]");
          Record(child_path, node[i].Mark());
          absl::Status s = Convert(node[i], child_path, depth + 1, out);
          if (!s.ok()) return s;
        }
        out->push_back(']');
        return absl::OkStatus();
      }
      case YAML::NodeType::Map: {
        out->push_back('{');
        std::set<std::string> seen;
        bool first = true;
        for (const auto& kv : node) {
          const YAML::Node& key = kv.first;
          if (!key.IsScalar()) {
            return absl::InvalidArgumentError(absl::StrCat(path.empty() ? "" : path + ": ",
                                                           "mapping keys must be plain names",
                                                           LineSuffix(key.Mark())));
          }
          const std::string& name = key.Scalar();
          std::string child_path = path.empty() ? name : path + "." + name;
          if (!seen.insert(name).second) {
            return absl::InvalidArgumentError(
                absl::StrCat(child_path, ": duplicate key", LineSuffix(key.Mark())));
          }
          if (!first) out->push_back(',');
          first = false;
          Record(child_path, key.Mark());
          std::string snake = ToSnakeCase(name);
          std::string snake_path = path.empty() ? snake : path + "." + snake;
          Record(snake_path, key.Mark());
          AppendJsonString(name, out);
          out->push_back(':');
          // Children are addressed by protobuf with proto (snake_case) names.
          absl::Status s = Convert(kv.second, snake_path, depth + 1, out);
          if (!s.ok()) return s;
        }
        out->push_back('}');
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

 private:
  void Record(const std::string& path, const YAML::Mark& mark) {
    if (marks_ != nullptr) marks_->emplace(path, mark);
  }

  MarkIndex* marks_;
  int64_t nodes_ = 0;
};

std::string LookupLine(const MarkIndex& marks, const std::string& path) {
  auto it = marks.find(path);
  if (it == marks.end()) return "";
  return LineSuffix(it->second);
}

// "TYPE_INT32" -> "int32"; "type.googleapis.com/traind.v1.Activation" ->
// "traind.v1.Activation".
std::string ReadableType(std::string_view type) {
  constexpr std::string_view kUrlPrefix = "type.googleapis.com/";
  if (type.starts_with("TYPE_")) {
    return absl::AsciiStrToLower(std::string(type.substr(5)));
  }
  if (type.starts_with(kUrlPrefix)) {
    return std::string(type.substr(kUrlPrefix.size()));
  }
  return std::string(type);
}

// Turns one of protobuf's JSON parse errors into "<path>: <what>" with the
// YAML position of the offending key when known.
std::string ReadableJsonError(absl::string_view message, const MarkIndex& marks) {
  std::string msg(message);
  // "(model.layers[0].dense) unit: Cannot find field." or, at the top level,
  // "unit: Cannot find field."
  constexpr std::string_view kNoField = ": Cannot find field.";
  if (msg.ends_with(kNoField)) {
    std::string head = msg.substr(0, msg.size() - kNoField.size());
    std::string parent, field = head;
    if (!head.empty() && head[0] == '(') {
      size_t close = head.find(") ");
      if (close != std::string::npos) {
        parent = head.substr(1, close - 1);
        field = head.substr(close + 2);
      }
    }
    std::string full = parent.empty() ? field : parent + "." + field;
    return absl::StrCat(parent.empty() ? "" : parent + ": ", "unknown field \"", field, "\"",
                        LookupLine(marks, full));
  }
  // "(path): invalid value X for type T"
  if (!msg.empty() && msg[0] == '(') {
    size_t close = msg.find("): ");
    if (close != std::string::npos) {
      std::string path = msg.substr(1, close - 1);
      std::string rest = msg.substr(close + 3);
      constexpr std::string_view kInvalid = "invalid value ";
      constexpr std::string_view kForType = " for type ";
      size_t for_type = rest.rfind(kForType);
      if (rest.starts_with(kInvalid) && for_type != std::string::npos) {
        std::string value = rest.substr(kInvalid.size(), for_type - kInvalid.size());
        std::string type = ReadableType(rest.substr(for_type + kForType.size()));
        std::string what;
        if (type == "oneof") {
          // "oneof field 'kind' is already set. Cannot set 'sgd'"
          what = absl::StrCat("only one of its alternatives may be set (", value, ")");
        } else if (const auto* enum_type =
                       google::protobuf::DescriptorPool::generated_pool()->FindEnumTypeByName(
                           type)) {
          std::vector<std::string> names;
          for (int i = 0; i < enum_type->value_count(); ++i) {
            std::string name = enum_type->value(i)->name();
            if (name.ends_with("_UNSPECIFIED")) continue;
            names.push_back(absl::AsciiStrToLower(name));
          }
          what = absl::StrCat("invalid value ", value,
                              " (expected one of: ", absl::StrJoin(names, ", "), ")");
        } else if (google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(
                       type) != nullptr) {
          what = absl::StrCat("invalid value ", value, " (expected a mapping)");
        } else {
          what = absl::StrCat("invalid value ", value, " (expected ", type, ")");
        }
        return absl::StrCat(path, ": ", what, LookupLine(marks, path));
      }
      return absl::StrCat(path, ": ", rest, LookupLine(marks, path));
    }
  }
  // ": invalid value Starting an object on a scalar field for type name"
  constexpr std::string_view kObjectOnScalar =
      "invalid value Starting an object on a scalar field for type ";
  size_t pos = msg.find(kObjectOnScalar);
  if (pos != std::string::npos) {
    std::string field = msg.substr(pos + kObjectOnScalar.size());
    return absl::StrCat(field, ": expected a single value, not a mapping");
  }
  // "data: Proto field is not repeating, cannot start list."
  constexpr std::string_view kNotRepeating = ": Proto field is not repeating, cannot start list.";
  if (msg.ends_with(kNotRepeating)) {
    std::string path = msg.substr(0, msg.size() - kNotRepeating.size());
    return absl::StrCat(path, ": expected a single value, not a list", LookupLine(marks, path));
  }
  if (msg.starts_with(": ")) msg = msg.substr(2);
  return msg;
}

// JSON text -> JobSpec, with readable errors (without the source prefix).
absl::StatusOr<traind::v1::JobSpec> JsonToSpec(const std::string& json, const MarkIndex& marks) {
  traind::v1::JobSpec spec;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  options.case_insensitive_enum_parsing = true;
  auto status = google::protobuf::util::JsonStringToMessage(json, &spec, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(ReadableJsonError(std::string(status.message()), marks));
  }
  return spec;
}

absl::Status Prefixed(absl::string_view prefix, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(prefix, ": ", status.message()));
}

struct PathSegment {
  std::string name;
  std::vector<int64_t> indexes;  // kAppendIndex: "[+]"
};

// "[+]": the element after the last one, added.
constexpr int64_t kAppendIndex = -1;

absl::StatusOr<std::vector<PathSegment>> SplitPath(const std::string& path) {
  std::vector<PathSegment> segments;
  size_t i = 0;
  while (true) {
    PathSegment seg;
    while (i < path.size() && path[i] != '.' && path[i] != '[') {
      seg.name.push_back(path[i++]);
    }
    if (seg.name.empty()) {
      return absl::InvalidArgumentError("empty field name in path");
    }
    while (i < path.size() && path[i] == '[') {
      size_t close = path.find(']', i);
      if (close == std::string::npos) {
        return absl::InvalidArgumentError("missing ']' in path");
      }
      std::string digits = path.substr(i + 1, close - i - 1);
      if (digits == "+") {
        seg.indexes.push_back(kAppendIndex);
        i = close + 1;
        continue;
      }
      if (digits.empty() || !AllOf(digits, IsDigit) || digits.size() > 9) {
        return absl::InvalidArgumentError(absl::StrCat("bad index [", digits, "] in path"));
      }
      seg.indexes.push_back(std::stoll(digits));
      i = close + 1;
    }
    segments.push_back(std::move(seg));
    if (i == path.size()) break;
    if (path[i] != '.') {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected '", path.substr(i, 1), "' in path"));
    }
    ++i;
  }
  return segments;
}

const FieldDescriptor* FindField(const Descriptor* desc, const std::string& name) {
  const FieldDescriptor* field = desc->FindFieldByName(name);
  if (field == nullptr) field = desc->FindFieldByCamelcaseName(name);
  if (field == nullptr) {
    for (int i = 0; i < desc->field_count(); ++i) {
      if (desc->field(i)->json_name() == name) return desc->field(i);
    }
  }
  return field;
}

// Records where each document starts, for counting documents without
// building them.
class DocumentStarts final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
  std::vector<YAML::Mark> starts;
};

// The one document of `text`. Not YAML::LoadAll: yaml-cpp 0.7 loops forever,
// allocating a null document per turn, on some malformed streams (a lone
// ",": yaml-cpp#1040, fixed upstream after 0.7); so at most two documents
// are read here, and a second one that starts where the first did is the
// parser making no progress — a syntax error.
absl::StatusOr<YAML::Node> LoadOneDocument(const std::string& text, const std::string& source) {
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentStarts starts;
    while (starts.starts.size() < 2 && parser.HandleNextDocument(starts)) {
    }
    if (starts.starts.size() >= 2) {
      const YAML::Mark& first = starts.starts[0];
      const YAML::Mark& second = starts.starts[1];
      if (second.pos == first.pos) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": YAML syntax error: unexpected text", LineSuffix(second)));
      }
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": expected one YAML document, found more", LineSuffix(second)));
    }
    if (starts.starts.empty()) return YAML::Node();
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": YAML syntax error: ", e.msg, LineSuffix(e.mark)));
  }
}

}  // namespace

absl::StatusOr<traind::v1::JobSpec> ParseJobSpec(absl::string_view text,
                                                 absl::string_view source_name) {
  std::string source(source_name);
  if (text.size() > kMaxSpecBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the spec is ", text.size(), " bytes; a spec may hold at most ", kMaxSpecBytes));
  }
  absl::StatusOr<YAML::Node> doc = LoadOneDocument(std::string(text), source);
  if (!doc.ok()) return doc.status();
  if (!doc->IsDefined() || doc->IsNull()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": empty spec"));
  }
  const YAML::Node& root = *doc;
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected a mapping of spec fields (name, data, model, ...)",
                     LineSuffix(root.Mark())));
  }
  MarkIndex marks;
  std::string json;
  absl::Status converted = YamlToJson(&marks).Convert(root, "", 0, &json);
  if (!converted.ok()) return Prefixed(source, converted);
  absl::StatusOr<traind::v1::JobSpec> spec = JsonToSpec(json, marks);
  if (!spec.ok()) return Prefixed(source, spec.status());
  return spec;
}

absl::StatusOr<traind::v1::JobSpec> LoadJobSpecFile(const std::string& path) {
  // A regular file of at most kMaxSpecBytes: never a FIFO or a device that
  // blocks or never ends.
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    int err = errno;
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file (a spec is a YAML or JSON file)"));
  }
  if (st.st_size > static_cast<off_t>(kMaxSpecBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the spec is ", st.st_size, " bytes; a spec may hold at most ", kMaxSpecBytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    int err = errno;
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read: ", std::strerror(err)));
  }
  return ParseJobSpec(text.str(), path);
}

absl::Status SetJobSpecField(traind::v1::JobSpec* spec, absl::string_view path,
                             absl::string_view value) {
  std::string path_str(path);
  absl::StatusOr<std::vector<PathSegment>> segments = SplitPath(path_str);
  if (!segments.ok()) return Prefixed(path_str, segments.status());

  YAML::Node new_value;
  try {
    new_value = YAML::Load(std::string(value));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_str, ": YAML syntax error in value: ", e.msg));
  }

  // The spec as a YAML tree (through its JSON form, proto field names).
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  std::string current_json;
  auto printed = google::protobuf::util::MessageToJsonString(*spec, &current_json, print);
  if (!printed.ok()) {
    return absl::InternalError(std::string(printed.message()));
  }
  YAML::Node root = YAML::Load(current_json);
  if (!root.IsMap()) root = YAML::Node(YAML::NodeType::Map);

  const Descriptor* desc = traind::v1::JobSpec::descriptor();
  YAML::Node node = root;
  std::string walked;
  for (size_t s = 0; s < segments->size(); ++s) {
    const PathSegment& seg = (*segments)[s];
    const bool last = s + 1 == segments->size();
    const FieldDescriptor* field = desc == nullptr ? nullptr : FindField(desc, seg.name);
    if (field == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_str, ": unknown field \"", seg.name, "\"",
                       walked.empty() ? "" : absl::StrCat(" in ", walked)));
    }
    if (field->is_map()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_str, ": map fields cannot be set by path (", field->name(), ")"));
    }
    if (!seg.indexes.empty() && !field->is_repeated()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_str, ": ", field->name(), " is not a list"));
    }
    if (seg.indexes.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_str, ": ", field->name(), " has one index"));
    }
    walked = walked.empty() ? field->name() : walked + "." + field->name();
    if (const auto* oneof = field->real_containing_oneof()) {
      for (int i = 0; i < oneof->field_count(); ++i) {
        if (oneof->field(i) != field) node.remove(oneof->field(i)->name());
      }
    }
    const bool is_message = field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (!last && !is_message) {
      return absl::InvalidArgumentError(absl::StrCat(path_str, ": ", walked, " has no fields"));
    }
    if (!last && field->is_repeated() && seg.indexes.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_str, ": ", walked, " is a list: give an index, e.g. ", walked, "[0]"));
    }
    if (seg.indexes.empty()) {
      if (last) {
        node[field->name()] = new_value;
        break;
      }
      YAML::Node child = node[field->name()];
      if (!child.IsMap()) {
        node[field->name()] = YAML::Node(YAML::NodeType::Map);
        child = node[field->name()];
      }
      node.reset(child);
    } else {
      YAML::Node list = node[field->name()];
      if (!list.IsSequence()) {
        node[field->name()] = YAML::Node(YAML::NodeType::Sequence);
        list = node[field->name()];
      }
      // An index names an element that is there; "[+]" adds one after the
      // last (a typo past the end never grows the list silently).
      const int64_t size = static_cast<int64_t>(list.size());
      const int64_t index = seg.indexes[0] == kAppendIndex ? size : seg.indexes[0];
      if (seg.indexes[0] != kAppendIndex && index >= size) {
        const std::string has =
            size == 0
                ? absl::StrCat(walked, " is empty")
                : absl::StrCat(walked, " has ", size, size == 1 ? " element" : " elements",
                               size == 1 ? " ([0])" : absl::StrCat(" ([0] to [", size - 1, "])"));
        return absl::InvalidArgumentError(absl::StrCat(path_str, ": index ", index,
                                                       " is past the end (", has, "); write ",
                                                       walked, "[+] to append one"));
      }
      if (index == size) {
        list.push_back(is_message && !last ? YAML::Node(YAML::NodeType::Map) : YAML::Node());
      }
      walked = absl::StrCat(walked, "[", index, "]");
      if (last) {
        list[index] = new_value;
        break;
      }
      YAML::Node element = list[index];
      if (!element.IsMap()) {
        list[index] = YAML::Node(YAML::NodeType::Map);
        element = list[index];
      }
      node.reset(element);
    }
    desc = field->message_type();
  }

  std::string json;
  absl::Status converted = YamlToJson(nullptr).Convert(root, "", 0, &json);
  if (!converted.ok()) return Prefixed(path_str, converted);
  absl::StatusOr<traind::v1::JobSpec> updated = JsonToSpec(json, MarkIndex());
  if (!updated.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_str, "=", value, ": ", updated.status().message()));
  }
  *spec = *std::move(updated);
  return absl::OkStatus();
}

}  // namespace traind::spec
