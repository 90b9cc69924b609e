// The live view of `trainctl watch` on a terminal: a progress bar per fold
// (epoch k of n, ETA) and a table of each fold's latest train and
// validation metrics, redrawn in place. Piped output gets plain lines
// instead (RenderEvent); this class only builds the frames.
//
// Pure: no I/O, no clock (callers pass the time), unit-tested.
// Thread-safety: not thread-safe.
#ifndef TRAIND_CLIENT_LIVE_VIEW_H_
#define TRAIND_CLIENT_LIVE_VIEW_H_

#include <map>
#include <string>
#include <vector>

#include "traind/v1/job.pb.h"

namespace traind::client {

class LiveView final {
 public:
  // `job` gives the id, name, tasks and epoch totals (from GetJob or
  // SubmitJob; an empty job is fine).
  explicit LiveView(const traind::v1::Job& job);

  void Update(const traind::v1::JobEvent& event);

  // The whole frame, ending with '\n', for a terminal of `width` columns
  // and `height` rows: every line narrower than `width` (never wrapped: a
  // cut line ends with "…"), at most height - 1 lines. Where the tasks do
  // not fit, the running ones are shown first and one line counts the
  // rest; where the metrics table is too wide, train metrics are left out
  // first, then validation ones ("(+N more)" after its header).
  std::string Render(int width = 80, int height = 1000) const;

  // Escape codes that move the cursor to the top of a frame of `lines`
  // lines drawn before and clear it: "\x1b[<lines>A\r\x1b[J" ("" for 0).
  static std::string Rewind(int lines);

  // The rows `frame` (drawn at any width) takes on a terminal now `width`
  // columns wide that rewraps its lines, as tmux and most terminals do: a
  // line of w columns takes ceil(w / width) rows (1 when empty).
  static int RowsAfterResize(const std::string& frame, int width);

 private:
  struct Fold {
    std::string state = "QUEUED";
    int attempt = 0;
    int epoch = 0;
    int total = 0;
    double seconds = 0;  // summed epoch seconds of the current attempt
    std::map<std::string, double> train, val;
  };
  Fold& At(int task);

  // The task's name in the progress lines ("fold 2", "refit", "trial 1
  // fold 0") and in the table's first column ("2", "refit", "t1 f0").
  std::string Label(int task) const;
  // The blank line, header and rows of the latest metrics of `tasks`.
  std::vector<std::string> MetricsTable(const std::vector<int>& tasks, size_t max_cols) const;
  std::string ShortLabel(int task) const;

  traind::v1::JobSpec spec_;
  std::string job_id_;
  std::string name_;
  std::string state_;
  bool folds_ = true;
  int epochs_total_ = 0;
  std::map<int, Fold> folds_by_task_;
};

}  // namespace traind::client

#endif  // TRAIND_CLIENT_LIVE_VIEW_H_
