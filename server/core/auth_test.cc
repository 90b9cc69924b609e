#include "server/core/auth.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/ascii.h"
#include "gtest/gtest.h"
#include "server/core/policy.h"
#include "tests/testing/temp_dir.h"

namespace traind::server {
namespace {

std::string TokensYaml() {
  return absl::StrCat("tokens:\n", "  - {name: vera, role: viewer, sha256: ", Sha256Hex("v-token"),
                      "}\n", "  - {name: sam, role: submitter, sha256: ", Sha256Hex("s-token"),
                      "}\n", "  - {name: ada, role: admin, sha256: ", Sha256Hex("a-token"), "}\n");
}

TEST(AuthTest, Sha256HexKnownAnswer) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(AuthTest, TokensAreLookedUpByHash) {
  auto store = TokenStore::Parse(TokensYaml(), "tokens.yaml");
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->size(), 3u);
  auto sam = (*store)->Lookup("s-token");
  ASSERT_TRUE(sam.has_value());
  EXPECT_EQ(sam->name, "sam");
  EXPECT_EQ(sam->role, Role::kSubmitter);
  EXPECT_FALSE((*store)->Lookup("s-token ").has_value());
  EXPECT_FALSE((*store)->Lookup("").has_value());
  EXPECT_FALSE((*store)->Lookup(Sha256Hex("s-token")).has_value()) << "the hash is not the token";
}

TEST(AuthTest, BadTokensFilesNameLineAndKey) {
  struct Case {
    std::string text;
    std::string expect;
  };
  const std::string h = Sha256Hex("x");
  for (const Case& c : std::vector<Case>{
           {"tokenz: []\n", "f:1: tokenz: unknown key"},
           {"tokens:\n  - {name: a, role: boss, sha256: " + h + "}\n", "f:2: tokens[0].role"},
           {"tokens:\n  - {name: a, role: admin, sha256: abc}\n", "f:2: tokens[0].sha256"},
           {"tokens:\n  - {name: a, role: admin, token: abc}\n", "f:2: tokens[0].token: unknown"},
           {"tokens:\n  - {name: local, role: admin, sha256: " + h + "}\n", "f:2: tokens[0].name"},
           {"tokens:\n  - {role: admin, sha256: " + h + "}\n", "f:2: tokens[0].name: required"},
           {"tokens:\n  - {name: a, role: admin, sha256: " + h +
                "}\n  - {name: a, role: viewer, "
                "sha256: " +
                h + "}\n",
            "f:3: tokens[1].name: \"a\" appears twice"},
           // Two names, one token: its role would be the last entry's.
           {"tokens:\n  - {name: vera, role: viewer, sha256: " + h +
                "}\n  - {name: root, role: admin, sha256: " + absl::AsciiStrToUpper(h) + "}\n",
            "f:3: tokens[1].sha256: the same token as \"vera\"'s (one entry per token)"},
       }) {
    auto store = TokenStore::Parse(c.text, "f");
    ASSERT_FALSE(store.ok()) << c.text;
    EXPECT_EQ(store.status().message().rfind(c.expect, 0), 0u) << store.status().message();
  }
}

TEST(AuthTest, UnixPeersAreTheLocalAdmin) {
  Authenticator auth(std::make_shared<TokenStore>());
  auto c = auth.Authenticate("unix:/tmp/x.sock", std::nullopt);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->name, "local");
  EXPECT_EQ(c->role, Role::kAdmin);
  EXPECT_TRUE(c->local);
}

TEST(AuthTest, TcpPeersNeedABearerToken) {
  auto store = TokenStore::Parse(TokensYaml(), "t");
  ASSERT_TRUE(store.ok());
  Authenticator auth(*store);
  const std::string peer = "ipv4:127.0.0.1:5555";
  EXPECT_EQ(auth.Authenticate(peer, std::nullopt).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Authenticate(peer, "Basic abc").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Authenticate(peer, "Bearer nope").status().code(),
            absl::StatusCode::kUnauthenticated);
  auto ok = auth.Authenticate(peer, "bearer a-token");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->name, "ada");
  EXPECT_FALSE(ok->local);
}

