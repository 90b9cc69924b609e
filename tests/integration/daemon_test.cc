// End to end: the real traind and traind-worker binaries, over gRPC on a
// unix socket, with the iris data. (trainctl against them:
// trainctl_daemon_test.cc.)
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "spec/loader.h"
#include "tests/integration/testing/daemon_fixture.h"
#include "tests/integration/testing/traind_process.h"
#include "tests/testing/procfs.h"

namespace traind::testing {
namespace {

using traind::v1::Failure;
using traind::v1::Job;
using traind::v1::JobEvent;
using traind::v1::Task;

TEST_F(DaemonTest, IrisCrossValidationEndToEnd) {
  std::vector<JobEvent> events;
  Job job = RunToEnd(ExampleIrisSpec(), &events);
  ASSERT_EQ(job.state(), Job::SUCCEEDED) << job.DebugString();
  ASSERT_EQ(job.tasks_size(), 5);

  // The stream: sequences 1..n, ends with the terminal event.
  ASSERT_FALSE(events.empty());
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].sequence(), static_cast<int64_t>(i + 1));
  }
  EXPECT_TRUE(events.back().last());
  EXPECT_EQ(events.back().job_state().state(), Job::SUCCEEDED);

  // Every epoch of every fold, with train and validation loss and accuracy.
  std::map<int, std::set<int>> epochs;
  for (const JobEvent& e : events) {
    if (!e.has_epoch()) continue;
    const auto& m = e.epoch();
    EXPECT_TRUE(epochs[m.task()].insert(m.epoch()).second) << "duplicate epoch";
    for (const char* k : {"loss", "accuracy"}) {
      EXPECT_TRUE(m.train().contains(k)) << k;
      EXPECT_TRUE(m.val().contains(k)) << k;
    }
    EXPECT_GE(m.val().at("accuracy"), 0.0);
    EXPECT_LE(m.val().at("accuracy"), 1.0);
  }
  ASSERT_EQ(epochs.size(), 5u);
  for (const auto& [task, seen] : epochs) {
    EXPECT_EQ(seen.size(), 60u) << "task " << task;
    EXPECT_EQ(*seen.begin(), 1);
    EXPECT_EQ(*seen.rbegin(), 60);
  }

  // One worker process per fold.
  std::set<int> pids;
  for (const Task& t : job.tasks()) {
    EXPECT_EQ(t.state(), Task::SUCCEEDED);
    ASSERT_EQ(t.attempts_size(), 1);
    EXPECT_GT(t.attempts(0).pid(), 0);
    pids.insert(t.attempts(0).pid());
    EXPECT_EQ(t.epochs_done(), 60);
  }
  EXPECT_EQ(pids.size(), 5u);

  // The result: per fold and over folds; the label mapping.
  const auto& r = job.result();
  EXPECT_TRUE(r.complete());
  ASSERT_EQ(r.folds_size(), 5);
  EXPECT_EQ(std::vector<std::string>(r.classes().begin(), r.classes().end()),
            (std::vector<std::string>{"setosa", "versicolor", "virginica"}));
  int64_t val_rows = 0;
  double sum = 0;
  for (const auto& f : r.folds()) {
    EXPECT_GE(f.best_epoch(), 1);
    EXPECT_LE(f.best_epoch(), 60);
    EXPECT_EQ(f.train_rows() + f.val_rows(), 150);
    val_rows += f.val_rows();
    sum += f.val().at("accuracy");
  }
  EXPECT_EQ(val_rows, 150);  // the folds cover every row once
  EXPECT_NEAR(r.val().at("accuracy").mean(), sum / 5, 1e-9);
  EXPECT_GE(r.val().at("accuracy").mean(), 0.90);

  // Out-of-fold predictions: every row once, in row order, probabilities
  // summing to one; each row's true class is the file's, its fold the task
  // that validated on it.
  ASSERT_FALSE(r.predictions_path().empty());
  {
    std::vector<std::string> species;
    {
      std::ifstream data(job.spec().data().path());
      std::string row;
      std::getline(data, row);  // the header
      while (std::getline(data, row)) {
        if (!row.empty() && row.back() == '\r') row.pop_back();  // CRLF lines
        species.push_back(row.substr(row.rfind(',') + 1));
      }
    }
    ASSERT_EQ(species.size(), 150u);
    std::map<std::string, int64_t> per_fold;
    std::ifstream in(r.predictions_path());
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    EXPECT_EQ(line, "row,fold,true_species,label,p_setosa,p_versicolor,p_virginica");
    int64_t expected_row = 0;
    while (std::getline(in, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ',');
      ASSERT_EQ(f.size(), 7u) << line;
      EXPECT_EQ(f[0], std::to_string(expected_row)) << line;
      EXPECT_TRUE(f[3] == "setosa" || f[3] == "versicolor" || f[3] == "virginica") << line;
      EXPECT_EQ(f[2], species[static_cast<size_t>(expected_row)]) << line;
      ++per_fold[f[1]];
      double total = 0;
      for (int c = 4; c < 7; ++c) total += std::stod(f[c]);
      EXPECT_NEAR(total, 1.0, 1e-5) << line;
      ++expected_row;
    }
    EXPECT_EQ(expected_row, 150);
    ASSERT_EQ(per_fold.size(), 5u);
    for (const auto& fold : r.folds()) {
      EXPECT_EQ(per_fold[absl::StrCat(fold.fold())], fold.val_rows()) << fold.fold();
    }
  }

  // GetJobResult agrees; a watcher that resumes from a cursor gets exactly the rest.
  traind::v1::GetJobResultRequest rreq;
  rreq.set_job_id(job.id());
  traind::v1::JobResult rr;
  auto ctx = Ctx();
  ASSERT_TRUE(daemon_->stub()->GetJobResult(ctx.get(), rreq, &rr).ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(rr, r));
  std::vector<JobEvent> tail;
  ASSERT_TRUE(WatchAll(daemon_->stub(), job.id(), 10, &tail).ok());
  ASSERT_EQ(tail.size(), events.size() - 10);
  EXPECT_EQ(tail.front().sequence(), 11);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(tail.back(), events.back()));
  std::vector<JobEvent> none;
  ASSERT_TRUE(WatchAll(daemon_->stub(), job.id(), events.back().sequence(), &none).ok());
  EXPECT_TRUE(none.empty());
}

