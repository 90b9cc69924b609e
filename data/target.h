// What a job's targets are, from its loss and its data section: how the
// data reader treats the label column(s), and what the model predicts.
#ifndef TRAIND_DATA_TARGET_H_
#define TRAIND_DATA_TARGET_H_

#include "traind/v1/job.pb.h"

namespace traind::data {

enum class TargetKind {
  kClasses,     // softmax_cross_entropy: one output per class
  kBinary,      // sigmoid_binary_cross_entropy on data.label: one output
  kMultiLabel,  // sigmoid_binary_cross_entropy on data.labels: one per label
  kRegression,  // mse, l1, huber: one output per target column
};

TargetKind TargetKindOf(const traind::v1::JobSpec& spec);

}  // namespace traind::data

#endif  // TRAIND_DATA_TARGET_H_
