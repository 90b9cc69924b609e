#include "data/labels.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>
#include <unordered_map>

namespace traind::data {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool ParseFiniteDouble(const std::string& text, double* value) {
  std::string_view s = Trim(text);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return false;
  *value = v;
  return true;
}

LabelEncoding EncodeLabels(const std::vector<std::string>& values) {
  LabelEncoding encoding;
  std::unordered_map<std::string, int32_t> index;
  for (const std::string& v : values) {
    if (index.emplace(v, 0).second) encoding.classes.push_back(v);
  }
  std::vector<double> numbers(encoding.classes.size());
  bool numeric = true;
  for (size_t i = 0; i < encoding.classes.size() && numeric; ++i) {
    numeric = ParseFiniteDouble(encoding.classes[i], &numbers[i]);
  }
  if (numeric) {
    std::vector<size_t> order(encoding.classes.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (numbers[a] != numbers[b]) return numbers[a] < numbers[b];
      return encoding.classes[a] < encoding.classes[b];
    });
    std::vector<std::string> sorted;
    sorted.reserve(order.size());
    for (size_t i : order) sorted.push_back(std::move(encoding.classes[i]));
    encoding.classes = std::move(sorted);
  } else {
    std::sort(encoding.classes.begin(), encoding.classes.end());
  }
  for (size_t i = 0; i < encoding.classes.size(); ++i) {
    index[encoding.classes[i]] = static_cast<int32_t>(i);
  }
  encoding.codes.reserve(values.size());
  for (const std::string& v : values) encoding.codes.push_back(index.at(v));
  return encoding;
}

}  // namespace traind::data
