#include "client/live_view.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
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

// `text` cut to `cols` display columns ("…" marks a cut).
std::string FitWidth(const std::string& text, size_t cols) {
  if (DisplayWidth(text) <= cols) return text;
  std::string out;
  size_t width = 0;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : 4;
    if (width + 2 > cols) break;  // room for this character and the mark
    out.append(text, i, len);
    ++width;
    i += len;
  }
  return out + "\xE2\x80\xA6";
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

std::string LiveView::Render(int width, int height) const {
  // Every line stays under the terminal's width (a line that wraps would
  // break the rewind of the next frame) and the frame under its height.
  width = std::max(width, 20);
  height = std::max(height, 2);
  const size_t max_cols = static_cast<size_t>(width - 1);
  std::vector<std::string> lines;
  lines.push_back(
      FitWidth(absl::StrCat("job ", job_id_, name_.empty() ? "" : " (" + name_ + ")", "  ", state_),
               max_cols));
  const size_t budget = static_cast<size_t>(height - 1);

  // Which tasks are shown: all when they fit, else the running ones first,
  // then those waiting, then those that ended, and a line for the rest.
  std::vector<int> order;
  for (const auto& [task, f] : folds_by_task_) order.push_back(task);
  auto rank = [&](int task) {
    const std::string& st = folds_by_task_.at(task).state;
    if (st == "RUNNING" || st == "STARTING") return 0;
    if (st == "QUEUED" || st == "-" || st == "PAUSED") return 1;
    return 2;
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return rank(a) < rank(b); });
  auto with_metrics = [&](size_t shown) {
    size_t n = 0;
    for (size_t i = 0; i < shown; ++i) n += folds_by_task_.at(order[i]).epoch > 0 ? 1 : 0;
    return n;
  };
  const bool any_metrics = with_metrics(order.size()) > 0;
  // Lines for `shown` tasks: their bars, a "more" line when some are left
  // out, and the table (a blank line, its header and a row per task that
  // has metrics).
  auto lines_for = [&](size_t shown, bool table) {
    size_t n = shown + (shown < order.size() ? 1 : 0);
    if (table && with_metrics(shown) > 0) n += 2 + with_metrics(shown);
    return n;
  };
  size_t shown = order.size();
  bool table = any_metrics;
  while (shown > 0 && 1 + lines_for(shown, table) > budget) --shown;
  if (shown == 0 && table) {  // too short for any table row: bars only
    table = false;
    shown = order.size();
    while (shown > 0 && 1 + lines_for(shown, table) > budget) --shown;
  }
  std::vector<int> tasks(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(shown));
  std::sort(tasks.begin(), tasks.end());

  size_t label_width = 0;
  for (int task : tasks) label_width = std::max(label_width, DisplayWidth(Label(task)));
  std::vector<std::string> suffixes;
  size_t suffix_width = 0;
  for (int task : tasks) {
    const Fold& f = folds_by_task_.at(task);
    std::string eta;
    if (f.state == "RUNNING" && f.epoch > 0 && f.total > f.epoch) {
      eta = absl::StrCat("ETA ", FormatSeconds(f.seconds / f.epoch * (f.total - f.epoch)));
    }
    suffixes.push_back(absl::StrCat(" ", f.epoch, "/", f.total > 0 ? absl::StrCat(f.total) : "?",
                                    "  ", f.state, eta.empty() ? "" : "  " + eta));
    suffix_width = std::max(suffix_width, suffixes.back().size());
  }
  // The bar: 10 to 40 columns as the width allows, never more than the
  // label and the counts leave (4 at least).
  const int room = static_cast<int>(max_cols) - static_cast<int>(label_width + 2 + suffix_width);
  const int bar_width = std::max(std::min(std::clamp(width - 50, 10, 40), room - 2), 4);
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Fold& f = folds_by_task_.at(tasks[i]);
    std::string label = Label(tasks[i]);
    label.append(label_width - DisplayWidth(label), ' ');
    lines.push_back(FitWidth(
        absl::StrCat(label, "  ", Bar(f.epoch, f.total, bar_width), suffixes[i]), max_cols));
  }
  // The count of the rest, where it fits (a 2-row terminal has the job line only).
  if (shown < order.size() && lines.size() < budget) {
    std::map<std::string, int> rest;
    for (size_t i = shown; i < order.size(); ++i) ++rest[folds_by_task_.at(order[i]).state];
    std::vector<std::string> parts;
    for (const auto& [st, n] : rest) parts.push_back(absl::StrCat(n, " ", st));
    lines.push_back(FitWidth(
        absl::StrCat("+", order.size() - shown, " more (", absl::StrJoin(parts, ", "), ")"),
        max_cols));
  }
  if (table && with_metrics(shown) > 0) {
    for (std::string& line : MetricsTable(tasks, max_cols)) lines.push_back(std::move(line));
  }
  std::string out;
  for (const std::string& line : lines) absl::StrAppend(&out, line, "\n");
  return out;
}

