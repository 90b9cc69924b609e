#include "worker/engine/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace traind::engine {
namespace {

using traind::v1::Metric;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// Counts of one class (or label).
struct Counts {
  double tp = 0, fp = 0, fn = 0;
  double support() const { return tp + fn; }
  double predicted() const { return tp + fp; }
};

double Ratio(double a, double b) { return b > 0 ? a / b : 0.0; }
double F1(double p, double r) { return p + r > 0 ? 2 * p * r / (p + r) : 0.0; }

// Predicted class of row r (classes, binary).
int32_t PredictedClass(const PassPredictions& p, int64_t r) {
  const float* s = p.scores + r * p.width;
  if (p.target == data::TargetKind::kBinary) return s[0] > 0.5f ? 1 : 0;
  int32_t best = 0;
  for (int64_t j = 1; j < p.width; ++j) {
    if (s[j] > s[best]) best = static_cast<int32_t>(j);
  }
  return best;
}

// Per class (or label) counts, and which ones scikit-learn averages over.
std::vector<Counts> CountAll(const PassPredictions& p, std::vector<bool>* used) {
  if (p.target == data::TargetKind::kMultiLabel) {
    std::vector<Counts> c(static_cast<size_t>(p.width));
    for (int64_t r = 0; r < p.rows; ++r) {
      for (int64_t j = 0; j < p.width; ++j) {
        const bool truth = p.values[r * p.width + j] > 0.5f;
        const bool pred = p.scores[r * p.width + j] > 0.5f;
        Counts& k = c[static_cast<size_t>(j)];
        if (truth && pred) k.tp += 1;
        if (!truth && pred) k.fp += 1;
        if (truth && !pred) k.fn += 1;
      }
    }
    used->assign(c.size(), true);
    return c;
  }
  const int64_t classes = p.target == data::TargetKind::kBinary ? 2 : p.width;
  std::vector<Counts> c(static_cast<size_t>(classes));
  used->assign(c.size(), false);
  for (int64_t r = 0; r < p.rows; ++r) {
    const int32_t truth = p.classes[r];
    const int32_t pred = PredictedClass(p, r);
    (*used)[static_cast<size_t>(truth)] = true;
    (*used)[static_cast<size_t>(pred)] = true;
    if (truth == pred) {
      c[static_cast<size_t>(truth)].tp += 1;
    } else {
      c[static_cast<size_t>(pred)].fp += 1;
      c[static_cast<size_t>(truth)].fn += 1;
    }
  }
  return c;
}

enum class Average { kMacro, kMicro, kWeighted };
enum class Score { kPrecision, kRecall, kF1 };

double Averaged(const PassPredictions& p, Score score, Average average) {
  std::vector<bool> used;
  const std::vector<Counts> counts = CountAll(p, &used);
  auto of = [score](double tp, double fp, double fn) {
    const double precision = Ratio(tp, tp + fp), recall = Ratio(tp, tp + fn);
    switch (score) {
      case Score::kPrecision:
        return precision;
      case Score::kRecall:
        return recall;
      default:
        return F1(precision, recall);
    }
  };
  if (average == Average::kMicro) {
    Counts total;
    for (size_t i = 0; i < counts.size(); ++i) {
      if (!used[i]) continue;
      total.tp += counts[i].tp;
      total.fp += counts[i].fp;
      total.fn += counts[i].fn;
    }
    return of(total.tp, total.fp, total.fn);
  }
  double sum = 0, weights = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (!used[i]) continue;
    const double w = average == Average::kWeighted ? counts[i].support() : 1.0;
    sum += w * of(counts[i].tp, counts[i].fp, counts[i].fn);
    weights += w;
  }
  return Ratio(sum, weights);
}

