#include "worker/engine/metrics.h"

#include "worker/engine/spec_check.h"

namespace traind::engine {

double MetricAccumulator::value(traind::v1::Metric metric) const {
  switch (metric) {
    case traind::v1::LOSS:
      return loss();
    case traind::v1::ACCURACY:
      return accuracy();
    default:
      return 0.0;
  }
}

void MetricAccumulator::WriteTo(const std::vector<traind::v1::Metric>& metrics,
                                google::protobuf::Map<std::string, double>* out) const {
  for (traind::v1::Metric metric : metrics) (*out)[MetricName(metric)] = value(metric);
}

}  // namespace traind::engine
