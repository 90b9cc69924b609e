// The settings table (settings.h): the config file, the flags and the docs
// all come from it, so these check the table itself and that each of its
// paths reaches the same ServerConfig member.
#include "server/settings.h"

#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "server/command_line.h"
#include "server/config.h"

namespace traind::server {
namespace {

TEST(SettingsTest, KeysAndFlagsAreUnique) {
  std::set<std::string> keys, flags;
  for (const Setting& s : Settings()) {
    EXPECT_TRUE(keys.insert(s.key).second) << "two rows with key " << s.key;
    if (!s.flag.empty()) {
      EXPECT_TRUE(flags.insert(s.flag).second) << "two rows with flag " << s.flag;
    }
  }
  EXPECT_EQ(flags.count("--config"), 0u);
  EXPECT_EQ(flags.count("--settings-markdown"), 0u);
}

TEST(SettingsTest, EveryRowHasOneDocLineAndAWellFormedFlag) {
  for (const Setting& s : Settings()) {
    EXPECT_FALSE(s.doc.empty()) << s.key;
    EXPECT_EQ(s.doc.find('\n'), std::string::npos) << s.key;
    EXPECT_EQ(s.doc.find('|'), std::string::npos) << s.key << ": breaks the markdown table";
    EXPECT_EQ(s.flag.empty() || s.flag.rfind("--", 0) == 0, true) << s.key;
    if (s.type == SettingType::kInt || s.type == SettingType::kInt64) {
      EXPECT_LT(s.min, s.max) << s.key;
    }
    if (s.flag_is_switch) {
      EXPECT_EQ(s.type, SettingType::kBool) << s.key;
    }
  }
}

// The table's defaults are ServerConfig's, and within the table's ranges.
TEST(SettingsTest, DefaultsComeFromServerConfig) {
  const ServerConfig defaults;
  for (const Setting& s : Settings()) {
    const std::string text = SettingValueText(s, defaults);
    if (s.type == SettingType::kInt || s.type == SettingType::kInt64) {
      ServerConfig c;
      EXPECT_TRUE(SetSettingText(s, text, &c).ok()) << s.key << " default " << text;
    }
    if (!text.empty()) {
      EXPECT_NE(SettingDefaultText(s).find("`" + text + "`"), std::string::npos) << s.key;
    }
  }
  EXPECT_EQ(SettingDefaultText(*FindSetting("stop_grace")), "`10s`");
  EXPECT_EQ(SettingDefaultText(*FindSetting("state_dir_mode")), "`0700`");
  EXPECT_EQ(SettingDefaultText(*FindSetting("retention.interval")), "`10m`");
  EXPECT_EQ(SettingDefaultText(*FindSetting("http_listen")),
            absl::StrCat("`", kDefaultHttpListen, "`"));
  EXPECT_EQ(FindSetting("limits.nonexistent"), nullptr);
}

// A value of the setting that is not its default, as config-file/flag text
// (one element per list entry).
std::vector<std::string> OtherValue(const Setting& s) {
  const ServerConfig defaults;
  switch (s.type) {
    case SettingType::kString:
    case SettingType::kOptionalString:
      return {"v-" + s.key};
    case SettingType::kStringList:
      return {"a-" + s.key, "b-" + s.key};
    case SettingType::kInt:
    case SettingType::kInt64: {
      int64_t d;
      EXPECT_TRUE(absl::SimpleAtoi(SettingValueText(s, defaults), &d));
      return {absl::StrCat(d == s.min ? s.min + 1 : s.min)};
    }
    case SettingType::kBool:
      return {SettingValueText(s, defaults) == "true" ? "false" : "true"};
    case SettingType::kDuration: {
      absl::Duration d;
      EXPECT_TRUE(absl::ParseDuration(SettingValueText(s, defaults), &d));
      return {absl::FormatDuration(d + absl::Seconds(7))};
    }
    case SettingType::kOctalMode:
      return {SettingValueText(s, defaults) == "0700" ? "0750" : "0700"};
  }
  return {};
}

// The config file text that sets `s` to `values`.
std::string YamlFor(const Setting& s, const std::vector<std::string>& values) {
  std::string value;
  if (s.type == SettingType::kStringList) {
    value = "[";
    for (size_t i = 0; i < values.size(); ++i) {
      absl::StrAppend(&value, i ? ", " : "", "\"", values[i], "\"");
    }
    value += "]";
  } else {
    value = absl::StrCat("\"", values[0], "\"");
  }
  const size_t dot = s.key.find('.');
  if (dot == std::string::npos) return absl::StrCat(s.key, ": ", value, "\n");
  return absl::StrCat(s.key.substr(0, dot), ":\n  ", s.key.substr(dot + 1), ": ", value, "\n");
}

// For each row: a value other than the default, given by its config key and
// by its flag, sets that setting (and nothing else) to the same value.
TEST(SettingsTest, FlagAndConfigKeySetTheSameMember) {
  const ServerConfig defaults;
  for (const Setting& s : Settings()) {
    SCOPED_TRACE(s.key);
    const std::vector<std::string> values = OtherValue(s);
    ServerConfig from_file;
    absl::Status status = ParseConfig(YamlFor(s, values), "t.yaml", &from_file);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_FALSE(SettingEquals(s, from_file, defaults)) << "the file did not set it";
    EXPECT_EQ(SettingValueText(s, from_file), absl::StrJoin(values, ", "));
    for (const Setting& other : Settings()) {
      if (&other != &s) {
        EXPECT_TRUE(SettingEquals(other, from_file, defaults)) << other.key;
      }
    }
    if (s.flag.empty()) continue;

    std::vector<std::string> args;
    if (s.flag_is_switch) {
      ASSERT_EQ(values[0], "true");
      args = {s.flag};
    } else {
      for (const std::string& v : values) args.push_back(absl::StrCat(s.flag, "=", v));
    }
    ServerConfig from_flag;
    status = ParseSettingFlags(args, &from_flag);
    ASSERT_TRUE(status.ok()) << status;
    for (const Setting& any : Settings()) {
      EXPECT_TRUE(SettingEquals(any, from_flag, from_file))
          << any.key << ": flag " << SettingValueText(any, from_flag) << ", file "
          << SettingValueText(any, from_file);
    }
  }
}

TEST(SettingsTest, FlagsOverTheFileAndListsReplaced) {
  ServerConfig c;
  ASSERT_TRUE(ParseConfig("cpu_slots: 3\nlisten: [unix:/a.sock, 127.0.0.1:1]\nworker_threads: 2\n",
                          "t.yaml", &c)
                  .ok());
  ASSERT_TRUE(ParseSettingFlags({"--cpu-slots=4", "--listen", "127.0.0.1:2"}, &c).ok());
  EXPECT_EQ(c.cpu_slots, 4);
  EXPECT_EQ(c.worker_threads, 2) << "a flag not given keeps the file's value";
  EXPECT_EQ(c.listen, (std::vector<std::string>{"127.0.0.1:2"}));
  ASSERT_TRUE(ParseSettingFlags({"--listen=unix:/b.sock", "--listen=127.0.0.1:3"}, &c).ok());
  EXPECT_EQ(c.listen, (std::vector<std::string>{"unix:/b.sock", "127.0.0.1:3"}));
  ASSERT_TRUE(ParseSettingFlags({"--worker-zygote=false", "--http-listen", "off"}, &c).ok());
  EXPECT_FALSE(c.worker_zygote);
  EXPECT_EQ(c.http_listen, "off");
  ASSERT_TRUE(ParseSettingFlags({"--worker-zygote=1"}, &c).ok());
  EXPECT_TRUE(c.worker_zygote);
}

TEST(SettingsTest, FlagErrorsNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  for (const Case& k : std::vector<Case>{
           {{"--cpu-slots=x"}, "--cpu-slots: \"x\" is not an integer"},
           {{"--worker-threads=0"}, "--worker-threads: 0 is out of range"},
           {{"--max-layers=0"}, "--max-layers: 0 is out of range"},
           {{"--slurm-gpus-per-node=2000"}, "--slurm-gpus-per-node: 2000 is out of range"},
           {{"--stop-grace=soon"}, "--stop-grace: \"soon\" is not a duration"},
           {{"--state-dir-mode=0755"}, "--state-dir-mode: \"0755\""},
           {{"--store-check=maybe"}, "--store-check: \"maybe\" is not true or false"},
       }) {
    ServerConfig c;
    absl::Status s = ParseSettingFlags(k.args, &c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.args[0];
    EXPECT_EQ(s.message().rfind(k.expect, 0), 0u) << s.message();
  }
  ServerConfig c;
  EXPECT_FALSE(ParseSettingFlags({"--bogus-flag=1"}, &c).ok());
  EXPECT_FALSE(ParseSettingFlags({"--retention-max-age=1d"}, &c).ok()) << "file only";
}

// Runs ParseCommandLine on `args` (after the program name); its stdout.
std::string CommandLineOutput(std::vector<std::string> args, std::optional<int>* exit_code) {
  args.insert(args.begin(), "traind");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ServerConfig c;
  ::testing::internal::CaptureStdout();
  *exit_code = ParseCommandLine(static_cast<int>(argv.size()), argv.data(), &c);
  return ::testing::internal::GetCapturedStdout();
}

TEST(SettingsTest, HelpListsEveryFlagWithItsKey) {
  std::optional<int> exit_code;
  const std::string help = CommandLineOutput({"--help"}, &exit_code);
  EXPECT_EQ(exit_code, 0);
  for (const Setting& s : Settings()) {
    if (s.flag.empty()) continue;
    const size_t at = help.find("  " + s.flag + " ");
    ASSERT_NE(at, std::string::npos) << s.flag << "\n" << help;
    EXPECT_NE(help.find(s.key + " (", at), std::string::npos) << s.flag;
  }
  EXPECT_NE(help.find("--config"), std::string::npos);
  EXPECT_NE(help.find("--settings-markdown"), std::string::npos);
}

TEST(SettingsTest, SettingsMarkdownFlagPrintsTheTable) {
  std::optional<int> exit_code;
  EXPECT_EQ(CommandLineOutput({"--settings-markdown"}, &exit_code), SettingsMarkdown());
  EXPECT_EQ(exit_code, 0);
}

TEST(SettingsTest, MarkdownHasEveryRow) {
  const std::string md = SettingsMarkdown();
  EXPECT_EQ(md.rfind("| key | flag | type | default | meaning |\n", 0), 0u);
  for (const Setting& s : Settings()) {
    const std::string row =
        absl::StrCat("| `", s.key, "` | ", s.flag.empty() ? "—" : absl::StrCat("`", s.flag, "`"));
    EXPECT_NE(md.find(row), std::string::npos) << row;
  }
}

// The keys deploy/traind.yaml names, commented out or not, as dotted keys
// ("limits.max_layers"): a line "KEY:" (after an optional "# ") at the start
// is a top-level key, indented under one a key of that section.
std::set<std::string> ExampleConfigKeys(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::set<std::string> keys;
  const std::regex key_line(R"(^( *)([a-z_]+):( |$))");
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.rfind("# ", 0) == 0) line = line.substr(2);
    std::smatch m;
    if (!std::regex_search(line, m, key_line)) continue;
    if (m[1].length() == 0) {
      section = m[2];
      keys.insert(section);
    } else if (!section.empty()) {
      keys.insert(absl::StrCat(section, ".", m[2].str()));
    }
  }
  return keys;
}

TEST(SettingsTest, ExampleConfigNamesEveryKey) {
  const std::set<std::string> example =
      ExampleConfigKeys(std::string(TRAIND_SOURCE_DIR) + "/deploy/traind.yaml");
  std::set<std::string> sections;
  for (const Setting& s : Settings()) {
    EXPECT_EQ(example.count(s.key), 1u) << s.key << " is missing from deploy/traind.yaml";
    if (size_t dot = s.key.find('.'); dot != std::string::npos) {
      sections.insert(s.key.substr(0, dot));
    }
  }
  for (const std::string& key : example) {
    EXPECT_TRUE(FindSetting(key) != nullptr || sections.count(key) > 0)
        << "deploy/traind.yaml names " << key << ", which is not a setting";
  }
}

}  // namespace
}  // namespace traind::server
