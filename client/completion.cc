#include "client/completion.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace ablate::cli {
namespace {

struct Opt {
  std::vector<std::string> names;  // "--server", "-o"
  std::string help;
  bool takes_value = false;
  std::vector<std::string> choices;  // its allowed values (CLI::IsMember), else any (files)
};

struct Cmd {
  std::string name, help;
  std::vector<Opt> options;
  bool has_positional = false;
  std::vector<std::string> positional_choices;  // `completion bash|zsh`: no file names
  std::vector<Cmd> subcommands;
};

// An option's allowed values: CLI::IsMember describes itself as "{table,json}" in the type name
// ("TEXT:{table,json}"). Empty when any value goes.
std::vector<std::string> Choices(const CLI::Option& o) {
  const std::string type = o.get_type_name();
  const size_t open = type.find('{'), close = type.find('}');
  if (open == std::string::npos || close == std::string::npos || close < open) return {};
  return absl::StrSplit(type.substr(open + 1, close - open - 1), ',');
}

Cmd Describe(const CLI::App& app) {
  Cmd cmd;
  cmd.name = app.get_name();
  cmd.help = app.get_description();
  for (const CLI::Option* o : app.get_options()) {
    Opt opt;
    if (o->get_positional() && !o->nonpositional()) {
      opt.takes_value = true;
      opt.choices = Choices(*o);
      if (opt.choices.empty()) {
        cmd.has_positional = true;
      } else {
        cmd.positional_choices.insert(cmd.positional_choices.end(), opt.choices.begin(),
                                      opt.choices.end());
      }
      continue;
    }
    for (const auto& l : o->get_lnames()) opt.names.push_back("--" + l);
    for (const auto& s : o->get_snames()) opt.names.push_back("-" + s);
    opt.help = o->get_description();
    opt.takes_value = o->get_items_expected_max() > 0;  // flags expect no value
    if (opt.takes_value) opt.choices = Choices(*o);
    if (!opt.names.empty()) cmd.options.push_back(std::move(opt));
  }
  for (const CLI::App* sub : app.get_subcommands(
           [](const CLI::App* s) { return !s->get_name().empty() && !s->get_disabled(); })) {
    cmd.subcommands.push_back(Describe(*sub));
  }
  return cmd;
}

// `c`'s options, then the root's (fallthrough, when given) that `c` does not define itself: a
// command's own --help hides the global one, a command's own -o (ls: table|json|wide) the
// global -o.
std::vector<const Opt*> Visible(const Cmd& c, const Cmd* root) {
  std::vector<const Opt*> out;
  std::set<std::string> seen;
  auto add = [&](const Cmd& from) {
    for (const auto& o : from.options) {
      bool fresh = false;
      for (const auto& n : o.names) fresh |= seen.insert(n).second;
      if (fresh) out.push_back(&o);
    }
  };
  add(c);
  if (root != nullptr) add(*root);
  return out;
}

std::vector<std::string> Words(const std::vector<const Opt*>& opts) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const Opt* o : opts) {
    for (const auto& n : o->names) {
      if (seen.insert(n).second) out.push_back(n);
    }
  }
  return out;
}

// The bash `case "$prev"` arms of a command: a choice option completes its values, any other
// option that takes a value completes file names.
std::string BashValues(const std::vector<const Opt*>& opts) {
  std::string out;
  std::vector<std::string> files;
  for (const Opt* o : opts) {
    if (!o->takes_value) continue;
    if (o->choices.empty()) {
      files.insert(files.end(), o->names.begin(), o->names.end());
      continue;
    }
    absl::StrAppend(&out, "        ", absl::StrJoin(o->names, "|"), ") COMPREPLY=( $(compgen -W \"",
                    absl::StrJoin(o->choices, " "), "\" -- \"$cur\") ); return 0 ;;\n");
  }
  if (!files.empty()) {
    absl::StrAppend(&out, "        ", absl::StrJoin(files, "|"),
                    ") COMPREPLY=( $(compgen -f -- \"$cur\") ); return 0 ;;\n");
  }
  return out;
}

