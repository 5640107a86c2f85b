#include "client/completion.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/context.h"
#include "common/run/run_state.h"

namespace ablate::cli {
namespace {

struct Opt {
  std::vector<std::string> names;  // "--server", "-o"
  std::string help;
  bool takes_value = false;
  std::vector<std::string> choices;  // its allowed values (CLI::IsMember), else any (files)
  std::string dynamic;               // "sweeps" or "runs": ids the server knows (DynamicKind)
};

struct Cmd {
  std::string name, help;
  std::vector<Opt> options;
  bool has_positional = false;                  // a file name
  std::string positional_dynamic;               // "sweeps" or "runs" (DynamicKind)
  std::vector<std::string> positional_choices;  // `completion bash|zsh|fish`: no file names
  std::vector<Cmd> subcommands;
};

// The options whose values the server knows, completed by `ablate __complete sweeps|runs|workers`
// (CompleteIds): a positional named `sweep`, `run` or `worker` (a worker's name), --run, and
// --pilot (a sweep). By name, so a new command taking a sweep, run or worker completes as written.
std::string DynamicKind(const CLI::Option& o) {
  if (o.get_positional() && !o.nonpositional()) {
    const std::string name = o.get_name(/*positional=*/true);
    if (name == "sweep") return "sweeps";
    if (name == "run") return "runs";
    if (name == "worker") return "workers";
    return "";
  }
  for (const auto& l : o.get_lnames()) {
    if (l == "run") return "runs";
    if (l == "pilot") return "sweeps";
  }
  return "";
}

// The global flags that say which server to ask; each script hands those on the command line
// to `ablate __complete`.
constexpr const char* kConnValueFlags = "--server|--token|--token-file|--tls-ca|--config";

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
      if (const std::string kind = DynamicKind(*o); !kind.empty()) {
        cmd.positional_dynamic = kind;
      } else if (opt.choices.empty()) {
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
    if (opt.takes_value) opt.dynamic = DynamicKind(*o);
    if (!opt.names.empty()) cmd.options.push_back(std::move(opt));
  }
  // A subcommand in no group (`__complete`, the scripts' helper) is hidden: not completed.
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App* s) {
         return !s->get_name().empty() && !s->get_disabled() && !s->get_group().empty();
       })) {
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

// The bash `case "$prev"` arms of a command: a choice option completes its values, a sweep or
// run option the ids the server knows, any other option that takes a value file names.
std::string BashValues(const std::vector<const Opt*>& opts, const std::string& fn) {
  std::string out;
  std::vector<std::string> files;
  for (const Opt* o : opts) {
    if (!o->takes_value) continue;
    if (!o->dynamic.empty()) {
      absl::StrAppend(&out, "        ", absl::StrJoin(o->names, "|"),
                      ") COMPREPLY=( $(compgen -W \"$(", fn, "_ids ", o->dynamic,
                      ")\" -- \"$cur\") ); return 0 ;;\n");
      continue;
    }
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
    absl::StrAppend(&cases, "    ", pattern, ")\n      case \"$prev\" in\n", BashValues(opts, fn),
                    "      esac\n      words=\"", absl::StrJoin(words, " "),
                    "\"\n      files=", c.has_positional ? 1 : 0, "\n      dyn=\"",
                    c.positional_dynamic, "\"\n      ;;\n");
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
                      prog, " completion bash)\n",
                      // Sweep and run ids come from the server: `ablate __complete` prints them
                      // (nothing when no server is configured or it does not answer in time).
                      // COMP_LINE rather than COMP_WORDS, which bash splits at ':' (HOST:PORT).
                      "# Sweep and run ids: `", prog,
                      " __complete sweeps|runs|workers`, with the command line's server flags.\n",
                      fn,
                      "_ids() {\n"
                      "  local bin=\"${COMP_WORDS[0]}\" i w\n"
                      "  local -a line=() conn=()\n"
                      "  [[ \"$bin\" == \"~/\"* ]] && bin=\"$HOME/${bin#\\~/}\"\n"
                      "  if [[ -n \"${COMP_LINE-}\" ]]; then\n"
                      "    read -ra line <<< \"${COMP_LINE:0:${COMP_POINT:-${#COMP_LINE}}}\"\n"
                      "  else\n"
                      "    line=( \"${COMP_WORDS[@]:0:COMP_CWORD}\" )\n"
                      "  fi\n"
                      "  for (( i = 1; i < ${#line[@]}; i++ )); do\n"
                      "    w=\"${line[i]}\"\n"
                      "    case \"$w\" in\n"
                      "      ",
                      kConnValueFlags,
                      ") conn+=( \"$w\" \"${line[i+1]-}\" ); (( i++ )) ;;\n"
                      "      --tls|",
                      absl::StrReplaceAll(kConnValueFlags, {{"|", "=*|"}}),
                      "=*) conn+=( \"$w\" ) ;;\n"
                      "    esac\n"
                      "  done\n"
                      "  \"$bin\" \"${conn[@]}\" __complete \"$1\" 2>/dev/null | cut -f1\n"
                      "}\n",
                      fn,
                      "() {\n"
                      "  local cur prev cmd words files dyn i w\n"
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
                      "  dyn=\"\"\n"
                      "  case \"$cmd\" in\n",
                      cases,
                      "  esac\n"
                      "  COMPREPLY=( $(compgen -W \"$words\" -- \"$cur\") )\n"
                      "  if (( files )) && [[ \"$cur\" != -* ]]; then\n"
                      "    COMPREPLY+=( $(compgen -f -- \"$cur\") )\n"
                      "  fi\n"
                      "  if [[ -n \"$dyn\" && \"$cur\" != -* ]]; then\n"
                      "    COMPREPLY+=( $(compgen -W \"$(",
                      fn,
                      "_ids \"$dyn\")\" -- \"$cur\") )\n"
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

// `seen`: names already given (a command's own --help hides the global one). `fn`: the
// script's function, whose `fn_ids` completes sweep and run ids.
std::string ZshSpecs(const Cmd& c, std::set<std::string>* seen, const std::string& fn) {
  std::string out;
  for (const auto& o : c.options) {
    const std::string action =
        !o.takes_value       ? ""
        : !o.dynamic.empty() ? absl::StrCat(":value:", fn, "_ids ", o.dynamic)
        : o.choices.empty()  ? ":value:_files"
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
      const std::string own = ZshSpecs(c, &seen, fn);
      absl::StrAppend(
          &cases, "        ", c.name, ") _arguments -s", own, ZshSpecs(root, &seen, fn),
          c.has_positional ? " '*:argument:_files'" : "",
          c.positional_dynamic.empty() ? ""
                                       : absl::StrCat(" '1:", c.positional_dynamic, ":", fn,
                                                      "_ids ", c.positional_dynamic, "'"),
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
                      "# Load it with: source <(", prog, " completion zsh)\n",
                      // `ablate __complete` prints "ID<TAB>what it is" a line; _describe wants
                      // "ID:what it is", a colon in the ID escaped.
                      "# Sweep and run ids: `", prog,
                      " __complete sweeps|runs|workers`, with the command line's server flags.\n",
                      fn,
                      "_ids() {\n"
                      "  local -a items\n"
                      "  local row\n"
                      "  for row in ${(f)\"$(${~_ablate_bin:-",
                      prog,
                      "} \"${_ablate_conn[@]}\" __complete $1 2>/dev/null)\"}; do\n"
                      "    items+=( \"${${row%%$'\\t'*}//:/\\\\:}:${row#*$'\\t'}\" )\n"
                      "  done\n"
                      "  _describe -t $1 $1 items\n"
                      "}\n",
                      fn,
                      "() {\n"
                      "  local context state state_descr line\n"
                      "  typeset -A opt_args\n"
                      // The server flags before _arguments narrows $words to the command's own.
                      "  local _ablate_bin=$words[1] i\n"
                      "  local -a _ablate_conn\n"
                      "  for (( i = 2; i < CURRENT; i++ )); do\n"
                      "    case $words[i] in\n"
                      "      (",
                      kConnValueFlags,
                      ") _ablate_conn+=( $words[i] \"$words[i+1]\" ); (( i++ )) ;;\n"
                      "      (--tls|",
                      absl::StrReplaceAll(kConnValueFlags, {{"|", "=*|"}}),
                      "=*) _ablate_conn+=( $words[i] ) ;;\n"
                      "    esac\n"
                      "  done\n"
                      "  _arguments -C",
                      ZshSpecs(root, &root_seen, fn),
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

// A fish single-quoted string: backslash and quote escaped.
std::string FishQuote(const std::string& text) {
  std::string out = "'";
  for (char ch : text) {
    if (ch == '\\' || ch == '\'') out += '\\';
    out += ch == '\n' ? ' ' : ch;
  }
  return out + "'";
}

// fish: `fn_cmd` finds the command path (as bash's `cmd`: "ls", "config/init") on the line;
// each command's options (its own, then the global ones it does not hide) complete under
// `fn_is PATH`, so a command's -o or --help is offered once. No file names unless a command
// takes a file (submit FILE) or an option a path (-F).
std::string Fish(const Cmd& root, const std::string& prog) {
  const std::string fn = "__" + prog;
  std::string top, nested, lines;
  for (const auto& c : root.subcommands) {
    absl::StrAppend(&top, " ", c.name);
    if (!c.subcommands.empty()) absl::StrAppend(&nested, " ", c.name);
  }
  auto add = [&](const std::string& path, const Cmd& c, const Cmd* global) {
    const std::string when = absl::StrCat("complete -c ", prog, " -n ",
                                          FishQuote(fn + "_is " + (path.empty() ? "''" : path)));
    for (const auto& s : c.subcommands) {
      absl::StrAppend(&lines, when, " -a ", FishQuote(s.name), " -d ", FishQuote(s.help), "\n");
    }
    for (const auto& choice : c.positional_choices) {
      absl::StrAppend(&lines, when, " -a ", FishQuote(choice), "\n");
    }
    if (c.has_positional) absl::StrAppend(&lines, when, " -F\n");
    if (!c.positional_dynamic.empty()) {
      absl::StrAppend(&lines, when, " -a ",
                      FishQuote(absl::StrCat("(", fn, "_ids ", c.positional_dynamic, ")")), "\n");
    }
    for (const Opt* o : Visible(c, global)) {
      std::string spec;
      for (const auto& n : o->names) {
        absl::StrAppend(&spec, n.size() > 2 ? " -l " : " -s ", n.substr(n.size() > 2 ? 2 : 1));
      }
      if (o->takes_value) {
        if (!o->dynamic.empty()) {
          absl::StrAppend(&spec, " -x -a ",
                          FishQuote(absl::StrCat("(", fn, "_ids ", o->dynamic, ")")));
        } else if (!o->choices.empty()) {
          absl::StrAppend(&spec, " -x -a ", FishQuote(absl::StrJoin(o->choices, " ")));
        } else {
          absl::StrAppend(&spec, " -r -F");
        }
      }
      absl::StrAppend(&lines, when, spec, " -d ", FishQuote(o->help), "\n");
    }
  };
  add("", root, nullptr);
  for (const auto& c : root.subcommands) {
    add(c.name, c, &root);
    for (const auto& s : c.subcommands) add(c.name + "/" + s.name, s, &root);
  }
  return absl::StrCat(
      "# fish completion for ", prog, ", generated by `", prog,
      " completion fish` from its own command definitions.\n"
      "# Load it with: ",
      prog, " completion fish | source\n# or save it as ~/.config/fish/completions/", prog,
      ".fish\n"
      "function ",
      fn,
      "_cmd\n"
      "    set -l cmd ''\n"
      "    for w in (commandline -opc)[2..-1]\n"
      "        if test -z \"$cmd\"\n"
      "            contains -- $w",
      top,
      "; and set cmd $w\n"
      "        else if not string match -q -- '*/*' $cmd; and not string match -q -- '-*' $w\n"
      "            contains -- $cmd",
      nested.empty() ? " __none__" : nested,
      "; and set cmd $cmd/$w\n"
      "        end\n"
      "    end\n"
      "    echo $cmd\n"
      "end\n"
      "function ",
      fn,
      "_is\n"
      "    set -l cmd (",
      fn,
      "_cmd)\n"
      "    test \"$cmd\" = \"$argv[1]\"\n"
      "end\n"
      "# Sweep and run ids: `",
      prog,
      " __complete sweeps|runs|workers`, with the command line's server flags.\n"
      "function ",
      fn,
      "_ids\n"
      "    set -l words (commandline -opc)\n"
      "    set -l conn\n"
      "    set -l i 2\n"
      "    while test $i -le (count $words)\n"
      "        switch $words[$i]\n"
      "            case ",
      absl::StrReplaceAll(kConnValueFlags, {{"|", " "}}),
      "\n"
      "                set i (math $i + 1)\n"
      "                test $i -le (count $words); and set conn $conn $words[(math $i - 1)] "
      "$words[$i]\n"
      "            case --tls '",
      absl::StrReplaceAll(kConnValueFlags, {{"|", "=*' '"}}),
      "=*'\n"
      "                set conn $conn $words[$i]\n"
      "        end\n"
      "        set i (math $i + 1)\n"
      "    end\n"
      // fish reports an unknown command itself, past the 2>/dev/null.
      "    command -q $words[1]; or return 0\n"
      "    command $words[1] $conn __complete $argv[1] 2>/dev/null\n"
      "end\n"
      "complete -c ",
      prog, " -f\n", lines);
}

}  // namespace

absl::StatusOr<std::string> CompletionScript(const CLI::App& app, const std::string& shell) {
  const Cmd root = Describe(app);
  const std::string prog = app.get_name().empty() ? "ablate" : app.get_name();
  if (shell == "bash") return Bash(root, prog);
  if (shell == "zsh") return Zsh(root, prog);
  if (shell == "fish") return Fish(root, prog);
  return absl::InvalidArgumentError(
      absl::StrCat("completion: unknown shell '", shell, "' (expected bash, zsh or fish)"));
}

}  // namespace ablate::cli

namespace ablate::cli {

int CompleteIds(const ConnectionFlags& flags, const std::string& what, const std::string& sweep) {
  // Run from a shell's completion function at each TAB: whatever happens, nothing on stderr
  // (gRPC's own logging included) and exit 0, so a missing server only means no candidates.
  if (const int null = open("/dev/null", O_WRONLY); null >= 0) {
    dup2(null, STDERR_FILENO);
    close(null);
  }
  if (ServerUnconfigured(flags)) return 0;
  auto conn = ResolveConnection(flags);
  if (!conn.ok()) return 0;
  auto channel = rpc::MakeChannel(*conn);
  if (!channel.ok()) return 0;
  Context ctx;
  ctx.conn = *conn;
  ctx.stub = v1::SweepService::NewStub(*channel);
  ctx.timeout_seconds = kCompleteTimeoutSeconds;
  if (what == "sweeps") {
    v1::ListSweepsRequest req;
    req.set_limit(kCompleteLimit);
    auto resp = ctx.Call("list sweeps", &v1::SweepService::Stub::ListSweeps, req);
    if (!resp.ok()) return 0;
    std::set<std::string> names;
    for (const auto& sw : resp->sweeps()) {
      std::cout << sw.id() << "\t" << sw.name() << " (" << sw.state() << ")\n";
    }
    // A name means its newest sweep, which ListSweeps gives first.
    for (const auto& sw : resp->sweeps()) {
      if (names.insert(sw.name()).second) {
        std::cout << sw.name() << "\tsweep " << sw.id() << " (" << sw.state() << ")\n";
      }
    }
  } else if (what == "runs") {
    v1::ListRunsRequest req;
    if (!sweep.empty()) *req.mutable_sweep() = ParseSweepRef(sweep);
    req.set_limit(kCompleteLimit);
    auto resp = ctx.Call("list runs", &v1::SweepService::Stub::ListRuns, req);
    if (!resp.ok()) return 0;
    for (const auto& r : resp->runs()) {
      std::cout << r.id() << "\tsweep " << r.sweep_id() << " " << r.cell() << " seed " << r.seed()
                << " (" << util::RunStateName(r.state()) << ")\n";
    }
  } else if (what == "workers") {
    // Live workers by name (what `ablate workers unbench` takes), the benched ones first.
    v1::ListWorkersRequest req;
    auto resp = ctx.Call("list workers", &v1::SweepService::Stub::ListWorkers, req);
    if (!resp.ok()) return 0;
    for (bool benched : {true, false}) {
      for (const auto& w : resp->workers()) {
        if ((w.state() == "benched") != benched) continue;
        std::cout << w.info().name() << "\t" << w.state() << " " << w.info().device_kind() << "\n";
      }
    }
  }
  return 0;
}

}  // namespace ablate::cli