// Area under the ROC curve of scores against 0/1 truths (rank statistic,
// average ranks for ties). NaN with one class only.
double RocAuc(const std::vector<std::pair<float, bool>>& items) {
  std::vector<std::pair<float, bool>> sorted = items;
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  double positives = 0, rank_sum = 0;
  size_t i = 0;
  while (i < sorted.size()) {
    size_t j = i;
    while (j < sorted.size() && sorted[j].first == sorted[i].first) ++j;
    const double rank = 0.5 * static_cast<double>(i + 1 + j);  // mean of ranks i+1..j
    for (size_t k = i; k < j; ++k) {
      if (sorted[k].second) {
        positives += 1;
        rank_sum += rank;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(sorted.size()) - positives;
  if (positives == 0 || negatives == 0) return kNan;
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

double Auc(const PassPredictions& p) {
  std::vector<std::pair<float, bool>> items(static_cast<size_t>(p.rows));
  if (p.target == data::TargetKind::kMultiLabel) {
    double sum = 0;
    int n = 0;
    for (int64_t j = 0; j < p.width; ++j) {
      for (int64_t r = 0; r < p.rows; ++r) {
        items[static_cast<size_t>(r)] = {p.scores[r * p.width + j],
                                         p.values[r * p.width + j] > 0.5f};
      }
      const double auc = RocAuc(items);
      if (!std::isnan(auc)) {
        sum += auc;
        ++n;
      }
    }
    return n > 0 ? sum / n : kNan;
  }
  const int64_t column = p.target == data::TargetKind::kBinary ? 0 : 1;
  if (p.target == data::TargetKind::kClasses && p.width != 2) return kNan;
  for (int64_t r = 0; r < p.rows; ++r) {
    items[static_cast<size_t>(r)] = {p.scores[r * p.width + column], p.classes[r] == 1};
  }
  return RocAuc(items);
}

double LogLoss(const PassPredictions& p) {
  static constexpr double kEps = 1e-15;
  auto clip = [](double v) { return std::min(1 - kEps, std::max(kEps, v)); };
  double sum = 0;
  if (p.target == data::TargetKind::kClasses) {
    for (int64_t r = 0; r < p.rows; ++r) {
      // scikit-learn renormalizes each row of probabilities.
      double total = 0;
      for (int64_t j = 0; j < p.width; ++j) total += clip(p.scores[r * p.width + j]);
      sum -= std::log(clip(p.scores[r * p.width + p.classes[r]]) / total);
    }
    return sum / static_cast<double>(p.rows);
  }
  int64_t n = 0;
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t j = 0; j < p.width; ++j) {
      const double q = clip(p.scores[r * p.width + j]);
      const bool truth = p.target == data::TargetKind::kBinary ? p.classes[r] == 1
                                                               : p.values[r * p.width + j] > 0.5f;
      sum -= truth ? std::log(q) : std::log(1 - q);
      ++n;
    }
  }
  return sum / static_cast<double>(n);
}

double Accuracy(const PassPredictions& p) {
  int64_t correct = 0;
  for (int64_t r = 0; r < p.rows; ++r) {
    if (p.target == data::TargetKind::kMultiLabel) {
      bool all = true;
      for (int64_t j = 0; j < p.width; ++j) {
        all = all && ((p.scores[r * p.width + j] > 0.5f) == (p.values[r * p.width + j] > 0.5f));
      }
      correct += all ? 1 : 0;
    } else {
      correct += PredictedClass(p, r) == p.classes[r] ? 1 : 0;
    }
  }
  return Ratio(static_cast<double>(correct), static_cast<double>(p.rows));
}

double TopK(const PassPredictions& p, int k) {
  int64_t correct = 0;
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* s = p.scores + r * p.width;
    const float truth = s[p.classes[r]];
    int larger = 0;
    for (int64_t j = 0; j < p.width; ++j) larger += s[j] > truth ? 1 : 0;
    correct += larger < k ? 1 : 0;
  }
  return Ratio(static_cast<double>(correct), static_cast<double>(p.rows));
}

double Regression(const PassPredictions& p, Metric metric) {
  double total = 0;
  for (int64_t j = 0; j < p.width; ++j) {
    double se = 0, ae = 0, mean = 0;
    for (int64_t r = 0; r < p.rows; ++r) mean += p.values[r * p.width + j];
    mean /= static_cast<double>(p.rows);
    double ss_tot = 0;
    for (int64_t r = 0; r < p.rows; ++r) {
      const double t = p.values[r * p.width + j];
      const double d = static_cast<double>(p.scores[r * p.width + j]) - t;
      se += d * d;
      ae += std::abs(d);
      ss_tot += (t - mean) * (t - mean);
    }
    const double n = static_cast<double>(p.rows);
    switch (metric) {
      case traind::v1::MSE:
        total += se / n;
        break;
      case traind::v1::RMSE:
        total += std::sqrt(se / n);
        break;
      case traind::v1::MAE:
        total += ae / n;
        break;
      default:  // R2
        total += ss_tot > 0 ? 1 - se / ss_tot : (se == 0 ? 1.0 : 0.0);
        break;
    }
  }
  return total / static_cast<double>(p.width);
}

}  // namespace

double ComputeMetric(Metric metric, const PassPredictions& p, int top_k) {
  if (p.rows == 0) return 0.0;
  switch (metric) {
    case traind::v1::ACCURACY:
      return Accuracy(p);
    case traind::v1::TOP_K_ACCURACY:
      return TopK(p, top_k);
    case traind::v1::PRECISION_MACRO:
      return Averaged(p, Score::kPrecision, Average::kMacro);
    case traind::v1::PRECISION_MICRO:
      return Averaged(p, Score::kPrecision, Average::kMicro);
    case traind::v1::PRECISION_WEIGHTED:
      return Averaged(p, Score::kPrecision, Average::kWeighted);
    case traind::v1::RECALL_MACRO:
      return Averaged(p, Score::kRecall, Average::kMacro);
    case traind::v1::RECALL_MICRO:
      return Averaged(p, Score::kRecall, Average::kMicro);
    case traind::v1::RECALL_WEIGHTED:
      return Averaged(p, Score::kRecall, Average::kWeighted);
    case traind::v1::F1_MACRO:
      return Averaged(p, Score::kF1, Average::kMacro);
    case traind::v1::F1_MICRO:
      return Averaged(p, Score::kF1, Average::kMicro);
    case traind::v1::F1_WEIGHTED:
      return Averaged(p, Score::kF1, Average::kWeighted);
    case traind::v1::ROC_AUC:
      return Auc(p);
    case traind::v1::LOG_LOSS:
      return LogLoss(p);
    case traind::v1::MSE:
    case traind::v1::RMSE:
    case traind::v1::MAE:
    case traind::v1::R2:
      return Regression(p, metric);
    default:
      return kNan;
  }
}

void WriteMetrics(const std::vector<Metric>& metrics, const PassPredictions& p, double loss,
                  int top_k, google::protobuf::Map<std::string, double>* out) {
  for (Metric m : metrics) {
    (*out)[spec::MetricName(m)] = m == traind::v1::LOSS ? loss : ComputeMetric(m, p, top_k);
  }
}

}  // namespace traind::engine