std::vector<std::string> LiveView::MetricsTable(const std::vector<int>& tasks,
                                                size_t max_cols) const {
  std::vector<std::string> train_names, val_names;
  for (int task : tasks) {
    const Fold& f = folds_by_task_.at(task);
    for (const auto& [k, v] : f.train) {
      if (std::find(train_names.begin(), train_names.end(), k) == train_names.end())
        train_names.push_back(k);
    }
    for (const auto& [k, v] : f.val) {
      if (std::find(val_names.begin(), val_names.end(), k) == val_names.end())
        val_names.push_back(k);
    }
  }
  train_names = OrderMetricNames(std::move(train_names));
  val_names = OrderMetricNames(std::move(val_names));
  const std::string unit = folds_ ? "fold" : "task";
  // Too wide: train metrics go first (from the last), then validation ones;
  // a last line says what was left out.
  size_t dropped = 0;
  while (true) {
    std::vector<std::string> headers = {spec_.has_search() ? "TASK" : Upper(unit), "EPOCH"};
    for (const auto& n : train_names) headers.push_back("TRAIN_" + Upper(n));
    for (const auto& n : val_names) headers.push_back("VAL_" + Upper(n));
    Table table(headers);
    for (size_t c = 0; c < headers.size(); ++c) table.SetAlign(c, Align::kRight);
    for (int task : tasks) {
      const Fold& f = folds_by_task_.at(task);
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
    std::vector<std::string> lines = absl::StrSplit(table.Render(), '\n', absl::SkipEmpty());
    size_t widest = 0;
    for (const std::string& line : lines) widest = std::max(widest, DisplayWidth(line));
    if (widest <= max_cols || (train_names.empty() && val_names.size() <= 1)) {
      if (dropped > 0 && !lines.empty()) {
        lines[0] = FitWidth(lines[0], max_cols);
        std::string& header = lines[0];
        for (const std::string& note :
             {absl::StrCat("  (+", dropped, " more)"), absl::StrCat("  +", dropped)}) {
          if (DisplayWidth(header) + note.size() <= max_cols) {
            header += note;
            break;
          }
        }
      }
      lines.insert(lines.begin(), "");
      for (std::string& line : lines) line = FitWidth(line, max_cols);
      return lines;
    }
    ++dropped;
    if (!train_names.empty()) {
      train_names.pop_back();
    } else {
      val_names.pop_back();
    }
  }
}

int LiveView::RowsAfterResize(const std::string& frame, int width) {
  width = std::max(width, 1);
  int rows = 0;
  for (absl::string_view line : absl::StrSplit(frame, '\n')) {
    const int w = static_cast<int>(DisplayWidth(std::string(line)));
    rows += std::max(1, (w + width - 1) / width);
  }
  // The split sees an empty piece after the frame's last '\n'.
  return frame.empty() ? 0 : rows - 1;
}

std::string LiveView::Rewind(int lines) {
  if (lines <= 0) return "";
  return absl::StrCat("\x1b[", lines, "A\r\x1b[J");
}

}  // namespace traind::client