struct BadSpecCase {
  std::string name;
  std::function<void(traind::v1::JobSpec*)> mutate;
  std::string field;  // expected at the start of the message, after "spec."
};

// Workers forked by the zygote (the default) and workers exec'd one per
// task are the same program given the same task: every fold's result agrees
// exactly, and both kinds are traind's own children.
TEST_F(DaemonTest, ZygoteAndExecdWorkersGiveIdenticalResults) {
  std::vector<JobEvent> events;
  Job forked = RunToEnd(ExampleIrisSpec(), &events);
  ASSERT_EQ(forked.state(), Job::SUCCEEDED) << forked.DebugString();
  EXPECT_NE(daemon_->Log().find("worker zygote started"), std::string::npos) << daemon_->Log();

  TraindProcess direct(dir_.path() + "/direct", {"--cpu-slots=2", "--worker-zygote=false"});
  ASSERT_TRUE(direct.Start()) << direct.Log();
  absl::StatusOr<Job> submitted = SubmitJob(direct.stub(), ExampleIrisSpec());
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  std::vector<JobEvent> direct_events;
  ASSERT_TRUE(WatchAll(direct.stub(), submitted->id(), 0, &direct_events).ok());
  Job execd = GetJob(direct.stub(), submitted->id());
  ASSERT_EQ(execd.state(), Job::SUCCEEDED) << execd.DebugString();
  EXPECT_EQ(direct.Log().find("worker zygote"), std::string::npos) << direct.Log();

  ASSERT_EQ(forked.tasks_size(), execd.tasks_size());
  for (int t = 0; t < forked.tasks_size(); ++t) {
    const traind::v1::FoldResult& a = forked.tasks(t).result();
    const traind::v1::FoldResult& b = execd.tasks(t).result();
    EXPECT_EQ(a.best_epoch(), b.best_epoch()) << "task " << t;
    ASSERT_FALSE(a.val().empty()) << "task " << t;
    for (const auto& [name, value] : a.val()) {
      ASSERT_TRUE(b.val().contains(name)) << name;
      EXPECT_EQ(value, b.val().at(name)) << "task " << t << " val." << name;
    }
  }
  std::vector<double> a_losses, b_losses;
  for (const JobEvent& e : events) {
    if (e.has_epoch()) a_losses.push_back(e.epoch().train().at("loss"));
  }
  for (const JobEvent& e : direct_events) {
    if (e.has_epoch()) b_losses.push_back(e.epoch().train().at("loss"));
  }
  std::sort(a_losses.begin(), a_losses.end());
  std::sort(b_losses.begin(), b_losses.end());
  EXPECT_EQ(a_losses, b_losses);

  // Either way, each attempt's log ends with where its time went, timed
  // from traind's launch request (its stamp reaches forked and exec'd
  // workers alike), every phase in order.
  for (const auto& [state_dir, job] :
       {std::pair<std::string, const Job*>(daemon_->state_dir(), &forked),
        std::pair<std::string, const Job*>(direct.state_dir(), &execd)}) {
    std::ifstream in(state_dir + "/jobs/" + job->id() + "/task-0/attempt-1.log");
    std::string line, phases;
    while (std::getline(in, line)) {
      if (line.find("task phases ") != std::string::npos) phases = line;
    }
    const std::string head =
        "task phases job=" + job->id() + " task=0 attempt=1: launch\xE2\x86\x92main ";
    EXPECT_NE(phases.find(head), std::string::npos) << phases;
    size_t at = 0;
    for (const char* phase : {" get_task ", " load ", " split ", " started ", " prepare ",
                              " first_batch ", " train ", " finish ", " report ", " (total "}) {
      const size_t next = phases.find(phase, at);
      EXPECT_NE(next, std::string::npos) << phase << " in " << phases;
      at = next == std::string::npos ? at : next;
    }
  }
}

