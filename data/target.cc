#include "data/target.h"

namespace traind::data {

TargetKind TargetKindOf(const traind::v1::JobSpec& spec) {
  switch (spec.loss().kind_case()) {
    case traind::v1::LossSpec::kSigmoidBinaryCrossEntropy:
      return spec.data().labels_size() > 0 ? TargetKind::kMultiLabel : TargetKind::kBinary;
    case traind::v1::LossSpec::kMse:
    case traind::v1::LossSpec::kL1:
    case traind::v1::LossSpec::kHuber:
      return TargetKind::kRegression;
    default:
      return TargetKind::kClasses;
  }
}

}  // namespace traind::data
