// Label encoding of class columns.
#ifndef TRAIND_DATA_LABELS_H_
#define TRAIND_DATA_LABELS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace traind::data {

struct LabelEncoding {
  std::vector<std::string> classes;  // distinct values, ascending
  std::vector<int32_t> codes;        // codes[i]: index of values[i] in classes
};

// Encodes class labels like scikit-learn's LabelEncoder: the classes are the
// distinct values sorted ascending, numerically when every value parses as a
// finite number ("2" < "10"), otherwise lexicographically by bytes. Distinct
// strings stay distinct classes even when numerically equal ("1", "1.0"); such
// ties are ordered lexicographically.
LabelEncoding EncodeLabels(const std::vector<std::string>& values);

// True when `text` (surrounding ASCII spaces and tabs allowed, a leading '+'
// allowed) is a finite decimal number; stores it in `*value`.
bool ParseFiniteDouble(const std::string& text, double* value);

}  // namespace traind::data

#endif  // TRAIND_DATA_LABELS_H_