std::vector<std::string> SubNames(const Cmd& c) {
  std::vector<std::string> out;
  for (const auto& s : c.subcommands) out.push_back(s.name);
  return out;
}

// bash: the first word that names a command selects its options; a command with subcommands
// (config) completes their names, then theirs. Global options complete everywhere (fallthrough),
// each name once. After an option that takes a value: its choices (-o table|json), else files.
std::string Bash(const Cmd& root, const std::string& prog) {
  const std::string fn = "_" + prog;
  std::string cases;
  auto add_case = [&](const std::string& pattern, const Cmd& c, const Cmd* global) {
    const std::vector<const Opt*> opts = Visible(c, global);
    std::vector<std::string> words = SubNames(c);
    words.insert(words.end(), c.positional_choices.begin(), c.positional_choices.end());
    std::vector<std::string> options = Words(opts);
    words.insert(words.end(), options.begin(), options.end());
    absl::StrAppend(&cases, "    ", pattern, ")\n      case \"$prev\" in\n", BashValues(opts),
                    "      esac\n      words=\"", absl::StrJoin(words, " "),
                    "\"\n      files=", c.has_positional ? 1 : 0, "\n      ;;\n");
  };
  add_case("\"\"", root, nullptr);
  for (const auto& c : root.subcommands) {
    add_case(c.name, c, &root);
    for (const auto& s : c.subcommands) add_case(c.name + "/" + s.name, s, &root);
  }
  std::string top_case;
  for (const auto& c : root.subcommands) {
    absl::StrAppend(&top_case, top_case.empty() ? "" : "|", c.name);
  }
  std::vector<std::string> nested;
  for (const auto& c : root.subcommands) {
    if (!c.subcommands.empty()) nested.push_back(c.name);
  }
  return absl::StrCat("# bash completion for ", prog, ", generated by `", prog,
                      " completion bash` from its own command definitions.\n"
                      "# Load it with: source <(",
                      prog, " completion bash)\n", fn,
                      "() {\n"
                      "  local cur prev cmd words files i w\n"
                      "  COMPREPLY=()\n"
                      "  cur=\"${COMP_WORDS[COMP_CWORD]}\"\n"
                      "  prev=\"\"\n"
                      "  (( COMP_CWORD > 0 )) && prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
                      "  cmd=\"\"\n"
                      "  for (( i = 1; i < COMP_CWORD; i++ )); do\n"
                      "    w=\"${COMP_WORDS[i]}\"\n"
                      "    if [[ -z \"$cmd\" ]]; then\n"
                      "      case \"$w\" in\n"
                      "        ",
                      top_case.empty() ? "__none__" : top_case,
                      ") cmd=\"$w\" ;;\n"
                      "      esac\n"
                      "    elif [[ \"$cmd\" != */* && \"$w\" != -* ]]; then\n"
                      "      case \"$cmd\" in\n"
                      "        ",
                      nested.empty() ? "__none__" : absl::StrJoin(nested, "|"),
                      ") cmd=\"$cmd/$w\" ;;\n"
                      "      esac\n"
                      "    fi\n"
                      "  done\n"
                      "  words=\"\"\n"
                      "  files=0\n"
                      "  case \"$cmd\" in\n",
                      cases,
                      "  esac\n"
                      "  COMPREPLY=( $(compgen -W \"$words\" -- \"$cur\") )\n"
                      "  if (( files )) && [[ \"$cur\" != -* ]]; then\n"
                      "    COMPREPLY+=( $(compgen -f -- \"$cur\") )\n"
                      "  fi\n"
                      "  return 0\n"
                      "}\n"
                      "complete -F ",
                      fn, " ", prog, "\n");
}

