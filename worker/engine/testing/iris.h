// examples/data/iris.csv as a Dataset (label: species), loaded once per test binary.
#ifndef TRAIND_WORKER_ENGINE_TESTING_IRIS_H_
#define TRAIND_WORKER_ENGINE_TESTING_IRIS_H_

#include <string>
#include <utility>

#include "data/dataset.h"
#include "traind/v1/job.pb.h"

namespace traind::engine::testing {

inline const data::Dataset& Iris() {
  static const data::Dataset* iris = [] {
    traind::v1::DataSpec spec;
    spec.set_path(std::string(TRAIND_SOURCE_DIR) + "/examples/data/iris.csv");
    spec.set_label("species");
    return new data::Dataset(std::move(data::LoadDataset(spec)).value());
  }();
  return *iris;
}

}  // namespace traind::engine::testing

#endif  // TRAIND_WORKER_ENGINE_TESTING_IRIS_H_
