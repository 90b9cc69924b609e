// traind-worker --predict: a CSV file scored by trained models, in this
// process, without a daemon. traind runs exactly this command line in a
// fresh process for its Predict RPC, so it is a stable contract:
//
//   traind-worker --predict MODEL.ckpt [--predict MODEL2.ckpt ...]
//                 [--data] FILE.csv [--out OUT.csv] [--device gpu]
//
// - --predict (repeatable): a model file (model.ckpt, model_file.h). Several
//   are an ensemble: the mean of their probabilities (class, binary and
//   multi-label targets) or values (regression); see predict.h.
// - --data (or the one positional argument): the CSV to score (header row; the model's
// data.delimiter); the
//   model's feature columns are found by name, other columns are ignored.
// - --out: where the predictions go; "-" (the default) is stdout. A file is
//   written atomically (a temporary file beside it, renamed), so it holds
//   all the predictions or is left as it was.
// - --device: "cpu" (the default) or "gpu": the network runs on visible
//   CUDA device 0 through the CUDA plugin (traind passes it, with
//   CUDA_VISIBLE_DEVICES naming an idle GPU, for a job whose resources say
//   gpu). A GPU that cannot be opened is an error (exit 1), not a silent
//   fall back to the CPU. The preprocessing runs on the CPU either way.
//
// Output: the columns of predictions.csv (docs/spec.md, "Predict"): row (the
// 0-based data row of FILE.csv), label (class targets), then p_<class> /
// p_<label> / prediction / <target> columns; nothing else goes to stdout.
//
// Exit status (exit_code.h): 0 the predictions were written; 1 failure,
// with the error as one line on stderr, "traind-worker: error: <message>"
// (the message names the file, and its line and column for a bad cell);
// 2 usage (--predict without --data or the reverse, --predict with the
// training flags, a bad flag), with the reason on stderr.
#ifndef TRAIND_WORKER_PREDICT_MAIN_H_
#define TRAIND_WORKER_PREDICT_MAIN_H_

#include <string>
#include <vector>

namespace traind::worker {

struct PredictCommand {
  std::vector<std::string> models;  // --predict, in order
  std::string data;                 // --data
  std::string out = "-";            // --out; "-": stdout
  bool gpu = false;                 // --device gpu
};

// Scores command.data and writes the predictions. Returns the exit status
// (kSucceeded or kFailed; see above).
int RunPredict(const PredictCommand& command);

// "traind-worker: error: <message>" with every line break (and other
// control character) of the message replaced by a space: one line.
std::string OneLineError(const std::string& message);

}  // namespace traind::worker

#endif  // TRAIND_WORKER_PREDICT_MAIN_H_
