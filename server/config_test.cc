#include "server/config.h"

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace traind::server {
namespace {

TEST(ConfigTest, DefaultsAreDocumentedValues) {
  ServerConfig c;
  EXPECT_EQ(c.cpu_slots, 0);
  EXPECT_EQ(c.worker_threads, 1);
  EXPECT_EQ(c.cancel_grace, absl::Seconds(10));
  EXPECT_EQ(c.stop_grace, absl::Seconds(10));
  EXPECT_EQ(c.heartbeat_timeout, absl::Seconds(30));
  EXPECT_EQ(c.max_restarts, 2);
  EXPECT_FALSE(c.insecure);
  EXPECT_TRUE(c.worker_zygote);
  EXPECT_TRUE(c.tensorboard);
  EXPECT_EQ(c.limits.max_request_bytes, 4 << 20);
  EXPECT_EQ(c.limits.max_queued_jobs_per_user, 100);
  EXPECT_EQ(c.limits.max_layers, 64);
  EXPECT_EQ(c.limits.max_units, 65536);
  EXPECT_EQ(c.limits.max_epochs, 100000);
}

TEST(ConfigTest, ParsesEveryKey) {
  ServerConfig c;
  ASSERT_TRUE(ParseConfig(R"(
state_dir: /var/lib/traind
listen: [unix:/run/traind/traind.sock, "0.0.0.0:7443"]
cpu_slots: 8
worker_threads: 2
worker: /usr/lib/traind/traind-worker
worker_zygote: false
tensorboard: false
cancel_grace: 5s
stop_grace: 1m
heartbeat_timeout: 45
max_restarts: 3
data_roots: [/srv/data, /home/shared]
tls: {cert: /etc/traind/cert.pem, key: /etc/traind/key.pem, client_ca: /etc/traind/ca.pem}
tokens_file: /etc/traind/tokens.yaml
insecure: false
limits:
  max_request_bytes: 1048576
  max_queued_jobs_per_user: 10
  max_layers: 16
  max_units: 4096
  max_epochs: 1000
)",
                          "t.yaml", &c)
                  .ok());
  EXPECT_EQ(c.state_dir, "/var/lib/traind");
  ASSERT_EQ(c.listen.size(), 2u);
  EXPECT_EQ(c.listen[1], "0.0.0.0:7443");
  EXPECT_EQ(c.cpu_slots, 8);
  EXPECT_EQ(c.worker_threads, 2);
  EXPECT_EQ(c.worker, "/usr/lib/traind/traind-worker");
  EXPECT_FALSE(c.worker_zygote);
  EXPECT_FALSE(c.tensorboard);
  EXPECT_EQ(c.cancel_grace, absl::Seconds(5));
  EXPECT_EQ(c.stop_grace, absl::Minutes(1));
  EXPECT_EQ(c.heartbeat_timeout, absl::Seconds(45));
  EXPECT_EQ(c.max_restarts, 3);
  EXPECT_EQ(c.data_roots, (std::vector<std::string>{"/srv/data", "/home/shared"}));
  EXPECT_EQ(c.tls.client_ca, "/etc/traind/ca.pem");
  EXPECT_EQ(c.tokens_file, "/etc/traind/tokens.yaml");
  EXPECT_EQ(c.limits.max_request_bytes, 1048576);
  EXPECT_EQ(c.limits.max_queued_jobs_per_user, 10);
  EXPECT_EQ(c.limits.max_layers, 16);
  EXPECT_EQ(c.limits.max_units, 4096);
  EXPECT_EQ(c.limits.max_epochs, 1000);
  EXPECT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c);
}

TEST(ConfigTest, KeysNotInTheFileKeepTheirValues) {
  ServerConfig c;
  c.cpu_slots = 3;
  ASSERT_TRUE(ParseConfig("worker_threads: 4\n", "t.yaml", &c).ok());
  EXPECT_EQ(c.cpu_slots, 3);
  EXPECT_EQ(c.worker_threads, 4);
  ASSERT_TRUE(ParseConfig("", "empty.yaml", &c).ok());
}

