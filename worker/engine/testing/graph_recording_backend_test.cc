// The graph-recording backend over the CPU backend: recorded ops run only
// when the graph is launched, with the arguments of the recording and the
// tensors' contents of the launch; the results equal the CPU backend's own
// calls bit for bit; calls that cannot be recorded fail the capture.
#include "worker/engine/testing/graph_recording_backend.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "base/random.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/cpu/cpu_backend.h"

namespace traind::engine {
namespace {

constexpr char kNotAllowed[] = ": not allowed while capturing an op graph";

std::unique_ptr<Backend> NewCpuBackend() {
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend();
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? std::move(backend).value() : nullptr;
}

// The bit patterns of floats, for exact comparisons (NaN and signed zeros
// included).
std::vector<uint32_t> Bits(const std::vector<float>& values) {
  std::vector<uint32_t> bits(values.size());
  if (!values.empty()) std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
  return bits;
}

class GraphRecordingBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::unique_ptr<Backend> cpu = NewCpuBackend();
    ASSERT_NE(cpu, nullptr);
    rec_ = testing::NewGraphRecordingBackend(std::move(cpu), "recording cpu");
    eager_ = NewCpuBackend();
    ASSERT_NE(eager_, nullptr);
  }

  // A [rows, cols] f32 tensor of `b` holding `values`.
  static Tensor Matrix(Backend& b, int64_t rows, int64_t cols, const std::vector<float>& values) {
    Tensor t = std::move(b.Allocate2d(DType::kF32, rows, cols)).value();
    EXPECT_EQ(static_cast<int64_t>(values.size()), t.size());
    EXPECT_TRUE(b.CopyFromHost(values.data(), &t).ok());
    return t;
  }
  static Tensor Vector(Backend& b, const std::vector<float>& values) {
    Tensor t = std::move(b.Allocate1d(DType::kF32, static_cast<int64_t>(values.size()))).value();
    EXPECT_TRUE(b.CopyFromHost(values.data(), &t).ok());
    return t;
  }
  static Tensor Labels(Backend& b, const std::vector<int32_t>& values) {
    Tensor t = std::move(b.Allocate1d(DType::kS32, static_cast<int64_t>(values.size()))).value();
    EXPECT_TRUE(b.CopyFromHost(values.data(), &t).ok());
    return t;
  }
  static std::vector<float> Read(Backend& b, const Tensor& t) {
    std::vector<float> values(static_cast<size_t>(t.size()));
    EXPECT_TRUE(b.CopyToHost(t, values.data()).ok());
    return values;
  }
  static void Write(Backend& b, const std::vector<float>& values, Tensor* t) {
    ASSERT_EQ(static_cast<int64_t>(values.size()), t->size());
    ASSERT_TRUE(b.CopyFromHost(values.data(), t).ok());
  }
  static std::vector<float> RandomValues(int64_t n, Rng& rng) {
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) v = static_cast<float>(2 * rng.Uniform() - 1);
    return values;
  }

  std::unique_ptr<Backend> rec_;    // the graph-recording backend over a CPU backend
  std::unique_ptr<Backend> eager_;  // a second CPU backend: the reference
};

TEST_F(GraphRecordingBackendTest, ForwardsEveryCallOutsideACapture) {
  EXPECT_EQ(rec_->name(), "recording cpu");
  Tensor t = Vector(*rec_, {1, -2, 3});
  ASSERT_TRUE(rec_->Scale(2, &t).ok());
  EXPECT_EQ(Read(*rec_, t), (std::vector<float>{2, -4, 6}));
  absl::StatusOr<double> sq = rec_->SumOfSquares(t);
  ASSERT_TRUE(sq.ok()) << sq.status();
  EXPECT_EQ(*sq, 56.0);
  auto kernel = rec_->CreateDenseKernel(1, 3, 1, DenseActivation::kLinear);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  Tensor x = Matrix(*rec_, 1, 3, {1, 2, 3});
  Tensor w = Matrix(*rec_, 3, 1, {1, 10, 100});
  Tensor b = Vector(*rec_, {0.5});
  Tensor y = Matrix(*rec_, 1, 1, {0});
  ASSERT_TRUE((*kernel)->Forward(x, w, b, &y).ok());
  EXPECT_EQ(Read(*rec_, y), (std::vector<float>{321.5f}));
}

