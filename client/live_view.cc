#include "client/live_view.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/format.h"
#include "client/render.h"
#include "spec/search.h"
#include "spec/task_plan.h"

namespace traind::client {
namespace {

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string Bar(int done, int total, int width) {
  if (width < 4) width = 4;
  int filled = total > 0 ? static_cast<int>(static_cast<int64_t>(done) * width / total) : 0;
  filled = std::clamp(filled, 0, width);
  return absl::StrCat("[", std::string(filled, '#'), std::string(width - filled, '-'), "]");
}

}  // namespace

LiveView::LiveView(const traind::v1::Job& job)
    : spec_(job.spec()),
      job_id_(job.id()),
      name_(job.spec().name()),
      state_(JobStateName(job.state())),
      folds_(job.spec().has_cross_validation()),
      epochs_total_(job.spec().training().epochs()) {
  for (const traind::v1::Task& t : job.tasks()) {
    Fold& f = At(t.index());
    if (t.state() != traind::v1::Task::STATE_UNSPECIFIED) f.state = TaskStateName(t.state());
    f.epoch = t.epochs_done();
    if (t.epochs_total() > 0) f.total = t.epochs_total();
    f.attempt = t.attempts_size();
  }
}

LiveView::Fold& LiveView::At(int task) {
  auto it = folds_by_task_.find(task);
  if (it == folds_by_task_.end()) {
    it = folds_by_task_.emplace(task, Fold{}).first;
    it->second.total = epochs_total_;
  }
  return it->second;
}

void LiveView::Update(const traind::v1::JobEvent& event) {
  if (job_id_.empty()) job_id_ = event.job_id();
  if (event.has_job_state()) {
    state_ = JobStateName(event.job_state().state());
  } else if (event.has_task_state()) {
    const auto& ts = event.task_state();
    Fold& f = At(ts.task());
    if (ts.attempt() != f.attempt && ts.attempt() > 0) {
      f.attempt = ts.attempt();  // a new attempt starts over
      f.epoch = 0;
      f.seconds = 0;
    }
    f.state = TaskStateName(ts.state());
  } else if (event.has_epoch()) {
    const auto& e = event.epoch();
    Fold& f = At(e.task());
    if (e.attempt() != f.attempt) {
      f.attempt = e.attempt();
      f.seconds = 0;
    }
    f.epoch = e.epoch();
    f.seconds += e.seconds();
    f.train = {e.train().begin(), e.train().end()};
    if (!e.val().empty()) f.val = {e.val().begin(), e.val().end()};
    if (f.state == "QUEUED" || f.state == "STARTING" || f.state == "-") f.state = "RUNNING";
  }
}

std::string LiveView::Label(int task) const {
  if (!spec_.has_search() && !spec_.has_cross_validation()) {
    return absl::StrCat(folds_ ? "fold " : "task ", task);
  }
  return TaskLabel(spec_, task);
}

std::string LiveView::ShortLabel(int task) const {
  if (spec_.has_search()) {
    const spec::SearchTask where = spec::LocateSearchTask(spec_, task);
    if (where.trial < 0) return "refit";
    return absl::StrCat("t", where.trial, " f", where.spec_task);
  }
  if (spec_.has_cross_validation() && spec::IsRefitTask(spec_, task)) return "refit";
  return absl::StrCat(task);
}

std::string LiveView::Render(int width) const {
  const std::string unit = folds_ ? "fold" : "task";
  std::string out =
      absl::StrCat("job ", job_id_, name_.empty() ? "" : " (" + name_ + ")", "  ", state_, "\n");
  const int bar_width = std::clamp(width - 50, 10, 40);
  size_t label_width = 0;
  for (const auto& [task, f] : folds_by_task_)
    label_width = std::max(label_width, Label(task).size());
  for (const auto& [task, f] : folds_by_task_) {
    std::string eta = "";
    if (f.state == "RUNNING" && f.epoch > 0 && f.total > f.epoch) {
      eta = absl::StrCat("ETA ", FormatSeconds(f.seconds / f.epoch * (f.total - f.epoch)));
    }
    std::string label = Label(task);
    label.resize(label_width, ' ');
    absl::StrAppend(&out, label, "  ", Bar(f.epoch, f.total, bar_width), " ", f.epoch, "/",
                    f.total > 0 ? absl::StrCat(f.total) : "?", "  ", f.state,
                    eta.empty() ? "" : "  " + eta, "\n");
  }
  // Latest metrics: one row per fold that has any.
  std::vector<std::string> train_names, val_names;
  for (const auto& [task, f] : folds_by_task_) {
    for (const auto& [k, v] : f.train) {
      if (std::find(train_names.begin(), train_names.end(), k) == train_names.end())
        train_names.push_back(k);
    }
    for (const auto& [k, v] : f.val) {
      if (std::find(val_names.begin(), val_names.end(), k) == val_names.end())
        val_names.push_back(k);
    }
  }
  if (train_names.empty() && val_names.empty()) return out;
  train_names = OrderMetricNames(std::move(train_names));
  val_names = OrderMetricNames(std::move(val_names));
  std::vector<std::string> headers = {spec_.has_search() ? "TASK" : Upper(unit), "EPOCH"};
  for (const auto& n : train_names) headers.push_back("TRAIN_" + Upper(n));
  for (const auto& n : val_names) headers.push_back("VAL_" + Upper(n));
  Table table(headers);
  for (size_t c = 0; c < headers.size(); ++c) table.SetAlign(c, Align::kRight);
  for (const auto& [task, f] : folds_by_task_) {
    if (f.epoch == 0) continue;
    std::vector<std::string> row = {ShortLabel(task), absl::StrCat(f.epoch)};
    for (const auto& n : train_names) {
      auto it = f.train.find(n);
      row.push_back(it == f.train.end() ? "-" : FormatMetric(it->second));
    }
    for (const auto& n : val_names) {
      auto it = f.val.find(n);
      row.push_back(it == f.val.end() ? "-" : FormatMetric(it->second));
    }
    table.AddRow(std::move(row));
  }
  absl::StrAppend(&out, "\n", table.Render());
  return out;
}

std::string LiveView::Rewind(int lines) {
  if (lines <= 0) return "";
  return absl::StrCat("\x1b[", lines, "A\r\x1b[J");
}

}  // namespace traind::client