// The zygote runs a small dense kernel and registers ONNX's schemas before
// it forks, so workers do not each redo it; it must still be one thread
// (a fork copies only the caller's), before and after it has forked workers.
TEST_F(DaemonTest, TheZygoteStaysOneThreadAfterItsPrewarm) {
  std::vector<JobEvent> events;
  ASSERT_EQ(RunToEnd(ExampleIrisSpec(), &events).state(), Job::SUCCEEDED);
  std::vector<int> zygotes;
  for (const ProcChild& c : ChildrenOf(daemon_->pid())) {
    if (ProcCmdline(c.pid).find("--zygote") != std::string::npos) zygotes.push_back(c.pid);
  }
  ASSERT_EQ(zygotes.size(), 1u) << daemon_->Log();
  const auto tasks = std::distance(
      std::filesystem::directory_iterator("/proc/" + std::to_string(zygotes[0]) + "/task"),
      std::filesystem::directory_iterator());
  EXPECT_EQ(tasks, 1);
}

// bf16 has one source of truth, oneDNN in the worker under the workers'
// environment: traind passes ONEDNN_MAX_CPU_ISA to its workers and asks
// `traind-worker --capabilities` at start, so submit accepts bf16 exactly
// when a worker can train in it, capped or not.
TEST_F(DaemonTest, Bf16AtSubmitAgreesWithTheWorkersOneDnn) {
  traind::v1::JobSpec spec = ExampleIrisSpec();
  spec.mutable_training()->set_epochs(3);
  spec.mutable_training()->set_precision(traind::v1::BF16);
  const std::string refused =
      "spec.training.precision: bf16 needs a CPU with AVX512-BF16 or AMX, as oneDNN sees it";

  // Uncapped: whatever this CPU is, traind agrees with its worker.
  std::string caps;
  ASSERT_EQ(RunCommand(BinDir() + "/traind-worker --capabilities 2>/dev/null", &caps), 0);
  const bool worker_bf16 = caps.find(" cpu-bf16") != std::string::npos;
  EXPECT_NE(daemon_->Log().find(worker_bf16 ? "cpu_bf16=true" : "cpu_bf16=false"),
            std::string::npos)
      << daemon_->Log();
  absl::StatusOr<Job> job = Submit(spec);
  if (worker_bf16) {
    ASSERT_TRUE(job.ok()) << job.status();
    std::vector<JobEvent> events;
    ASSERT_TRUE(WatchAll(daemon_->stub(), job->id(), 0, &events).ok());
    EXPECT_EQ(Get(job->id()).state(), Job::SUCCEEDED) << Get(job->id()).DebugString();
  } else {
    ASSERT_FALSE(job.ok());
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(job.status().message().rfind(refused, 0), 0u) << job.status();
  }

  // Capped at AVX2 (no bf16 on any CPU): refused at submit, nothing stored;
  // the workers train fp32 under the same cap.
  for (const char* zygote : {"--worker-zygote=true", "--worker-zygote=false"}) {
    TraindProcess capped(dir_.path() + "/capped" + zygote, {"--cpu-slots=2", zygote});
    capped.SetEnv("ONEDNN_MAX_CPU_ISA", "AVX2");
    ASSERT_TRUE(capped.Start()) << capped.Log();
    EXPECT_NE(capped.Log().find("worker backends=cpu cpu_bf16=false"), std::string::npos)
        << capped.Log();
    absl::StatusOr<Job> bf16 = SubmitJob(capped.stub(), spec);
    ASSERT_FALSE(bf16.ok()) << zygote;
    EXPECT_EQ(bf16.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(bf16.status().message().rfind(refused, 0), 0u) << bf16.status();
    traind::v1::JobSpec fp32 = spec;
    fp32.mutable_training()->set_precision(traind::v1::FP32);
    absl::StatusOr<Job> ok = SubmitJob(capped.stub(), fp32);
    ASSERT_TRUE(ok.ok()) << ok.status();
    std::vector<JobEvent> events;
    ASSERT_TRUE(WatchAll(capped.stub(), ok->id(), 0, &events).ok());
    EXPECT_EQ(GetJob(capped.stub(), ok->id()).state(), Job::SUCCEEDED);
    traind::v1::ListJobsRequest req;
    traind::v1::ListJobsResponse resp;
    auto ctx = Ctx();
    ASSERT_TRUE(capped.stub()->ListJobs(ctx.get(), req, &resp).ok());
    EXPECT_EQ(resp.jobs_size(), 1) << "the refused bf16 job was stored";
  }
}

TEST_F(DaemonTest, InvalidSpecsAreRejectedWithTheFieldPathAndNothingIsStored) {
  std::vector<BadSpecCase> cases = {
      {"no data path", [](auto* s) { s->mutable_data()->clear_path(); }, "data.path"},
      {"missing file", [](auto* s) { s->mutable_data()->set_path("/nonexistent/iris.csv"); },
       "data.path"},
      {"unknown label", [](auto* s) { s->mutable_data()->set_label("kind"); }, "data.label"},
      {"one fold", [](auto* s) { s->mutable_cross_validation()->set_folds(1); },
       "cross_validation.folds"},
      {"more folds than rows", [](auto* s) { s->mutable_cross_validation()->set_folds(151); },
       "cross_validation.folds"},
      {"epochs and batches", [](auto* s) { s->mutable_training()->set_batches(100); }, "training"},
      {"neither epochs nor batches", [](auto* s) { s->mutable_training()->clear_epochs(); },
       "training"},
      {"batch size 0", [](auto* s) { s->mutable_training()->set_batch_size(0); },
       "training.batch_size"},
      {"empty model", [](auto* s) { s->mutable_model()->clear_layers(); }, "model.layers"},
      {"zero units",
       [](auto* s) { s->mutable_model()->mutable_layers(0)->mutable_dense()->set_units(0); },
       "model.layers[0].dense.units"},
      {"output width",
       [](auto* s) { s->mutable_model()->mutable_layers(1)->mutable_dense()->set_units(4); },
       "model.layers[1].dense.units"},
      {"no optimizer", [](auto* s) { s->clear_optimizer(); }, "optimizer"},
      {"gpu", [](auto* s) { s->mutable_resources()->set_device(traind::v1::GPU); },
       "resources.device"},
  };
  const int before = JobCount();
  for (const auto& c : cases) {
    traind::v1::JobSpec spec = ExampleIrisSpec();
    c.mutate(&spec);
    auto job = Submit(spec);
    ASSERT_FALSE(job.ok()) << c.name;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_EQ(job.status().message().rfind("spec." + c.field + ":", 0), 0u)
        << c.name << ": " << job.status().message();
  }
  EXPECT_EQ(JobCount(), before);
}

// Text in a column the spec reads as numbers (a category not declared) is
// refused at submit, naming the value, file, line and column and the fix;
// the same column listed in data.categorical trains.
TEST_F(DaemonTest, TextInANumericColumnIsRefusedAtSubmitNamingTheFix) {
  std::string csv = "a,region,label\n";
  for (int r = 0; r < 40; ++r) {
    csv += absl::StrCat(r, ",", r % 3 == 0 ? "east" : "west", ",", r % 2 ? "x" : "y", "\n");
  }
  std::string path = dir_.Write("regions.csv", csv);
  traind::v1::JobSpec spec = ExampleIrisSpec();
  spec.mutable_data()->set_path(path);
  spec.mutable_data()->set_label("label");
  spec.mutable_cross_validation()->set_folds(2);
  spec.mutable_model()->mutable_layers(1)->mutable_dense()->set_units(2);
  spec.mutable_training()->set_epochs(2);
  const int before = JobCount();
  auto job = Submit(spec);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(),
            "spec.data.categorical: column \"region\" holds text (\"east\" at " + path +
                ":2, column 2), not a number: if the column is a category, list it in "
                "data.categorical (or in data.ignore); else fix the value");
  EXPECT_EQ(JobCount(), before);
  spec.mutable_data()->add_categorical("region");
  std::vector<JobEvent> events;
  EXPECT_EQ(RunToEnd(spec, &events).state(), Job::SUCCEEDED);
}

