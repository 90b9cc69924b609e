// traind's command line: flags over the config file over the defaults.
#include "server/command_line.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "server/settings.h"

namespace traind::server {

namespace {

// A setting's --help line: "key (type; default ...): doc", without markdown.
std::string FlagHelp(const Setting& s) {
  std::string help = absl::StrCat(s.key, " (", SettingTypeName(s), "; default ",
                                  SettingDefaultText(s), "): ", s.doc);
  if (s.type == SettingType::kStringList) absl::StrAppend(&help, "; repeatable; replaces the list");
  help.erase(std::remove(help.begin(), help.end(), '`'), help.end());
  return help;
}

// The placeholder of a flag's value in --help.
std::string TypeHint(const Setting& s) {
  switch (s.type) {
    case SettingType::kInt:
    case SettingType::kInt64:
      return "INT";
    case SettingType::kBool:
      return "BOOL";
    case SettingType::kDuration:
      return "DURATION";
    case SettingType::kOctalMode:
      return "MODE";
    default:
      return "TEXT";
  }
}

// The flags of the settings table on `app`, each kept as given until
// applied over a config.
class SettingFlags {
 public:
  explicit SettingFlags(CLI::App* app) : app_(app) {
    for (const Setting& s : Settings()) {
      if (s.flag.empty()) continue;
      Value& v = values_.emplace_back();
      v.setting = &s;
      if (s.flag_is_switch) {
        app->add_flag(s.flag, v.on, FlagHelp(s));
      } else if (s.type == SettingType::kStringList) {
        app->add_option(s.flag, v.list, FlagHelp(s))->type_name(TypeHint(s));
      } else {
        app->add_option(s.flag, v.text, FlagHelp(s))->type_name(TypeHint(s));
      }
    }
  }

  // Sets the settings whose flags were given; an error names the flag.
  absl::Status Apply(ServerConfig* config) const {
    for (const Value& v : values_) {
      const Setting& s = *v.setting;
      if (app_->count(s.flag) == 0) continue;
      if (s.type == SettingType::kStringList) {
        SetSettingList(s, v.list, config);
        continue;
      }
      std::string text = v.text;
      if (s.flag_is_switch) text = v.on ? "true" : "false";
      if (s.type == SettingType::kBool && (text == "1" || text == "0")) {
        text = text == "1" ? "true" : "false";
      }
      if (absl::Status status = SetSettingText(s, text, config); !status.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(s.flag, ": ", status.message()));
      }
    }
    return absl::OkStatus();
  }

 private:
  struct Value {
    const Setting* setting = nullptr;
    std::string text;
    std::vector<std::string> list;
    bool on = false;
  };
  CLI::App* app_;
  std::deque<Value> values_;  // stable addresses: CLI11 writes into them
};

}  // namespace

absl::Status ParseSettingFlags(const std::vector<std::string>& args, ServerConfig* config) {
  CLI::App app{"traind"};
  SettingFlags flags(&app);
  std::vector<std::string> argv_text = {"traind"};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return flags.Apply(config);
}

std::optional<int> ParseCommandLine(int argc, char** argv, ServerConfig* out) {
  std::string config_file;
  bool settings_markdown = false;
  CLI::App app{
      "traind: the training daemon. Settings: defaults < --config FILE < flags "
      "(docs/operations.md lists every key with its default)."};
  app.add_option("--config", config_file, "YAML config file (keys as in deploy/traind.yaml)");
  SettingFlags flags(&app);
  app.add_flag("--settings-markdown", settings_markdown,
               "print the settings as the markdown table of docs/operations.md and exit");
  app.set_version_flag("--version", TRAIND_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // A typo in a flag is a usage error, like a bad config value.
    std::fprintf(stderr, "traind: %s (see traind --help)\n", e.what());
    return 2;
  }
  if (settings_markdown) {
    std::fputs(SettingsMarkdown().c_str(), stdout);
    return 0;
  }

  ServerConfig config;  // the defaults
  if (!config_file.empty()) {
    if (absl::Status s = LoadConfigFile(config_file, &config); !s.ok()) {
      LogError("%s", s.message());
      return 2;
    }
  }
  if (absl::Status s = flags.Apply(&config); !s.ok()) {
    LogError("%s", s.message());
    return 2;
  }
  if (config.state_dir.empty()) {
    const char* env_state = std::getenv("TRAIND_STATE_DIR");
    config.state_dir = env_state && *env_state ? env_state : ".traind";
  }
  if (config.listen.empty()) {
    const std::filesystem::path dir =
        std::filesystem::absolute(config.state_dir).lexically_normal();
    config.listen = {absl::StrCat("unix:", (dir / "traind.sock").string()), "127.0.0.1:7070"};
  }
  if (absl::Status s = ValidateConfig(config); !s.ok()) {
    LogError("%s%s", config_file.empty() ? "" : config_file + ": ", s.message());
    return 2;
  }
  *out = std::move(config);
  return std::nullopt;
}

}  // namespace traind::server