TEST(AuthTest, RoleMatrix) {
  auto store = TokenStore::Parse(TokensYaml(), "t");
  ASSERT_TRUE(store.ok());
  Authenticator auth(*store);
  const std::vector<Rpc> reads = {Rpc::kGetJob,       Rpc::kListJobs,    Rpc::kWatchJob,
                                  Rpc::kGetJobResult, Rpc::kListDevices, Rpc::kGetServerInfo};
  const std::vector<Rpc> writes = {Rpc::kSubmitJob, Rpc::kCancelJob};
  for (Rpc r : reads) {
    for (const char* t : {"Bearer v-token", "Bearer s-token", "Bearer a-token"}) {
      EXPECT_TRUE(auth.Authorize("ipv4:127.0.0.1:1", t, r).ok()) << RpcName(r) << " " << t;
    }
  }
  for (Rpc r : writes) {
    auto denied = auth.Authorize("ipv6:[::1]:1", "Bearer v-token", r);
    EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied) << RpcName(r);
    EXPECT_NE(denied.status().message().find("vera (viewer)"), std::string::npos);
    EXPECT_TRUE(auth.Authorize("ipv4:127.0.0.1:1", "Bearer s-token", r).ok());
    EXPECT_TRUE(auth.Authorize("ipv4:127.0.0.1:1", "Bearer a-token", r).ok());
  }
}

// Only a regular file is a tokens file: a directory would read as no
// tokens, a FIFO would block start-up; both are refused at once.
TEST(AuthTest, TokensFileMustBeARegularFile) {
  ::traind::testing::TempDir dir{"traind-tokens"};
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(TokenStore::Load(fifo).status().message(),
            "tokens file " + fifo + ": is a FIFO, not a regular file");
  EXPECT_EQ(TokenStore::Load(dir.path()).status().message(),
            "tokens file " + dir.path() + ": is a directory, not a regular file");
  EXPECT_EQ(TokenStore::Load(dir.path() + "/missing").status().message(),
            "tokens file " + dir.path() + "/missing: No such file or directory");
  const std::string file = dir.path() + "/tokens.yaml";
  std::ofstream(file) << TokensYaml();
  auto store = TokenStore::Load(file);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->size(), 3u);
}

TEST(AuthTest, SubmittersCancelOnlyTheirOwnJobs) {
  Caller sam{"sam", Role::kSubmitter, false};
  Caller ada{"ada", Role::kAdmin, false};
  Caller vera{"vera", Role::kViewer, false};
  EXPECT_TRUE(MayCancel(sam, "sam", "j1").ok());
  EXPECT_EQ(MayCancel(sam, "ada", "j1").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(MayCancel(ada, "sam", "j1").ok());
  EXPECT_EQ(MayCancel(vera, "vera", "j1").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(MayPredict(sam, "sam", "j1").ok());
  EXPECT_TRUE(MayPredict(ada, "sam", "j1").ok());
  EXPECT_EQ(MayPredict(sam, "ada", "j1").message(),
            "sam (submitter) may not predict with job j1 of ada: a submitter predicts with only "
            "its own jobs");
}

class DataRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ + "/root/sub");
    std::filesystem::create_directories(dir_ + "/outside");
    std::ofstream(dir_ + "/root/sub/in.csv") << "a\n";
    std::ofstream(dir_ + "/outside/secret.csv") << "a\n";
    std::filesystem::create_symlink(dir_ + "/outside/secret.csv", dir_ + "/root/link.csv");
    std::filesystem::create_symlink(dir_ + "/outside", dir_ + "/root/linkdir");
    std::filesystem::create_symlink(dir_ + "/root/sub/in.csv", dir_ + "/root/inlink.csv");
  }
  ::traind::testing::TempDir scratch_{"traind-roots"};
  const std::string dir_ = scratch_.path();
};