TEST_F(DaemonTest, BadDataFailsTheJobWithDataErrorNamingFileLineAndColumn) {
  std::string ragged =
      dir_.Write("ragged.csv", "a,b,label\n1,2,x\n3,4,y\n5,6\n7,8,x\n9,10,y\n11,12,x\n");
  struct Case {
    std::string path;
    std::vector<std::string> expect;
  };
  // Text that is not UTF-8 (a cell, a label) and a 10 MB cell: a DATA_ERROR
  // naming the line and column, reported whole (never a failed report and
  // a crash loop), the value quoted cut.
  std::string latin1 =
      dir_.Write("latin1.csv", "a,b,label\n1,2,x\n3,4,y\n5\xff,6,x\n7,8,y\n9,10,x\n11,12,y\n");
  std::string label =
      dir_.Write("label.csv", "a,b,label\n1,2,x\n3,4,y\n5,6,\xe9t\xe9\n7,8,y\n9,10,x\n");
  std::string huge = dir_.Write(
      "huge.csv", "a,b,label\n1,2,x\n3,4,y\n5," + std::string(10 << 20, '6') + ",x\n7,8,y\n");
  // An out-of-range number: the data's error, not the spec's.
  std::string range =
      dir_.Write("range.csv", "a,b,label\n1,2,x\n3,4,y\n5,1e39,x\n7,8,y\n9,10,x\n11,12,y\n");
  std::vector<Case> cases = {Case{ragged, {ragged, ":4"}},
                             Case{range, {range, ":4", "\"b\"", "out of range"}},
                             Case{latin1, {latin1, ":4: column 1 is not valid UTF-8", "0xff"}},
                             Case{label, {label, ":4: column 3 is not valid UTF-8"}},
                             Case{huge, {huge, ":4: column 2 holds more than 65536 bytes"}}};
  for (const Case& c : cases) {
    traind::v1::JobSpec spec = ExampleIrisSpec();
    spec.mutable_data()->set_path(c.path);
    spec.mutable_data()->set_label("label");
    spec.mutable_cross_validation()->set_folds(2);
    spec.mutable_model()->mutable_layers(1)->mutable_dense()->set_units(2);
    std::vector<JobEvent> events;
    Job job = RunToEnd(spec, &events);
    EXPECT_EQ(job.state(), Job::FAILED) << c.path;
    EXPECT_EQ(job.failure().reason(), Failure::DATA_ERROR) << job.failure().DebugString();
    for (const std::string& e : c.expect) {
      EXPECT_NE(job.failure().message().find(e), std::string::npos)
          << "'" << e << "' not in: " << job.failure().message();
    }
    // Not retried: one attempt per task.
    for (const Task& t : job.tasks()) EXPECT_LE(t.attempts_size(), 1);
    EXPECT_LT(job.failure().message().size(), 1024u) << c.path;
    ASSERT_FALSE(events.empty());
    EXPECT_TRUE(events.back().last());
    EXPECT_EQ(events.back().job_state().failure().reason(), Failure::DATA_ERROR);
  }
}