TEST(ConfigTest, ErrorsNameTheKeyAndFileLine) {
  struct Case {
    std::string text;
    std::string expect;
  };
  for (const Case& k : std::vector<Case>{
           {"cpu_slots: 2\ncpu_slot: 3\n", "t.yaml:2: cpu_slot: unknown key"},
           {"limits:\n  max_layer: 3\n", "t.yaml:2: limits.max_layer: unknown key"},
           {"tls:\n  cert: a\n  ca: b\n", "t.yaml:3: tls.ca: unknown key"},
           {"cpu_slots: many\n", "t.yaml:1: cpu_slots: \"many\" is not an integer"},
           {"worker_threads: 0\n", "t.yaml:1: worker_threads: 0 is out of range"},
           {"stop_grace: soon\n", "t.yaml:1: stop_grace: \"soon\" is not a duration"},
           {"insecure: maybe\n", "t.yaml:1: insecure: \"maybe\" is not true or false"},
           {"listen: {a: b}\n", "t.yaml:1: listen: expected a list"},
           {"limits: 3\n", "t.yaml:1: limits: expected a mapping"},
           {"a: [\n", "t.yaml:"},
           {"cpu_slots: 2\nlisten: [unix:/a]\ncpu_slots: 3\n",
            "t.yaml:3: cpu_slots: given twice (also on line 1)"},
           {"limits:\n  max_layers: 3\n  max_layers: 4\n",
            "t.yaml:3: limits.max_layers: given twice (also on line 2)"},
       }) {
    ServerConfig c;
    c.cpu_slots = 7;
    absl::Status s = ParseConfig(k.text, "t.yaml", &c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.text;
    EXPECT_EQ(s.message().rfind(k.expect, 0), 0u) << s.message();
    EXPECT_EQ(c.cpu_slots, 7) << "a failed parse changes nothing";
  }
}

TEST(ConfigTest, MissingFileIsAnError) {
  ServerConfig c;
  absl::Status s = LoadConfigFile("/nonexistent/traind.yaml", &c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("/nonexistent/traind.yaml"), std::string::npos);
}

TEST(ConfigTest, LoopbackAddresses) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:7070"));
  EXPECT_TRUE(IsLoopbackAddress("127.1.2.3:0"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:7070"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:7070"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:7070"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:7070"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1:7070"));
  EXPECT_FALSE(IsLoopbackAddress("127.evil.com:7070"));
  EXPECT_FALSE(IsLoopbackAddress("unix:/tmp/x.sock"));
  EXPECT_TRUE(IsUnixAddress("unix:/tmp/x.sock"));
}

TEST(ConfigTest, NonLoopbackTcpNeedsTlsOrInsecure) {
  ServerConfig c;
  c.state_dir = "/tmp/s";
  c.listen = {"0.0.0.0:7070"};
  absl::Status s = ValidateConfig(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("0.0.0.0:7070"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("TLS"), std::string::npos) << s.message();
  c.insecure = true;
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.insecure = false;
  c.tls.cert = "c.pem";
  c.tls.key = "k.pem";
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.listen = {"127.0.0.1:7070", "unix:/tmp/s/traind.sock"};
  c.tls = {};
  EXPECT_TRUE(ValidateConfig(c).ok());
}

TEST(ConfigTest, HttpListen) {
  ServerConfig c;
  EXPECT_FALSE(c.http_listen.has_value()) << "unset: the default, skipped when taken";
  ASSERT_TRUE(
      ParseConfig("http_listen: 127.0.0.1:8080\nhttp_max_connections: 64\n", "t.yaml", &c).ok());
  EXPECT_EQ(c.http_listen, "127.0.0.1:8080");
  EXPECT_EQ(c.http_max_connections, 64);
  c.state_dir = "/tmp/s";
  c.listen = {"unix:/tmp/s/traind.sock"};
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.http_listen = "off";
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.http_listen = "";
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.http_listen = "0.0.0.0:7071";
  absl::Status s = ValidateConfig(c);
  EXPECT_NE(s.message().find("http_listen: 0.0.0.0:7071 is not a loopback address"),
            std::string::npos)
      << s;
  c.insecure = true;
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.http_listen = "unix:/tmp/x.sock";
  s = ValidateConfig(c);
  EXPECT_NE(s.message().find("is not HOST:PORT"), std::string::npos) << s;
  c.http_listen = std::nullopt;
  c.http_max_connections = 2;
  EXPECT_NE(ValidateConfig(c).message().find("http_max_connections: must be >= 4"),
            std::string::npos);
  EXPECT_NE(ParseConfig("http_max_connections: 1\n", "t.yaml", &c).message().find("t.yaml:1"),
            std::string::npos);
}

TEST(ConfigTest, TlsFilesGoTogether) {
  ServerConfig c;
  c.state_dir = "/tmp/s";
  c.listen = {"127.0.0.1:7070"};
  c.tls.cert = "c.pem";
  EXPECT_FALSE(ValidateConfig(c).ok());
  c.tls = {};
  c.tls.client_ca = "ca.pem";
  EXPECT_FALSE(ValidateConfig(c).ok());
  c.listen = {"nonsense"};
  c.tls = {};
  EXPECT_FALSE(ValidateConfig(c).ok());
}

TEST(ConfigTest, Durations) {
  EXPECT_EQ(*ParseDurationText("10"), absl::Seconds(10));
  EXPECT_EQ(*ParseDurationText("2.5"), absl::Milliseconds(2500));
  EXPECT_EQ(*ParseDurationText("250ms"), absl::Milliseconds(250));
  EXPECT_EQ(*ParseDurationText("1m30s"), absl::Seconds(90));
  EXPECT_FALSE(ParseDurationText("-1").ok());
  EXPECT_FALSE(ParseDurationText("-1s").ok());
  EXPECT_FALSE(ParseDurationText("inf").ok());
  EXPECT_EQ(*ParseDurationText("30d"), absl::Hours(720));
  EXPECT_EQ(*ParseDurationText("1d12h"), absl::Hours(36));
  EXPECT_FALSE(ParseDurationText("d").ok());
  EXPECT_FALSE(ParseDurationText("3dx").ok());
}

// A heartbeat timeout below a second would time out every attempt before
// its first report: refused, naming the key and the value.
TEST(ConfigTest, HeartbeatTimeoutHasAMinimum) {
  ServerConfig c;
  c.state_dir = "/tmp/s";
  c.listen = {"unix:/tmp/t.sock"};
  ASSERT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c);
  for (absl::Duration d : {absl::ZeroDuration(), absl::Milliseconds(1), absl::Milliseconds(999)}) {
    c.heartbeat_timeout = d;
    EXPECT_EQ(ValidateConfig(c).message(),
              absl::StrCat("heartbeat_timeout: at least 1s, got ", absl::FormatDuration(d)));
  }
  c.heartbeat_timeout = absl::Seconds(1);
  EXPECT_TRUE(ValidateConfig(c).ok());
}

TEST(ConfigTest, Retention) {
  ServerConfig c;
  ASSERT_TRUE(
      ParseConfig("retention: {max_age: 30d, max_finished_jobs: 500, interval: 1m}\n", "t.yaml", &c)
          .ok());
  EXPECT_EQ(c.retention.max_age, absl::Hours(720));
  EXPECT_EQ(c.retention.max_finished_jobs, 500);
  EXPECT_EQ(c.retention.interval, absl::Minutes(1));
  absl::Status s = ParseConfig("retention: {max_finished_jobs: -1}\n", "t.yaml", &c);
  EXPECT_NE(s.message().find("retention.max_finished_jobs"), std::string::npos) << s;
  s = ParseConfig("retention: {max_agee: 1d}\n", "t.yaml", &c);
  EXPECT_NE(s.message().find("max_agee"), std::string::npos) << s;
}

TEST(ConfigTest, SlurmLauncher) {
  ServerConfig c;
  c.state_dir = "/tmp/s";
  c.listen = {"unix:/tmp/s/traind.sock"};
  EXPECT_EQ(c.launcher, "local");
  EXPECT_EQ(c.slurm.poll_interval, absl::Seconds(5));
  EXPECT_EQ(c.slurm.signal_before_limit, absl::Seconds(120));
  absl::Status s = ParseConfig(
      "launcher: slurm\n"
      "slurm:\n"
      "  partition: gpu\n"
      "  account: ml\n"
      "  qos: high\n"
      "  extra_sbatch_args: [--time=04:00:00, --constraint=a100]\n"
      "  shared_dir: /shared/traind\n"
      "  worker_address: 127.0.0.1:7072\n"
      "  gpus_per_node: 8\n"
      "  signal_before_limit: 3m\n"
      "  poll_interval: 10s\n",
      "t.yaml", &c);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.launcher, "slurm");
  EXPECT_EQ(c.slurm.partition, "gpu");
  EXPECT_EQ(c.slurm.account, "ml");
  EXPECT_EQ(c.slurm.qos, "high");
  EXPECT_EQ(c.slurm.extra_sbatch_args,
            (std::vector<std::string>{"--time=04:00:00", "--constraint=a100"}));
  EXPECT_EQ(c.slurm.shared_dir, "/shared/traind");
  EXPECT_EQ(c.slurm.worker_address, "127.0.0.1:7072");
  EXPECT_EQ(c.slurm.gpus_per_node, 8);
  EXPECT_EQ(c.slurm.signal_before_limit, absl::Minutes(3));
  EXPECT_EQ(c.slurm.poll_interval, absl::Seconds(10));
  EXPECT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c);

  // What launcher: slurm cannot do without, each named.
  struct Bad {
    const char* yaml;
    const char* says;
  };
  for (const Bad& b : {
           Bad{"launcher: pbs\n", "launcher: \"pbs\" is not local or slurm"},
           Bad{"launcher: slurm\nslurm: {worker_address: 127.0.0.1:1}\n", "slurm.shared_dir"},
           Bad{"launcher: slurm\nslurm: {shared_dir: rel, worker_address: 127.0.0.1:1}\n",
               "slurm.shared_dir"},
           Bad{"launcher: slurm\nslurm: {shared_dir: /s}\n", "slurm.worker_address"},
           Bad{"launcher: slurm\nslurm: {shared_dir: /s, worker_address: unix:/x}\n",
               "slurm.worker_address"},
           Bad{"launcher: slurm\nslurm: {shared_dir: /s, worker_address: 10.0.0.5:7072}\n",
               "is not loopback: set tls"},
           Bad{"launcher: slurm\nslurm: {shared_dir: /s, worker_address: 127.0.0.1:1, "
               "poll_interval: 100ms}\n",
               "slurm.poll_interval"},
       }) {
    ServerConfig bad;
    bad.state_dir = "/tmp/s";
    bad.listen = {"unix:/tmp/s/traind.sock"};
    ASSERT_TRUE(ParseConfig(b.yaml, "t.yaml", &bad).ok()) << b.yaml;
    absl::Status v = ValidateConfig(bad);
    EXPECT_FALSE(v.ok()) << b.yaml;
    EXPECT_NE(v.message().find(b.says), std::string::npos) << b.yaml << ": " << v;
  }
  // A wrong key inside slurm: named with file and line.
  ServerConfig typo;
  s = ParseConfig("launcher: slurm\nslurm:\n  partiton: gpu\n", "t.yaml", &typo);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("partiton"), std::string::npos) << s;
  EXPECT_NE(s.message().find("t.yaml:3"), std::string::npos) << s;
}