TEST_F(DataRootsTest, PathsMustResolveInsideARoot) {
  auto roots = DataRoots::Create({dir_ + "/root"});
  ASSERT_TRUE(roots.ok()) << roots.status();
  auto in = roots->Confine("spec.data.path", dir_ + "/root/sub/in.csv");
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(*in, dir_ + "/root/sub/in.csv");
  auto inlink = roots->Confine("spec.data.path", dir_ + "/root/inlink.csv");
  ASSERT_TRUE(inlink.ok());
  EXPECT_EQ(*inlink, dir_ + "/root/sub/in.csv") << "resolved, so the worker opens what was checked";
  for (const std::string& escape :
       {dir_ + "/root/../outside/secret.csv", dir_ + "/root/sub/../../outside/secret.csv",
        dir_ + "/outside/secret.csv", dir_ + "/root/link.csv", dir_ + "/root/linkdir/secret.csv",
        std::string("/etc/passwd")}) {
    auto denied = roots->Confine("spec.data.path", escape);
    EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied) << escape;
    EXPECT_EQ(denied.status().message().rfind("spec.data.path: " + escape, 0), 0u)
        << denied.status().message();
  }
  // A sibling whose name starts with the root's name is not inside it.
  std::filesystem::create_directories(dir_ + "/rootx");
  std::ofstream(dir_ + "/rootx/a.csv") << "a\n";
  EXPECT_EQ(roots->Confine("f", dir_ + "/rootx/a.csv").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(roots->Confine("f", dir_ + "/root/none.csv").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DataRootsTest, ConfineSpecRewritesPaths) {
  auto roots = DataRoots::Create({dir_ + "/root"});
  ASSERT_TRUE(roots.ok());
  traind::v1::JobSpec spec;
  spec.mutable_data()->set_path(dir_ + "/root/inlink.csv");
  ASSERT_TRUE(roots->ConfineSpec(&spec).ok());
  EXPECT_EQ(spec.data().path(), dir_ + "/root/sub/in.csv");
  spec.mutable_cross_validation()->set_validation_path(dir_ + "/root/link.csv");
  absl::Status s = roots->ConfineSpec(&spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message().rfind("spec.cross_validation.validation_path: ", 0), 0u) << s.message();
}

TEST_F(DataRootsTest, MissingRootIsAnError) {
  EXPECT_FALSE(DataRoots::Create({dir_ + "/nope"}).ok());
  EXPECT_FALSE(DataRoots::Create({dir_ + "/root/sub/in.csv"}).ok());
}

TEST(SpecLimitsTest, NamesFieldAndLimit) {
  LimitsConfig limits;
  limits.max_layers = 2;
  limits.max_units = 100;
  limits.max_epochs = 50;
  traind::v1::JobSpec spec;
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(10);
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  spec.mutable_training()->set_epochs(50);
  EXPECT_TRUE(CheckSpecLimits(spec, limits).ok());
  spec.mutable_model()->mutable_layers(0)->mutable_dense()->set_units(101);
  absl::Status s = CheckSpecLimits(spec, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("spec.model.layers[0].dense.units: 101", 0), 0u) << s.message();
  spec.mutable_model()->mutable_layers(0)->mutable_dense()->set_units(10);
  spec.mutable_model()->add_layers()->mutable_dropout();
  s = CheckSpecLimits(spec, limits);
  EXPECT_EQ(s.message().rfind("spec.model.layers: 3 layers", 0), 0u) << s.message();
  spec.mutable_model()->mutable_layers()->RemoveLast();
  spec.mutable_training()->set_epochs(51);
  s = CheckSpecLimits(spec, limits);
  EXPECT_EQ(s.message().rfind("spec.training.epochs: 51", 0), 0u) << s.message();
}

// training.batches and the task count have limits of their own: neither
// walks around limits.max_epochs.
TEST(PolicyTest, BatchesAndTasksAreLimited) {
  LimitsConfig limits;
  limits.max_batches = 1000;
  limits.max_tasks = 10;
  traind::v1::JobSpec spec;
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  spec.mutable_training()->set_batches(1000);
  EXPECT_TRUE(CheckSpecLimits(spec, limits).ok());
  spec.mutable_training()->set_batches(4611686018427387904);
  absl::Status s = CheckSpecLimits(spec, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "spec.training.batches: 4611686018427387904 batches, more than this traind allows "
            "(1000, limits.max_batches)");
  spec.mutable_training()->set_batches(10);

  struct Case {
    int folds, repeats;
    bool refit;
    std::string message;  // "" when accepted
  };
  for (const Case& c : std::vector<Case>{
           {5, 2, false, ""},
           {10, 1, false, ""},
           {10, 1, true,
            "spec.cross_validation: 10 folds × 1 repeats + refit = 11 tasks, more than this traind "
            "allows (10, limits.max_tasks)"},
           {3, 4, false,
            "spec.cross_validation: 3 folds × 4 repeats = 12 tasks, more than this traind allows "
            "(10, limits.max_tasks)"},
           // No int overflow on the way: 2^31-1 × 2^31-1.
           {2147483647, 2147483647, true,
            "spec.cross_validation: 2147483647 folds × 2147483647 repeats + refit = "
            "4611686014132420610 tasks, more than this traind allows (10, limits.max_tasks)"},
       }) {
    traind::v1::JobSpec cv = spec;
    cv.mutable_cross_validation()->set_folds(c.folds);
    cv.mutable_cross_validation()->set_repeats(c.repeats);
    cv.mutable_cross_validation()->set_refit(c.refit);
    s = CheckSpecLimits(cv, limits);
    if (c.message.empty()) {
      EXPECT_TRUE(s.ok()) << c.folds << "x" << c.repeats << ": " << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(s.message(), c.message);
    }
  }
  // A holdout is one task (+ refit).
  traind::v1::JobSpec holdout = spec;
  holdout.mutable_cross_validation()->set_validation_fraction(0.2);
  holdout.mutable_cross_validation()->set_refit(true);
  limits.max_tasks = 2;
  EXPECT_TRUE(CheckSpecLimits(holdout, limits).ok());
  limits.max_tasks = 1;
  EXPECT_EQ(CheckSpecLimits(holdout, limits).message(),
            "spec.cross_validation: 1 folds × 1 repeats + refit = 2 tasks, more than this traind "
            "allows (1, limits.max_tasks)");
  // A search: trials × fold tasks (+ the refit of the best trial).
  traind::v1::JobSpec search = spec;
  search.mutable_cross_validation()->set_folds(3);
  search.mutable_search()->mutable_sampler()->mutable_random()->set_trials(3);
  limits.max_tasks = 9;
  EXPECT_TRUE(CheckSpecLimits(search, limits).ok());
  search.mutable_search()->set_refit_best(true);
  EXPECT_EQ(CheckSpecLimits(search, limits).message(),
            "spec.search: 3 trials × 3 fold tasks + refit_best = 10 tasks, more than this traind "
            "allows (9, limits.max_tasks)");
}

// A search's trials are specs of their own: a value a trial sets is held
// to the same limits as the base spec's (10,000,000 epochs in a search
// space was once accepted).
TEST(PolicyTest, EverySearchTrialIsCheckedAsASpec) {
  LimitsConfig limits;
  limits.max_epochs = 1000;
  limits.max_units = 512;
  limits.max_batches = 100;
  traind::v1::JobSpec spec;
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(8);
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  spec.mutable_training()->set_epochs(10);
  spec.mutable_cross_validation()->set_folds(2);
  spec.mutable_search()->mutable_sampler()->mutable_grid();
  struct Case {
    std::string path;
    std::vector<double> values;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {"training.epochs", {10, 1000}, ""},
           {"training.epochs",
            {10, 10000000},
            "spec.search: trial 1 (training.epochs = 10000000): spec.training.epochs: 10000000 "
            "epochs, more than this traind allows (1000, limits.max_epochs)"},
           {"model.layers[0].dense.units",
            {1000000},
            "spec.search: trial 0 (model.layers[0].dense.units = 1000000): "
            "spec.model.layers[0].dense.units: 1000000 units, more than this traind allows (512, "
            "limits.max_units)"},
           {"training.batches",
            {5, 1000000000},
            "spec.search: trial 1 (training.batches = 1000000000): spec.training.batches: "
            "1000000000 batches, more than this traind allows (100, limits.max_batches)"},
       }) {
    traind::v1::JobSpec search = spec;
    traind::v1::SearchDimension* d = search.mutable_search()->add_space();
    d->set_path(c.path);
    for (double v : c.values) d->mutable_values()->add_values()->set_number_value(v);
    const absl::Status s = CheckSpecLimits(search, limits);
    if (c.message.empty()) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.path;
      EXPECT_EQ(std::string(s.message()), c.message);
    }
  }
  // training.batches as epochs, trial by trial, once the rows are known.
  traind::v1::JobSpec batches = spec;
  batches.mutable_training()->set_epochs(0);
  batches.mutable_training()->set_batch_size(10);
  traind::v1::SearchDimension* d = batches.mutable_search()->add_space();
  d->set_path("training.batches");
  d->mutable_values()->add_values()->set_number_value(50);
  d->mutable_values()->add_values()->set_number_value(90);
  spec::ValidatedShape shape;
  shape.min_train_rows = 1;  // one batch an epoch
  limits.max_epochs = 60;
  EXPECT_EQ(
      CheckDataLimits(batches, shape, limits).message(),
      "spec.search: trial 1 (training.batches = 90): spec.training.batches: 90 batches are 90 "
      "epochs of 1 batch (1 training rows, batch_size 10), more than this traind allows (60, "
      "limits.max_epochs)");
}

