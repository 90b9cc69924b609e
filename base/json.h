// JSON text traind writes by hand (error bodies, ONNX metadata): one way to
// quote a string.
//
// Thread-safety: pure functions.
#ifndef TRAIND_BASE_JSON_H_
#define TRAIND_BASE_JSON_H_

#include <string>

#include "absl/strings/string_view.h"

namespace traind {

// The JSON string literal of `s`, quotes included: '"' and '\' escaped,
// \n \r \t as such, other control characters as \u00XX; every other byte
// (valid UTF-8 included) as it is.
std::string JsonQuote(absl::string_view s);

}  // namespace traind

#endif  // TRAIND_BASE_JSON_H_
