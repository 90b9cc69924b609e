// Reads the text fixtures of tests/fixtures (written by make_fixtures.py):
// one record per line, `name value value ...`; `#` starts a comment line.
#ifndef TRAIND_WORKER_ENGINE_TESTING_REFERENCE_FIXTURES_H_
#define TRAIND_WORKER_ENGINE_TESTING_REFERENCE_FIXTURES_H_

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace traind::engine::testing {

inline std::map<std::string, std::vector<double>> ReadFixture(const std::string& name) {
  std::map<std::string, std::vector<double>> records;
  std::ifstream in(std::string(TRAIND_SOURCE_DIR) + "/tests/fixtures/" + name);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key;
    fields >> key;
    std::vector<double>& values = records[key];
    double v;
    while (fields >> v) values.push_back(v);
  }
  return records;
}

}  // namespace traind::engine::testing

#endif  // TRAIND_WORKER_ENGINE_TESTING_REFERENCE_FIXTURES_H_
