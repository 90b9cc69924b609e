#include "client/cli_words.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace traind::client {

std::optional<std::string> UnknownCommand(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--address" || arg == "-o" || arg == "--output" || arg == "--timeout" ||
        arg == "--token" || arg == "--token-file" || arg == "--tls-ca" || arg == "--tls-cert" ||
        arg == "--tls-key" || arg == "--tls-server-name") {
      ++i;  // skip the value
      continue;
    }
    if (arg.empty() || arg[0] == '-') continue;
    for (const CLI::App* sub : app.get_subcommands({})) {
      if (sub->get_name() == arg) return std::nullopt;
    }
    return arg;
  }
  return std::nullopt;
}

// A bash completion script made from trainctl's own commands and options,
// so it cannot fall behind them: subcommands, each one's flags, output
// formats, file names where a file goes, and job ids (from `trainctl list`)
// where a job goes.
std::string BashCompletion(const CLI::App& app) {
  auto flags = [](const CLI::App* a) {
    std::vector<std::string> out;
    for (const CLI::Option* o : a->get_options()) {
      if (!o->nonpositional()) continue;
      for (const std::string& n : o->get_lnames()) out.push_back("--" + n);
      for (const std::string& n : o->get_snames()) out.push_back("-" + n);
    }
    return absl::StrJoin(out, " ");
  };
  std::vector<std::string> names, cases, job_commands, file_commands;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
    cases.push_back(
        absl::StrCat("    ", sub->get_name(), ") opts=\"$global ", flags(sub), "\" ;;"));
    for (const CLI::Option* o : sub->get_options()) {
      if (o->nonpositional()) continue;
      if (o->get_name() == "JOB") job_commands.push_back(sub->get_name());
      if (o->get_name() == "FILE") file_commands.push_back(sub->get_name());
    }
  }
  // clang-format off
  static constexpr char kHead[] = R"sh(# bash completion for trainctl (made by `trainctl completion bash`)
_trainctl() {
  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" cmd="" i
)sh";
  static constexpr char kBody[] = R"sh(
  for ((i = 1; i < COMP_CWORD; i++)); do
    if [[ " $commands " == *" ${COMP_WORDS[i]} "* ]]; then cmd="${COMP_WORDS[i]}"; break; fi
  done
  case "$prev" in
    -o|--output) COMPREPLY=($(compgen -W "table json yaml" -- "$cur")); return ;;
    --token-file|--tls-ca|--tls-cert|--tls-key)
      compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --address|--token|--timeout|--tls-server-name|--name|--priority|--set|--state|--after|--limit|--page-token)
      return ;;
  esac
  if [[ -z "$cmd" ]]; then
    COMPREPLY=($(compgen -W "$commands $global" -- "$cur")); return
  fi
  local opts="$global"
  case "$cmd" in
)sh";
  static constexpr char kJobs[] = R"sh(" in
      *" $cmd "*)
        local ids
        ids=$("${COMP_WORDS[0]}" list --limit 100 -o json --timeout 2 2>/dev/null |
          sed -n 's/^ *"id": *"\([^"]*\)".*/\1/p')
        COMPREPLY=($(compgen -W "$ids" -- "$cur")); return ;;
    esac
)sh";
  static constexpr char kFiles[] = R"sh(" in
      *" $cmd "*) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur")); return ;;
    esac
  fi
  COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}
complete -F _trainctl trainctl
)sh";
  // clang-format on
  return absl::StrCat(kHead, "  local global=\"", flags(&app), "\"\n  local commands=\"",
                      absl::StrJoin(names, " "), "\"", kBody, absl::StrJoin(cases, "\n"),
                      "\n  esac\n  if [[ \"$cur\" != -* ]]; then\n    case \" ",
                      absl::StrJoin(job_commands, " "), " ", kJobs, "    case \" ",
                      absl::StrJoin(file_commands, " "), " ", kFiles);
}

}  // namespace traind::client