// The annotated example config is valid as shipped.
TEST(ConfigTest, ExampleConfigLoads) {
  ServerConfig c;
  absl::Status s = LoadConfigFile(std::string(TRAIND_SOURCE_DIR) + "/deploy/traind.yaml", &c);
  EXPECT_TRUE(s.ok()) << s;
}

// A fuzz of the loader: thousands of mutations of the shipped example
// config. Each is accepted or refused with a message; a refusal in the
// YAML's own syntax or a key names the file (and line); the loader never
// crashes, and parsing is deterministic.
TEST(ConfigFuzzTest, MutatedConfigsAreAcceptedOrRefusedByName) {
  std::ifstream in(std::string(TRAIND_SOURCE_DIR) + "/deploy/traind.yaml");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string seed = ss.str();
  ASSERT_FALSE(seed.empty());
  const std::string pieces[] = {":",
                                " ",
                                "\n",
                                "- ",
                                "[",
                                "]",
                                "{",
                                "}",
                                "\"",
                                "'",
                                "#",
                                "&a",
                                "*a",
                                "!!binary",
                                "0",
                                "-1",
                                "99999999999999999999",
                                "1e400",
                                "\t",
                                "~",
                                "null",
                                "10x",
                                "cpu_slots: 2\n"};
  std::mt19937 rng(42);
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = seed;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % (text.size() + 1);
      switch (rng() % 3) {
        case 0:
          text.insert(at, pieces[rng() % std::size(pieces)]);
          break;
        case 1:
          if (at < text.size()) text.erase(at, 1 + rng() % 12);
          break;
        case 2:
          if (at < text.size()) text[at] = static_cast<char>(rng() % 256);
          break;
      }
    }
    ServerConfig a, b;
    const absl::Status first = ParseConfig(text, "t.yaml", &a);
    const absl::Status second = ParseConfig(text, "t.yaml", &b);
    ASSERT_EQ(first, second) << text;
    if (first.ok()) continue;
    ++refused;
    EXPECT_FALSE(first.message().empty()) << text;
    if (absl::StrContains(first.message(), "unknown key") ||
        absl::StrContains(first.message(), "YAML")) {
      EXPECT_TRUE(absl::StartsWith(first.message(), "t.yaml")) << first.message();
    }
  }
  EXPECT_GT(refused, 100);
}