// Text inside a zsh single-quoted _arguments spec: no quote, no brackets, colons escaped.
std::string ZshText(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == '\'') {
      out += "'\\''";
    } else if (ch == '[' || ch == ']') {
      out += ch == '[' ? '(' : ')';
    } else if (ch == ':') {
      out += "\\:";
    } else if (ch == '\n') {
      out += ' ';
    } else {
      out += ch;
    }
  }
  return out;
}

// `seen`: names already given (a command's own --help hides the global one).
std::string ZshSpecs(const Cmd& c, std::set<std::string>* seen) {
  std::string out;
  for (const auto& o : c.options) {
    const std::string action = !o.takes_value ? ""
                               : o.choices.empty()
                                   ? ":value:_files"
                                   : absl::StrCat(":value:(", absl::StrJoin(o.choices, " "), ")");
    for (const auto& n : o.names) {
      if (!seen->insert(n).second) continue;
      absl::StrAppend(&out, " '", n, o.takes_value && n.size() > 2 ? "=" : "", "[", ZshText(o.help),
                      "]", action, "'");
    }
  }
  return out;
}

std::string ZshCommands(const Cmd& c) {
  std::string out;
  for (const auto& s : c.subcommands) {
    absl::StrAppend(&out, " '", ZshText(s.name), ":", ZshText(s.help), "'");
  }
  return out;
}

std::string Zsh(const Cmd& root, const std::string& prog) {
  const std::string fn = "_" + prog;
  std::set<std::string> root_seen;
  std::string cases;
  for (const auto& c : root.subcommands) {
    if (c.subcommands.empty()) {
      std::set<std::string> seen;
      const std::string own = ZshSpecs(c, &seen);
      absl::StrAppend(
          &cases, "        ", c.name, ") _arguments -s", own, ZshSpecs(root, &seen),
          c.has_positional ? " '*:argument:_files'" : "",
          c.positional_choices.empty()
              ? ""
              : absl::StrCat(" '1:argument:(", absl::StrJoin(c.positional_choices, " "), ")'"),
          " ;;\n");
    } else {
      absl::StrAppend(&cases, "        ", c.name, ")\n          local -a sub=(", ZshCommands(c),
                      ")\n          _describe -t commands '", c.name, " command' sub ;;\n");
    }
  }
  return absl::StrCat("#compdef ", prog, "\n# zsh completion for ", prog, ", generated by `", prog,
                      " completion zsh` from its own command definitions.\n",
                      "# Load it with: source <(", prog, " completion zsh)\n", fn,
                      "() {\n"
                      "  local context state state_descr line\n"
                      "  typeset -A opt_args\n"
                      "  _arguments -C",
                      ZshSpecs(root, &root_seen),
                      " '1: :->command' '*:: :->args'\n"
                      "  case $state in\n"
                      "    command)\n"
                      "      local -a commands=(",
                      ZshCommands(root),
                      ")\n"
                      "      _describe -t commands '",
                      prog,
                      " command' commands ;;\n"
                      "    args)\n"
                      "      case $line[1] in\n",
                      cases,
                      "      esac ;;\n"
                      "  esac\n"
                      "}\n"
                      "if [[ \"${zsh_eval_context[-1]}\" == loadautofunc ]]; then\n"
                      "  ",
                      fn,
                      " \"$@\"\n"
                      "else\n"
                      "  compdef ",
                      fn, " ", prog,
                      "\n"
                      "fi\n");
}

}  // namespace

absl::StatusOr<std::string> CompletionScript(const CLI::App& app, const std::string& shell) {
  const Cmd root = Describe(app);
  const std::string prog = app.get_name().empty() ? "ablate" : app.get_name();
  if (shell == "bash") return Bash(root, prog);
  if (shell == "zsh") return Zsh(root, prog);
  return absl::InvalidArgumentError(
      absl::StrCat("completion: unknown shell '", shell, "' (expected bash or zsh)"));
}

}  // namespace ablate::cli