// Copy, Scale, ClipByValue, Fill and a Scale of a temporary row view: none
// runs during the capture; each launch runs them in order on the tensors'
// current contents.
TEST_F(GraphRecordingBackendTest, RecordedOpsRunAtEachLaunchOnTheCurrentContents) {
  Tensor src = Vector(*rec_, {1, 2, 3, -4});
  Tensor dst = Vector(*rec_, {0, 0, 0, 0});
  Tensor filled = Vector(*rec_, {9, 9});
  Tensor m = Matrix(*rec_, 2, 2, {1, 2, 3, 4});
  float factor = 2;
  absl::StatusOr<std::unique_ptr<OpGraph>> graph = rec_->Capture([&]() -> absl::Status {
    if (absl::Status s = rec_->Copy(src, &dst); !s.ok()) return s;
    if (absl::Status s = rec_->Scale(factor, &dst); !s.ok()) return s;
    if (absl::Status s = rec_->ClipByValue(5, &dst); !s.ok()) return s;
    if (absl::Status s = rec_->Fill(0.25f, &filled); !s.ok()) return s;
    Tensor row = m.Rows(1, 1);  // gone before the graph runs: its memory is recorded
    return rec_->Scale(3, &row);
  });
  ASSERT_TRUE(graph.ok()) << graph.status();
  factor = 100;  // recorded by value
  EXPECT_EQ(Read(*rec_, dst), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(Read(*rec_, filled), (std::vector<float>{9, 9}));
  EXPECT_EQ(Read(*rec_, m), (std::vector<float>{1, 2, 3, 4}));

  ASSERT_TRUE((*graph)->Launch().ok());
  EXPECT_EQ(Read(*rec_, dst), (std::vector<float>{2, 4, 5, -5}));
  EXPECT_EQ(Read(*rec_, filled), (std::vector<float>{0.25f, 0.25f}));
  EXPECT_EQ(Read(*rec_, m), (std::vector<float>{1, 2, 9, 12}));

  Write(*rec_, {0.5f, -1, 2.5f, 10}, &src);
  Write(*rec_, {7, 7}, &filled);
  ASSERT_TRUE((*graph)->Launch().ok());
  EXPECT_EQ(Read(*rec_, dst), (std::vector<float>{1, -2, 5, 5}));
  EXPECT_EQ(Read(*rec_, filled), (std::vector<float>{0.25f, 0.25f}));
  EXPECT_EQ(Read(*rec_, m), (std::vector<float>{1, 2, 27, 36}));

  // Outside the capture, ops run at once again.
  ASSERT_TRUE(rec_->Scale(2, &src).ok());
  EXPECT_EQ(Read(*rec_, src), (std::vector<float>{1, -2, 5, 20}));
}

// AdamUpdateMany and SgdUpdateMany recorded once, with step 1: every launch
// applies step 1's update (its constants frozen, the step struct and the
// spans' vectors changed afterwards) to the current gradients and state,
// as the CPU backend's own calls with step 1 do.
TEST_F(GraphRecordingBackendTest, OptimizerUpdatesReplayTheirRecordedConstants) {
  Rng rng(7);
  const std::vector<float> p1 = RandomValues(3, rng), p2 = RandomValues(4, rng);
  const std::vector<float> zeros3(3, 0.0f), zeros4(4, 0.0f);
  // Both backends' tensors: params, Adam m and v, SGD velocity, grads.
  struct Set {
    Tensor pa1, pa2, m1, m2, v1, v2, ps1, ps2, vel1, vel2, g1, g2;
  };
  auto make = [&](Backend& b) {
    return Set{Vector(b, p1),           Matrix(b, 2, 2, p2), Vector(b, zeros3),
               Matrix(b, 2, 2, zeros4), Vector(b, zeros3),   Matrix(b, 2, 2, zeros4),
               Vector(b, p1),           Matrix(b, 2, 2, p2), Vector(b, zeros3),
               Matrix(b, 2, 2, zeros4), Vector(b, zeros3),   Matrix(b, 2, 2, zeros4)};
  };
  Set r = make(*rec_);
  Set e = make(*eager_);

  AdamStep adam;
  adam.learning_rate = 0.01;
  adam.step = 1;
  adam.weight_decay = 0.1;
  adam.decoupled = true;
  SgdStep sgd;
  sgd.learning_rate = 0.1;
  sgd.momentum = 0.9;
  sgd.nesterov = true;
  sgd.weight_decay = 0.01;
  const AdamStep adam1 = adam;
  const SgdStep sgd1 = sgd;

  std::vector<const Tensor*> grads = {&r.g1, &r.g2};
  std::vector<Tensor*> params = {&r.pa1, &r.pa2}, m = {&r.m1, &r.m2}, v = {&r.v1, &r.v2};
  std::vector<Tensor*> sgd_params = {&r.ps1, &r.ps2}, velocities = {&r.vel1, &r.vel2};
  absl::StatusOr<std::unique_ptr<OpGraph>> graph = rec_->Capture([&]() -> absl::Status {
    if (absl::Status s = rec_->AdamUpdateMany(adam, grads, m, v, params); !s.ok()) return s;
    return rec_->SgdUpdateMany(sgd, grads, velocities, sgd_params);
  });
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(Read(*rec_, r.pa1), p1);
  EXPECT_EQ(Read(*rec_, r.ps2), p2);
  // What the graph was recorded with, changed: the recording keeps its own.
  adam.step = 5;
  adam.learning_rate = 1;
  sgd.momentum = 0;
  grads = {&r.pa1, &r.pa1};
  params.assign(2, &r.g1);
  velocities.clear();

  for (int launch = 0; launch < 3; ++launch) {
    SCOPED_TRACE(launch);
    const std::vector<float> g1 = RandomValues(3, rng), g2 = RandomValues(4, rng);
    Write(*rec_, g1, &r.g1);
    Write(*rec_, g2, &r.g2);
    Write(*eager_, g1, &e.g1);
    Write(*eager_, g2, &e.g2);
    ASSERT_TRUE((*graph)->Launch().ok());
    ASSERT_TRUE(eager_
                    ->AdamUpdateMany(adam1, {&e.g1, &e.g2}, {&e.m1, &e.m2}, {&e.v1, &e.v2},
                                     {&e.pa1, &e.pa2})
                    .ok());
    ASSERT_TRUE(
        eager_->SgdUpdateMany(sgd1, {&e.g1, &e.g2}, {&e.vel1, &e.vel2}, {&e.ps1, &e.ps2}).ok());
    for (auto [rt, et] :
         {std::pair{&r.pa1, &e.pa1}, std::pair{&r.pa2, &e.pa2}, std::pair{&r.m1, &e.m1},
          std::pair{&r.m2, &e.m2}, std::pair{&r.v1, &e.v1}, std::pair{&r.v2, &e.v2},
          std::pair{&r.ps1, &e.ps1}, std::pair{&r.ps2, &e.ps2}, std::pair{&r.vel1, &e.vel1},
          std::pair{&r.vel2, &e.vel2}}) {
      EXPECT_EQ(Bits(Read(*rec_, *rt)), Bits(Read(*eager_, *et)));
    }
    EXPECT_EQ(Read(*rec_, r.g1), g1);  // the gradients are not modified
  }
  // The parameters moved (the check above is not vacuous).
  EXPECT_NE(Read(*rec_, r.pa1), p1);
  EXPECT_NE(Read(*rec_, r.ps1), p1);
}

// A training step's ops (dense forward, loss, dense backward, a slot copy)
// recorded once: each launch equals the same calls made one by one on a
// second CPU backend, bit for bit.
TEST_F(GraphRecordingBackendTest, DenseLossStepEqualsTheEagerCalls) {
  const int64_t batch = 5, in = 4, out = 3;
  Rng rng(42);
  const std::vector<float> w0 = RandomValues(in * out, rng), b0 = RandomValues(out, rng);
  const std::vector<float> sentinel(static_cast<size_t>(batch * out), 77.0f);
  struct Set {
    Tensor x, w, b, y, targets, dy, dw, db, dx, pred;
    std::unique_ptr<DenseKernel> dense;
    std::unique_ptr<LossKernel> loss;
  };
  LossKernelOptions loss_options;
  loss_options.kind = LossKind::kSoftmaxCrossEntropy;
  loss_options.width = out;
  loss_options.max_batch = batch;
  loss_options.slots = 2;
  loss_options.weights = {1.0, 2.0, 0.5};
  loss_options.label_smoothing = 0.1;
  auto make = [&](Backend& bk) {
    Set s;
    s.x = Matrix(bk, batch, in, std::vector<float>(static_cast<size_t>(batch * in), 0.0f));
    s.w = Matrix(bk, in, out, w0);
    s.b = Vector(bk, b0);
    s.y = Matrix(bk, batch, out, sentinel);
    s.targets = Labels(bk, std::vector<int32_t>(static_cast<size_t>(batch), 0));
    s.dy = Matrix(bk, batch, out, sentinel);
    s.dw = Matrix(bk, in, out, std::vector<float>(static_cast<size_t>(in * out), 77.0f));
    s.db = Vector(bk, std::vector<float>(static_cast<size_t>(out), 77.0f));
    s.dx = Matrix(bk, batch, in, std::vector<float>(static_cast<size_t>(batch * in), 77.0f));
    s.pred = Matrix(bk, batch, out, sentinel);
    DenseKernelOptions dense_options;
    dense_options.activation.kind = DenseActivation::kLeakyRelu;
    dense_options.activation.alpha = 0.1f;
    s.dense = std::move(bk.CreateDenseKernel(batch, in, out, dense_options)).value();
    s.loss = std::move(bk.CreateLossKernel(loss_options)).value();
    return s;
  };
  Set r = make(*rec_);
  Set e = make(*eager_);
  const double grad_scale = 1.0 / batch;
  auto step = [&](Backend& bk, Set& s) -> absl::Status {
    (void)bk;
    if (absl::Status st = s.dense->Forward(s.x, s.w, s.b, &s.y); !st.ok()) return st;
    if (absl::Status st = s.loss->Compute(s.y, s.targets, grad_scale, &s.dy, &s.pred, 1);
        !st.ok()) {
      return st;
    }
    if (absl::Status st = s.dense->Backward(s.x, s.w, s.y, &s.dy, &s.dw, &s.db, &s.dx); !st.ok()) {
      return st;
    }
    return s.loss->CopySlot(1, 0);
  };
  absl::StatusOr<std::unique_ptr<OpGraph>> graph = rec_->Capture([&] { return step(*rec_, r); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(Read(*rec_, r.y), sentinel);
  EXPECT_EQ(Read(*rec_, r.dy), sentinel);
  EXPECT_EQ(Read(*rec_, r.pred), sentinel);
  double slots[2] = {-1, -1};
  ASSERT_TRUE(r.loss->ReadSlots(0, 2, slots).ok());
  EXPECT_EQ(slots[0], 0.0);
  EXPECT_EQ(slots[1], 0.0);

  for (int launch = 0; launch < 2; ++launch) {
    SCOPED_TRACE(launch);
    const std::vector<float> x = RandomValues(batch * in, rng);
    std::vector<int32_t> labels(static_cast<size_t>(batch));
    for (int32_t& c : labels) c = static_cast<int32_t>(rng.UniformInt(out));
    Write(*rec_, x, &r.x);
    Write(*eager_, x, &e.x);
    ASSERT_TRUE(rec_->CopyFromHost(labels.data(), &r.targets).ok());
    ASSERT_TRUE(eager_->CopyFromHost(labels.data(), &e.targets).ok());

    ASSERT_TRUE((*graph)->Launch().ok());
    ASSERT_TRUE(step(*eager_, e).ok());

    for (auto [rt, et] :
         {std::pair{&r.y, &e.y}, std::pair{&r.dy, &e.dy}, std::pair{&r.dw, &e.dw},
          std::pair{&r.db, &e.db}, std::pair{&r.dx, &e.dx}, std::pair{&r.pred, &e.pred}}) {
      EXPECT_EQ(Bits(Read(*rec_, *rt)), Bits(Read(*eager_, *et)));
    }
    double rs[2], es[2];
    ASSERT_TRUE(r.loss->ReadSlots(0, 2, rs).ok());
    ASSERT_TRUE(e.loss->ReadSlots(0, 2, es).ok());
    EXPECT_GT(rs[1], 0.0);
    EXPECT_EQ(rs[0], es[0]);
    EXPECT_EQ(rs[1], es[1]);
    EXPECT_EQ(rs[0], rs[1]);  // CopySlot(1, 0) ran after the Compute
  }
}

// Every call that cannot be recorded fails the capture, whether record()
// returns its error or ignores it; nothing recorded runs; the backend works
// as before afterwards.
TEST_F(GraphRecordingBackendTest, CallsThatCannotBeRecordedFailTheCapture) {
  Tensor t = Vector(*rec_, {1, 2, 3});
  Tensor u = Matrix(*rec_, 3, 1, {5, 6, 7});  // [rows, 1]: GatherRows' shape
  Tensor labels = Labels(*rec_, {0, 0, 0});
  const std::vector<float> host = {10, 20, 30};
  const std::vector<int32_t> host_labels = {1, 2, 0};
  const std::vector<int64_t> rows = {2, 0, 1};
  std::vector<float> out(3);
  LossKernelOptions loss_options;
  loss_options.width = 3;
  std::unique_ptr<LossKernel> loss = std::move(rec_->CreateLossKernel(loss_options)).value();
  absl::StatusOr<std::unique_ptr<OpGraph>> earlier =
      rec_->Capture([&] { return rec_->Scale(10, &u); });
  ASSERT_TRUE(earlier.ok()) << earlier.status();
  bool nested_ran = false;

  const std::vector<std::pair<std::string, std::function<absl::Status()>>> refused = {
      {"Allocate1d", [&] { return rec_->Allocate1d(DType::kF32, 3).status(); }},
      {"Allocate2d", [&] { return rec_->Allocate2d(DType::kF32, 1, 3).status(); }},
      {"CopyFromHost", [&] { return rec_->CopyFromHost(host.data(), &u); }},
      {"CopyToHost", [&] { return rec_->CopyToHost(u, out.data()); }},
      {"GatherRows", [&] { return rec_->GatherRows(host.data(), 1, rows, &u); }},
      {"GatherLabels", [&] { return rec_->GatherLabels(host_labels.data(), rows, &labels); }},
      {"CreateDenseKernel",
       [&] { return rec_->CreateDenseKernel(3, 1, 1, DenseActivation::kLinear).status(); }},
      {"CreateLossKernel", [&] { return rec_->CreateLossKernel(loss_options).status(); }},
      {"SumOfSquares", [&] { return rec_->SumOfSquares(u).status(); }},
      {"LossKernel::ReadSlots",
       [&] {
         double value = 0;
         return loss->ReadSlots(0, 1, &value);
       }},
      {"Capture",
       [&] {
         return rec_
             ->Capture([&] {
               nested_ran = true;
               return rec_->Scale(2, &u);
             })
             .status();
       }},
      {"OpGraph::Launch", [&] { return (*earlier)->Launch(); }},
  };
  for (const auto& [method, call] : refused) {
    for (bool ignore_error : {false, true}) {
      SCOPED_TRACE(method + (ignore_error ? " (error ignored)" : ""));
      absl::Status refusal, after;
      absl::StatusOr<std::unique_ptr<OpGraph>> graph = rec_->Capture([&]() -> absl::Status {
        if (absl::Status s = rec_->Scale(2, &t); !s.ok()) return s;
        refusal = call();
        if (!ignore_error) return refusal;
        after = rec_->Scale(3, &t);  // an invalidated capture records nothing more
        return absl::OkStatus();
      });
      EXPECT_EQ(refusal.code(), absl::StatusCode::kFailedPrecondition) << refusal;
      EXPECT_EQ(refusal.message(), method + kNotAllowed);
      ASSERT_FALSE(graph.ok());
      EXPECT_EQ(graph.status(), refusal);
      if (ignore_error) {
        EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
        EXPECT_NE(after.message().find(method + kNotAllowed), std::string::npos) << after;
      }
      // Nothing ran, the refused call included.
      EXPECT_EQ(Read(*rec_, t), (std::vector<float>{1, 2, 3}));
      EXPECT_EQ(Read(*rec_, u), (std::vector<float>{5, 6, 7}));
      EXPECT_FALSE(nested_ran);
      // Out of the capture: ops run at once.
      ASSERT_TRUE(rec_->Scale(2, &t).ok());
      EXPECT_EQ(Read(*rec_, t), (std::vector<float>{2, 4, 6}));
      Write(*rec_, {1, 2, 3}, &t);
    }
  }

  // Each call works outside a capture, and the next capture records.
  for (const auto& [method, call] : refused) {
    if (method == "Capture") continue;  // records a Scale of u
    EXPECT_TRUE(call().ok()) << method;
  }
  ASSERT_TRUE(rec_->CopyFromHost(host.data(), &u).ok());
  absl::StatusOr<std::unique_ptr<OpGraph>> graph =
      rec_->Capture([&] { return rec_->Scale(2, &t); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(Read(*rec_, t), (std::vector<float>{1, 2, 3}));
  ASSERT_TRUE((*graph)->Launch().ok());
  EXPECT_EQ(Read(*rec_, t), (std::vector<float>{2, 4, 6}));
}

// record()'s error is Capture's; the capture ends all the same.
TEST_F(GraphRecordingBackendTest, AFailedRecordEndsTheCapture) {
  Tensor t = Vector(*rec_, {1, 2});
  absl::StatusOr<std::unique_ptr<OpGraph>> graph = rec_->Capture([&]() -> absl::Status {
    if (absl::Status s = rec_->Scale(2, &t); !s.ok()) return s;
    return absl::InternalError("record failed");
  });
  EXPECT_EQ(graph.status(), absl::InternalError("record failed"));
  EXPECT_EQ(Read(*rec_, t), (std::vector<float>{1, 2}));
  ASSERT_TRUE(rec_->Scale(2, &t).ok());
  EXPECT_EQ(Read(*rec_, t), (std::vector<float>{2, 4}));
  EXPECT_TRUE(rec_->Allocate1d(DType::kF32, 2).ok());
}

// A kernel made before the capture records its ops; making one during it
// is refused (and fails the capture); one made afterwards works.
TEST_F(GraphRecordingBackendTest, KernelsMadeBeforeTheCaptureRecord) {
  auto kernel = rec_->CreateDenseKernel(2, 2, 1, DenseActivation::kRelu);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  Tensor x = Matrix(*rec_, 2, 2, {1, 2, -3, 1});
  Tensor w = Matrix(*rec_, 2, 1, {0.5f, 0.25f});
  Tensor b = Vector(*rec_, {0.125f});
  Tensor y = Matrix(*rec_, 2, 1, {9, 9});

  absl::StatusOr<std::unique_ptr<DenseKernel>> during;
  absl::StatusOr<std::unique_ptr<LossKernel>> loss_during;
  absl::StatusOr<std::unique_ptr<OpGraph>> failed = rec_->Capture([&]() -> absl::Status {
    if (absl::Status s = (*kernel)->Forward(x, w, b, &y); !s.ok()) return s;
    during = rec_->CreateDenseKernel(2, 2, 1, DenseActivation::kRelu);
    loss_during = rec_->CreateLossKernel(LossKernelOptions());
    return absl::OkStatus();
  });
  EXPECT_EQ(during.status(),
            absl::FailedPreconditionError(std::string("CreateDenseKernel") + kNotAllowed));
  EXPECT_EQ(loss_during.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(failed.status(), during.status());
  EXPECT_EQ(Read(*rec_, y), (std::vector<float>{9, 9}));

  absl::StatusOr<std::unique_ptr<OpGraph>> graph =
      rec_->Capture([&] { return (*kernel)->Forward(x, w, b, &y); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(Read(*rec_, y), (std::vector<float>{9, 9}));
  ASSERT_TRUE((*graph)->Launch().ok());
  // relu(1 * 0.5 + 2 * 0.25 + 0.125), relu(-1.5 + 0.25 + 0.125)
  EXPECT_EQ(Read(*rec_, y), (std::vector<float>{1.125f, 0}));
  Write(*rec_, {2, 0, 4, 4}, &x);
  ASSERT_TRUE((*graph)->Launch().ok());
  EXPECT_EQ(Read(*rec_, y), (std::vector<float>{1.125f, 3.125f}));

  auto after = rec_->CreateDenseKernel(2, 2, 1, DenseActivation::kLinear);
  ASSERT_TRUE(after.ok()) << after.status();
  Write(*rec_, {1, 2, -3, 1}, &x);
  ASSERT_TRUE((*after)->Forward(x, w, b, &y).ok());
  EXPECT_EQ(Read(*rec_, y), (std::vector<float>{1.125f, -1.125f}));
}

// An op that fails when the graph runs ends the launch with its error: the
// ops after it do not run.
TEST_F(GraphRecordingBackendTest, LaunchStopsAtTheFirstError) {
  LossKernelOptions options;
  options.width = 2;
  options.max_batch = 2;
  auto loss = rec_->CreateLossKernel(options);
  ASSERT_TRUE(loss.ok()) << loss.status();
  Tensor outputs = Matrix(*rec_, 2, 2, {0, 1, 1, 0});
  Tensor targets = Labels(*rec_, {0, 5});
  Tensor t = Vector(*rec_, {1});
  absl::StatusOr<std::unique_ptr<OpGraph>> graph = rec_->Capture([&]() -> absl::Status {
    if (absl::Status s = (*loss)->Compute(outputs, targets, 1, nullptr, nullptr, 0); !s.ok()) {
      return s;
    }
    return rec_->Scale(2, &t);
  });
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ((*graph)->Launch().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Read(*rec_, t), (std::vector<float>{1}));
  const std::vector<int32_t> valid = {0, 1};
  ASSERT_TRUE(rec_->CopyFromHost(valid.data(), &targets).ok());
  ASSERT_TRUE((*graph)->Launch().ok());
  EXPECT_EQ(Read(*rec_, t), (std::vector<float>{2}));
}

}  // namespace
}  // namespace traind::engine
