#include "common/cli/edge.h"

#include <fstream>
#include <iostream>
#include <sstream>

#include "ablate/build_info.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/util/did_you_mean.h"

namespace ablate::cli_edge {
namespace {

// "ablate submit": the chain of names from the root to `app`.
std::string CommandName(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::App* a = app; a != nullptr; a = a->get_parent()) names.push_back(a->get_name());
  std::string out;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    if (it->empty()) continue;
    absl::StrAppend(&out, out.empty() ? "" : " ", *it);
  }
  return out;
}

std::vector<std::string> SubcommandNames(const CLI::App* app) {
  std::vector<std::string> out;
  for (const CLI::App* sub : app->get_subcommands([](const CLI::App* s) {
         return !s->get_name().empty() && !s->get_disabled() && s->get_group() != "";
       })) {
    out.push_back(sub->get_name());
  }
  return out;
}

}  // namespace

std::string VersionText(const std::string& program, const std::vector<std::string>& extra) {
  std::string out =
      absl::StrCat(program, " ", ABLATE_BUILD_VERSION, " (commit ", ABLATE_BUILD_COMMIT, ")");
  for (const auto& line : extra) absl::StrAppend(&out, "\n", line);
  return out;
}

CLI::App* AddVersion(CLI::App& app, const std::string& program,
                     std::function<std::vector<std::string>()> extra) {
  app.set_version_flag(
      "--version",
      [program, extra] {
        return VersionText(program, extra ? extra() : std::vector<std::string>{});
      },
      "Print the version and build commit, and exit");
  return app.add_subcommand("version", "Print the version and build commit");
}

std::optional<int> Parse(CLI::App& app, int argc, char** argv, const std::string& program) {
  app.name(program);  // usage lines say "ablate submit", not the path the binary was run by
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::Success& e) {  // --help, --help-all, --version: print and exit 0
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // The deepest command the parse reached owns the error and its usage line.
    const CLI::App* at = &app;
    while (!at->get_subcommands().empty()) at = at->get_subcommands().front();
    const std::string name = CommandName(at);
    const std::vector<std::string> commands = SubcommandNames(at);
    // With fallthrough, a word a nested command does not know (`artifacts gte`) climbs to the
    // root's remaining words, not the nested command's: look there too.
    std::string unknown;
    for (const CLI::App* a = at; a != nullptr && unknown.empty(); a = a->get_parent()) {
      for (const auto& word : a->remaining()) {
        if (!word.empty() && word[0] != '-') {
          unknown = word;
          break;
        }
      }
    }
    std::ostringstream msg;
    if (!commands.empty() && !unknown.empty()) {
      msg << name << ": unknown command '" << unknown << "'" << util::DidYouMean(unknown, commands);
    } else if (!commands.empty() && at->get_require_subcommand_min() > 0 &&
               at->get_subcommands().empty()) {
      msg << name << ": a command is required";
    } else {
      msg << name << ": " << e.what();
    }
    std::cerr << msg.str() << "\n" << CLI::Formatter().make_usage(at, name);
    if (!commands.empty()) std::cerr << "Commands: " << absl::StrJoin(commands, ", ") << "\n";
    std::cerr << "Run '" << name << " --help' for more.\n";
    return kUsageExit;
  }
}

int UsageError(const CLI::App& command, const std::string& message) {
  const std::string name = CommandName(&command);
  std::cerr << name << ": " << message << "\n"
            << CLI::Formatter().make_usage(&command, name) << "Run '" << name
            << " --help' for more.\n";
  return kUsageExit;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, " ", path, ": cannot read the file"));
  std::stringstream text;
  text << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(text.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": the file is empty"));
  }
  if (token.find_first_of(" \t\r\n") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": expected one token (a single line), found several"));
  }
  return token;
}

}  // namespace ablate::cli_edge