// A FIFO (or a directory) inside a data root is refused at submit without
// opening it for long: the API stays responsive and nothing is stored.
TEST_F(DaemonTest, DataThatIsNotARegularFileIsRefusedAtOnce) {
  const std::string fifo = dir_.path() + "/pipe.csv";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string folder = dir_.path() + "/folder.csv";
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  for (const auto& [path, kind] : {std::pair{fifo, "a FIFO"}, std::pair{folder, "a directory"}}) {
    traind::v1::JobSpec spec = ExampleIrisSpec();
    spec.mutable_data()->set_path(path);
    const absl::Time start = absl::Now();
    absl::StatusOr<Job> job = Submit(spec);
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
    ASSERT_FALSE(job.ok()) << path;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(job.status().message(),
              absl::StrCat("spec.data.path: ", path, ": is ", kind,
                           ", not a regular file (data must be a regular file)"));
  }
  // A directory not named as a table is an image folder: one with no class
  // subfolders is refused at submit too.
  const std::string empty = dir_.path() + "/images";
  ASSERT_EQ(mkdir(empty.c_str(), 0700), 0);
  traind::v1::JobSpec spec = ExampleIrisSpec();
  spec.mutable_data()->set_path(empty);
  absl::StatusOr<Job> job = Submit(spec);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(),
            absl::StrCat("spec.data.path: ", empty,
                         ": no class folders (an image folder holds one subfolder of images per "
                         "class: root/<class>/<image>)"));
  EXPECT_EQ(JobCount(), 0);
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  auto stub = grpc::health::v1::Health::NewStub(daemon_->channel());
  auto ctx = Ctx(5);
  EXPECT_TRUE(stub->Check(ctx.get(), req, &resp).ok());
}

