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
// \n \r \t as such, other control characters as \u00XX, valid UTF-8 as it
// is; a byte that is not valid UTF-8 as the text \xFF (so that the JSON
// is valid UTF-8 whatever `s` holds).
std::string JsonQuote(absl::string_view s);

}  // namespace traind

#endif  // TRAIND_BASE_JSON_H_