// What validation learned of the data: rows, columns, and the epochs
// training.batches amounts to on the task with the fewest training rows.
TEST(PolicyTest, DataLimits) {
  LimitsConfig limits;
  limits.max_rows = 100;
  limits.max_columns = 5;
  limits.max_epochs = 10;
  traind::v1::JobSpec spec;
  spec.mutable_data()->set_path("/data/d.csv");
  spec.mutable_training()->set_epochs(10);
  spec.mutable_training()->set_batch_size(8);
  spec::ValidatedShape shape;
  EXPECT_TRUE(CheckDataLimits(spec, shape, limits).ok()) << "nothing known, nothing to check";
  shape.rows = 100;
  shape.columns = 5;
  shape.min_train_rows = 80;
  EXPECT_TRUE(CheckDataLimits(spec, shape, limits).ok());

  spec::ValidatedShape big = shape;
  big.rows = 101;
  EXPECT_EQ(CheckDataLimits(spec, big, limits).message(),
            "spec.data.path: /data/d.csv has 101 rows, more than this traind allows (100, "
            "limits.max_rows)");
  big = shape;
  big.columns = 6;
  EXPECT_EQ(CheckDataLimits(spec, big, limits).message(),
            "spec.data.path: /data/d.csv has 6 columns, more than this traind allows (5, "
            "limits.max_columns)");
  big = shape;
  big.validation_rows = 101;
  traind::v1::JobSpec val = spec;
  val.mutable_cross_validation()->set_validation_path("/data/v.csv");
  EXPECT_EQ(CheckDataLimits(val, big, limits).message(),
            "spec.cross_validation.validation_path: /data/v.csv has 101 rows, more than this "
            "traind allows (100, limits.max_rows)");

  // 80 rows in batches of 8: 10 batches an epoch. 100 batches are 10 epochs.
  traind::v1::JobSpec batches = spec;
  batches.mutable_training()->clear_epochs();
  batches.mutable_training()->set_batches(100);
  EXPECT_TRUE(CheckDataLimits(batches, shape, limits).ok());
  batches.mutable_training()->set_batches(101);  // a last, partial 11th epoch
  absl::Status s = CheckDataLimits(batches, shape, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "spec.training.batches: 101 batches are 11 epochs of 10 batches (80 training rows, "
            "batch_size 8), more than this traind allows (10, limits.max_epochs)");
  // One batch an epoch: every batch is an epoch (and an event).
  batches.mutable_training()->set_batch_size(1000);
  batches.mutable_training()->set_batches(4611686018427387904);
  EXPECT_EQ(std::string(CheckDataLimits(batches, shape, limits).message()),
            "spec.training.batches: 4611686018427387904 batches are 4611686018427387904 epochs "
            "of 1 batch (80 training rows, batch_size 1000), more than this traind allows (10, "
            "limits.max_epochs)");
}

}  // namespace
}  // namespace traind::server