// Submit reads the data in one pass holding no rows: checking a 256 MiB CSV
// (11 million rows; the whole of it read, as its last row brings a fourth
// class the model has no unit for) raises traind's peak RSS by at most
// 64 MiB over idle, and leaves it where it was.
TEST_F(DaemonTest, SubmitChecksALargeCsvInBoundedMemory) {
  const std::string path = dir_.path() + "/large.csv";
  {
    std::ofstream out(path, std::ios::binary);
    out << "sepal_length,sepal_width,petal_length,petal_width,species\n";
    std::string block;
    while (block.size() < (1 << 20)) {
      block += "5.1,3.5,1.4,0.2,setosa\n6.2,2.9,4.3,1.3,versicolor\n7.7,3.0,6.1,2.3,virginica\n";
    }
    for (int i = 0; i < 256; ++i)
      out.write(block.data(), static_cast<std::streamsize>(block.size()));
    out << "5.0,3.0,1.0,0.2,unknown\n";
    ASSERT_TRUE(out.good());
  }
  const int pid = daemon_->pid();
  ASSERT_EQ(Submit(ExampleIrisSpec()).status().code(),
            absl::StatusCode::kOk);  // warm: a first submit
  const int64_t idle = ProcStatusKiB(pid, "VmRSS");
  ASSERT_GT(idle, 0);
  { std::ofstream(absl::StrCat("/proc/", pid, "/clear_refs")) << "5"; }  // VmHWM := VmRSS
  ASSERT_LE(ProcStatusKiB(pid, "VmHWM"), idle + 1024);
  traind::v1::SubmitJobRequest req;
  *req.mutable_spec() = ExampleIrisSpec();
  req.mutable_spec()->mutable_data()->set_path(path);
  Job job;
  auto ctx = Ctx(300);
  grpc::Status s = daemon_->stub()->SubmitJob(ctx.get(), req, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("data.label \"species\" has 4 classes"), std::string::npos)
      << s.error_message();
  const int64_t peak = ProcStatusKiB(pid, "VmHWM");
  const int64_t after = ProcStatusKiB(pid, "VmRSS");
  EXPECT_LE(peak - idle, 64 * 1024) << "idle " << idle << " KiB, peak " << peak << " KiB";
  EXPECT_LE(after - idle, 16 * 1024) << "idle " << idle << " KiB, after " << after << " KiB";
  std::remove(path.c_str());
}