TEST(ConfigTest, SchedulingPolicyWeightsAndHalfLife) {
  ServerConfig c;
  c.state_dir = "/tmp/s";
  c.listen = {"unix:/tmp/s/traind.sock"};
  EXPECT_EQ(c.scheduling.policy, "fair_share");  // the default
  ASSERT_TRUE(ParseConfig("scheduling:\n"
                          "  policy: fifo\n"
                          "  weights: [team-a=2, bob=0.5]\n"
                          "  half_life: 30m\n"
                          "  max_tasks_per_owner: 4\n"
                          "  max_gpus_per_owner: 2\n",
                          "t.yaml", &c)
                  .ok());
  EXPECT_EQ(c.scheduling.policy, "fifo");
  EXPECT_EQ(c.scheduling.weights, (std::vector<std::string>{"team-a=2", "bob=0.5"}));
  EXPECT_EQ(c.scheduling.half_life, absl::Minutes(30));
  EXPECT_EQ(c.scheduling.max_tasks_per_owner, 4);
  EXPECT_EQ(c.scheduling.max_gpus_per_owner, 2);
  EXPECT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c);
  struct Bad {
    const char* yaml;
    const char* says;
  };
  for (const Bad& b : {
           Bad{"scheduling: {policy: lottery}\n",
               "scheduling.policy: \"lottery\" is not fair_share or fifo"},
           Bad{"scheduling: {weights: [team-a=2, team-b]}\n",
               "scheduling.weights[1] \"team-b\": expected OWNER=WEIGHT"},
           Bad{"scheduling: {weights: [team-a=-1]}\n",
               "scheduling.weights[0] \"team-a=-1\": the weight must be a number above 0"},
           Bad{"scheduling: {half_life: 10s}\n", "scheduling.half_life: at least 1m"},
       }) {
    ServerConfig bad;
    bad.state_dir = "/tmp/s";
    bad.listen = {"unix:/tmp/s/traind.sock"};
    ASSERT_TRUE(ParseConfig(b.yaml, "t.yaml", &bad).ok()) << b.yaml;
    absl::Status v = ValidateConfig(bad);
    EXPECT_EQ(v.message(), b.says) << b.yaml;
  }
}

}  // namespace
}  // namespace traind::server
