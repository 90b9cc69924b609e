#include "client/json_numbers.h"

#include <cstddef>
#include <vector>

namespace traind::client {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// Where the scanner is: an object of a message (its fields by name), an
// object of a map field (every value is the map's value type), or an array
// of a repeated field's elements.
struct Frame {
  enum Kind { kMessage, kMap, kArray } kind = kMessage;
  const Descriptor* message = nullptr;       // kMessage (null: unknown)
  const FieldDescriptor* field = nullptr;    // kMap: the map field; kArray: the element field
  const FieldDescriptor* pending = nullptr;  // objects: the field of the value after ':'
  bool expect_key = true;
};

bool IsInt64(const FieldDescriptor* f) {
  return f != nullptr && (f->cpp_type() == FieldDescriptor::CPPTYPE_INT64 ||
                          f->cpp_type() == FieldDescriptor::CPPTYPE_UINT64);
}

// The field whose value comes next in the top frame (null: unknown).
const FieldDescriptor* ValueField(const std::vector<Frame>& stack) {
  if (stack.empty()) return nullptr;
  const Frame& top = stack.back();
  if (top.kind == Frame::kArray) return top.field;
  return top.pending;
}

// The text of a JSON string token starting at json[i] == '"': its end (one
// past the closing quote) and whether its content is -?[0-9]+.
size_t StringEnd(const std::string& json, size_t i, bool* integer) {
  size_t j = i + 1;
  bool digits = j < json.size() && (json[j] == '-' || (json[j] >= '0' && json[j] <= '9'));
  bool any_digit = false;
  for (; j < json.size() && json[j] != '"'; ++j) {
    if (json[j] == '\\') {
      digits = false;
      ++j;
      continue;
    }
    if (json[j] >= '0' && json[j] <= '9') {
      any_digit = true;
    } else if (!(json[j] == '-' && j == i + 1)) {
      digits = false;
    }
  }
  *integer = digits && any_digit;
  return j < json.size() ? j + 1 : j;
}

// Whether the integer text fits a double exactly (|v| <= 2^53).
bool Exact(const std::string& text) {
  const bool negative = !text.empty() && text[0] == '-';
  const std::string digits = negative ? text.substr(1) : text;
  if (digits.size() > 1 && digits[0] == '0') return false;  // not a canonical integer
  constexpr char kMax[] = "9007199254740992";
  if (digits.size() != sizeof(kMax) - 1) return digits.size() < sizeof(kMax) - 1;
  return digits <= kMax;
}

}  // namespace

std::string Int64sAsNumbers(const std::string& json, const Descriptor* root) {
  std::string out;
  out.reserve(json.size());
  std::vector<Frame> stack;
  for (size_t i = 0; i < json.size();) {
    const char c = json[i];
    if (c == '{' || c == '[') {
      const FieldDescriptor* f = ValueField(stack);
      Frame frame;
      if (c == '[') {
        frame.kind = Frame::kArray;
        frame.field = f;
      } else if (stack.empty()) {
        frame.message = root;
      } else if (f != nullptr && f->is_map()) {
        frame.kind = Frame::kMap;
        frame.field = f;
      } else if (f != nullptr && f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        frame.message = f->message_type();
      }
      stack.push_back(frame);
      out.push_back(c);
      ++i;
    } else if (c == '}' || c == ']') {
      if (!stack.empty()) stack.pop_back();
      out.push_back(c);
      ++i;
    } else if (c == ',' || c == ':') {
      if (!stack.empty() && stack.back().kind != Frame::kArray) {
        stack.back().expect_key = c == ',';
        if (c == ',') stack.back().pending = nullptr;
      }
      out.push_back(c);
      ++i;
    } else if (c == '"') {
      bool integer = false;
      const size_t end = StringEnd(json, i, &integer);
      if (!stack.empty() && stack.back().kind != Frame::kArray && stack.back().expect_key) {
        Frame& top = stack.back();
        const std::string key = json.substr(i + 1, end - i - 2);
        if (top.kind == Frame::kMap) {
          top.pending = top.field->message_type()->map_value();
        } else {
          top.pending = top.message != nullptr ? top.message->FindFieldByName(key) : nullptr;
        }
        out.append(json, i, end - i);
      } else {
        const std::string content = json.substr(i + 1, end - i - 2);
        if (integer && IsInt64(ValueField(stack)) && Exact(content)) {
          out += content;
        } else {
          out.append(json, i, end - i);
        }
      }
      i = end;
    } else {
      out.push_back(c);
      ++i;
    }
  }
  return out;
}

}  // namespace traind::client
