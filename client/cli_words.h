// What trainctl derives from its own command line definition: the word
// that names no command, and the shell completion script.
#ifndef TRAIND_CLIENT_CLI_WORDS_H_
#define TRAIND_CLIENT_CLI_WORDS_H_

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace traind::client {

// The first word that is neither an option nor an option's value, if it
// names no subcommand ("trainctl stauts").
std::optional<std::string> UnknownCommand(const CLI::App& app, int argc, char** argv);

// A bash completion script (zsh: through bashcompinit) of `app`'s
// subcommands and flags, completing job ids and files where a command takes
// JOB or FILE.
std::string BashCompletion(const CLI::App& app);

}  // namespace traind::client

#endif  // TRAIND_CLIENT_CLI_WORDS_H_