// What an operator reads at start: usage errors exit 2 with the flag named,
// a state directory in use is one line naming the other traind, and what
// the worker's capability probe says is a line of traind's log, not raw
// text on its stderr.
TEST_F(DaemonTest, StartupMessagesForOperators) {
  std::string out;
  EXPECT_EQ(RunCommand(BinDir() + "/traind --bogus-flag 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("--bogus-flag"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(BinDir() + "/traind --cpu-slots x 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("--cpu-slots"), std::string::npos) << out;

  EXPECT_EQ(RunCommand(BinDir() + "/traind --state-dir " + dir_.path() + "/state --listen unix:" +
                           dir_.path() + "/other.sock --http-listen off 2>&1",
                       &out),
            1)
      << out;
  const size_t at = out.find("is in use by another traind (pid ");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string line = out.substr(at, out.find('\n', at) - at);
  EXPECT_NE(line.find(absl::StrCat("(pid ", daemon_->pid(), ")")), std::string::npos) << line;

  std::istringstream in(daemon_->Log());
  std::string l;
  while (std::getline(in, l)) {
    EXPECT_EQ(l.rfind("traind-worker:", 0), std::string::npos) << "raw worker output: " << l;
  }
}

// A second traind never takes over a socket that a live traind listens on
// (it would cut the first off its unix clients); a stale one is reused.
TEST_F(DaemonTest, ALiveSocketIsNeverTakenOver) {
  const std::string first = dir_.path() + "/state/traind.sock";
  struct stat before {};
  ASSERT_EQ(stat(first.c_str(), &before), 0);
  TraindProcess second(dir_.path() + "/second", {"--listen=unix:" + first});
  EXPECT_FALSE(second.Start());
  EXPECT_NE(second.Log().find("unix:" + first +
                              ": another process is listening on this socket (another traind?)"),
            std::string::npos)
      << second.Log();
  second.Stop();
  struct stat after {};
  ASSERT_EQ(stat(first.c_str(), &after), 0) << "the first traind's socket was removed";
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(JobCount(), 0);  // the first still answers on it

  // A socket file nobody listens on (its traind was killed) is reused.
  const std::string stale_dir = dir_.path() + "/stale";
  ASSERT_EQ(mkdir(stale_dir.c_str(), 0700), 0);
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  const std::string stale = stale_dir + "/traind.sock";
  std::snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", stale.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  close(fd);  // the file stays, nobody listens
  TraindProcess third(stale_dir);
  EXPECT_TRUE(third.Start()) << third.Log();
}

TEST_F(DaemonTest, UnknownJobIsNotFound) {
  traind::v1::GetJobRequest g;
  g.set_job_id("000000000000");
  Job job;
  auto c1 = Ctx();
  EXPECT_EQ(daemon_->stub()->GetJob(c1.get(), g, &job).error_code(), grpc::StatusCode::NOT_FOUND);
  traind::v1::CancelJobRequest c;
  c.set_job_id("000000000000");
  auto c2 = Ctx();
  EXPECT_EQ(daemon_->stub()->CancelJob(c2.get(), c, &job).error_code(),
            grpc::StatusCode::NOT_FOUND);
  traind::v1::GetJobResultRequest r;
  r.set_job_id("000000000000");
  traind::v1::JobResult res;
  auto c3 = Ctx();
  EXPECT_EQ(daemon_->stub()->GetJobResult(c3.get(), r, &res).error_code(),
            grpc::StatusCode::NOT_FOUND);
  std::vector<JobEvent> events;
  EXPECT_EQ(WatchAll(daemon_->stub(), "000000000000", 0, &events).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(DaemonTest, CancelRunningJob) {
  traind::v1::JobSpec spec = ExampleIrisSpec();
  spec.mutable_training()->set_epochs(100000);  // runs until cancelled
  auto job = Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  // Wait until a fold reports an epoch, then cancel.
  {
    auto ctx = Ctx(30);
    traind::v1::WatchJobRequest req;
    req.set_job_id(job->id());
    auto reader = daemon_->stub()->WatchJob(ctx.get(), req);
    JobEvent e;
    while (reader->Read(&e) && !e.has_epoch()) {
    }
    ASSERT_TRUE(e.has_epoch());
    ctx->TryCancel();
    reader->Finish();
  }
  traind::v1::CancelJobRequest creq;
  creq.set_job_id(job->id());
  Job after;
  auto ctx = Ctx();
  ASSERT_TRUE(daemon_->stub()->CancelJob(ctx.get(), creq, &after).ok());
  EXPECT_TRUE(after.state() == Job::CANCELLING || after.state() == Job::CANCELLED);
  std::vector<JobEvent> events;
  ASSERT_TRUE(WatchAll(daemon_->stub(), job->id(), 0, &events, 30).ok());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().job_state().state(), Job::CANCELLED);
  Job done = Get(job->id());
  EXPECT_EQ(done.state(), Job::CANCELLED);
  for (const Task& t : done.tasks()) EXPECT_EQ(t.state(), Task::CANCELLED);
  // The workers stopped on SIGTERM themselves (no kill needed) and are gone.
  for (const Task& t : done.tasks()) {
    for (const auto& a : t.attempts()) {
      EXPECT_NE(kill(a.pid(), 0), 0) << "worker " << a.pid() << " still alive";
    }
  }
}

TEST_F(DaemonTest, DevicesInfoAndHealth) {
  traind::v1::ListDevicesResponse devices;
  auto c1 = Ctx();
  ASSERT_TRUE(daemon_->stub()->ListDevices(c1.get(), {}, &devices).ok());
  ASSERT_GE(devices.devices_size(), 1);
  EXPECT_EQ(devices.devices(0).id(), "cpu");
  EXPECT_EQ(devices.devices(0).slots(), 2);
  EXPECT_GT(devices.devices(0).cores(), 0);
  EXPECT_GT(devices.devices(0).memory_total_bytes(), 0);

  traind::v1::ServerInfo info;
  auto c2 = Ctx();
  ASSERT_TRUE(daemon_->stub()->GetServerInfo(c2.get(), {}, &info).ok());
  EXPECT_EQ(info.cpu_slots(), 2);
  EXPECT_EQ(info.listen_addresses(0), daemon_->address());

  // The standard health service answers SERVING.
  auto health = grpc::health::v1::Health::NewStub(daemon_->channel());
  grpc::health::v1::HealthCheckRequest hreq;
  grpc::health::v1::HealthCheckResponse hresp;
  auto c3 = Ctx();
  ASSERT_TRUE(health->Check(c3.get(), hreq, &hresp).ok());
  EXPECT_EQ(hresp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

}  // namespace
}  // namespace traind::testing
