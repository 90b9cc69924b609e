#include "server/api/auth.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "server/api/policy.h"
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

TEST(AuthTest, SubmittersCancelOnlyTheirOwnJobs) {
  Caller sam{"sam", Role::kSubmitter, false};
  Caller ada{"ada", Role::kAdmin, false};
  Caller vera{"vera", Role::kViewer, false};
  EXPECT_TRUE(MayCancel(sam, "sam", "j1").ok());
  EXPECT_EQ(MayCancel(sam, "ada", "j1").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(MayCancel(ada, "sam", "j1").ok());
  EXPECT_EQ(MayCancel(vera, "vera", "j1").code(), absl::StatusCode::kPermissionDenied);
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

}  // namespace
}  // namespace traind::server
