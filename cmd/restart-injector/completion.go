package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

const completionUsage = `usage: restart-injector completion bash|zsh|fish

Print a shell completion script for restart-injector (and kubectl-restarts,
the plugin link) that completes the commands, each command's flags and the
values of the flags that take one of a few words.

  source <(restart-injector completion bash)              # bash, this shell
  restart-injector completion bash > /etc/bash_completion.d/restart-injector
  source <(restart-injector completion zsh)               # zsh (after compinit)
  restart-injector completion fish > ~/.config/fish/completions/restart-injector.fish
`

// completionShells are the shells completion writes scripts for.
var completionShells = []string{"bash", "zsh", "fish"}

// compFlag is one flag as the scripts offer it.
type compFlag struct {
	long, short string // without dashes; either may be empty
	usage       string
	takesValue  bool
	values      []string // the words the value can be; nil: files
}

// compCommand is one subcommand and its flags.
type compCommand struct {
	name, summary string
	flags         []compFlag
	args          []string // the words its first argument can be
}

// flagValues are the words of the flags whose value is one of a few,
// by command and flag name. The commands check the same lists; the
// completion test runs each command with a value from here.
var flagValues = map[string][]string{
	"status output":             {"wide", "json", "yaml", "name"},
	"version output":            {"json", "yaml"},
	"check output":              {"json"},
	"explain output":            {"json", "yaml"},
	"serve cert-mode":           {"files", "self"},
	"serve native":              {"off", "auto", "on"},
	"serve delivery":            {"auto", "copy", "image"},
	"inject delivery":           {"copy", "image"},
	"serve on-entrypoint-error": {"deny", "allow"},
	"serve image-pull-policy":   {"Always", "IfNotPresent", "Never"},
	"serve volume-medium":       {"Memory"},
	"serve log-format":          {"json", "text"},
	"serve log-level":           {"debug", "info", "warn", "error"},
	"node-agent log-format":     {"json", "text"},
	"inject volume-medium":      {"Memory"},
	"docker-args format":        {"shell", "json"},
	"docker-args source":        {"auto", "local", "registry"},
	"docker-args log-format":    {"text", "json"},
}

func init() {
	var versions []string
	for _, v := range rules.KubeVersions() {
		versions = append(versions, v.String())
	}
	flagValues["inject kubernetes-version"] = versions
	flagValues["explain kubernetes-version"] = versions
	subcommands = append(subcommands, subcommand{"completion", "print a shell completion script: completion bash|zsh|fish",
		func(ctx context.Context, args []string, std stdio) int {
			return runCompletion(ctx, args, std.out, std.err)
		}})
	sort.Slice(subcommands, func(i, j int) bool { return subcommands[i].name < subcommands[j].name })
}

func runCompletion(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("completion")
	if code, ok := parseFlags(fs, "completion", args, completionUsage, stderr); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "restart-injector completion: want one shell (%s), got %d arguments\n", strings.Join(completionShells, ", "), fs.NArg())
		return exitUsage
	}
	cmds := completionCommands(ctx)
	var script string
	switch fs.Arg(0) {
	case "bash":
		script = bashCompletion(cmds)
	case "zsh":
		script = zshCompletion(cmds)
	case "fish":
		script = fishCompletion(cmds)
	default:
		fmt.Fprintf(stderr, "restart-injector completion: %q: want one of %s\n", fs.Arg(0), strings.Join(completionShells, ", "))
		return exitUsage
	}
	if _, err := io.WriteString(stdout, script); err != nil {
		fmt.Fprintf(stderr, "restart-injector completion: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// completionCommands learns every subcommand's flags by running it with
// -h with nothing to read and nowhere to write, and taking the flag set it
// made (flagSetMade).
func completionCommands(ctx context.Context) []compCommand {
	var out []compCommand
	for _, sc := range subcommands {
		c := compCommand{name: sc.name, summary: sc.summary}
		if sc.name == "completion" {
			c.args = completionShells
		} else {
			var made []*pflag.FlagSet
			flagSetMade = func(fs *pflag.FlagSet) { made = append(made, fs) }
			sc.run(ctx, []string{"-h"}, stdio{strings.NewReader(""), io.Discard, io.Discard})
			flagSetMade = nil
			for _, fs := range made {
				c.flags = append(c.flags, flagsOf(sc.name, fs)...)
			}
		}
		out = append(out, c)
	}
	return out
}

// flagsOf lists a flag set's flags, each with its long name and its
// shorthand.
func flagsOf(cmd string, fs *pflag.FlagSet) []compFlag {
	var out []compFlag
	fs.VisitAll(func(f *pflag.Flag) {
		_, usage := pflag.UnquoteUsage(f)
		out = append(out, compFlag{long: f.Name, short: f.Shorthand, usage: usage,
			takesValue: f.NoOptDefVal == "", values: flagValues[cmd+" "+f.Name]})
	})
	return out
}

// words are the flag's spellings, -x and --name.
func (f compFlag) words() []string {
	var w []string
	if f.short != "" {
		w = append(w, "-"+f.short)
	}
	if f.long != "" {
		w = append(w, "--"+f.long)
	}
	return w
}

// summaryLine is the usage cut to its first line and 80 bytes, for the
// shells that show one.
func summaryLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

func bashCompletion(cmds []compCommand) string {
	var b strings.Builder
	b.WriteString(`# bash completion for restart-injector and kubectl-restarts (restart-injector completion bash)
_restart_injector() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd= i
    if [[ ${COMP_WORDS[0]##*/} == kubectl-restarts ]]; then
        cmd=status
    else
        for ((i = 1; i < COMP_CWORD; i++)); do
            case ${COMP_WORDS[i]} in -*) ;; *) cmd=${COMP_WORDS[i]}; break ;; esac
        done
    fi
    if [[ -z $cmd ]]; then
        COMPREPLY=($(compgen -W "`)
	var names []string
	for _, c := range cmds {
		names = append(names, c.name)
	}
	b.WriteString(strings.Join(names, " ") + ` help --help --version" -- "$cur"))
        return
    fi
    case $cmd in
`)
	for _, c := range cmds {
		fmt.Fprintf(&b, "    %s)\n", c.name)
		var all, files []string
		var enums []compFlag
		for _, f := range c.flags {
			all = append(all, f.words()...)
			if f.takesValue && f.values == nil {
				files = append(files, f.words()...)
			} else if f.takesValue {
				enums = append(enums, f)
			}
		}
		b.WriteString("        case $prev in\n")
		for _, f := range enums {
			fmt.Fprintf(&b, "        %s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", strings.Join(f.words(), "|"), strings.Join(f.values, " "))
		}
		if len(files) > 0 {
			// A value: the shell's own completion (complete -o default).
			fmt.Fprintf(&b, "        %s) COMPREPLY=(); return ;;\n", strings.Join(files, "|"))
		}
		b.WriteString("        esac\n")
		if c.args != nil {
			fmt.Fprintf(&b, "        [[ $cur != -* ]] && { COMPREPLY=($(compgen -W %q -- \"$cur\")); return; }\n", strings.Join(c.args, " "))
		}
		fmt.Fprintf(&b, "        [[ $cur == -* ]] && COMPREPLY=($(compgen -W %q -- \"$cur\"))\n        ;;\n", strings.Join(append(all, "-h", "--help"), " "))
	}
	b.WriteString(`    esac
}
complete -o default -F _restart_injector restart-injector kubectl-restarts
`)
	return b.String()
}

// zshQuote escapes s for a single-quoted _arguments spec: the quote
// itself, and the brackets and colons the spec gives a meaning to.
func zshQuote(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, "'", `'\''`)
	for _, c := range []string{"[", "]", ":"} {
		s = strings.ReplaceAll(s, c, `\`+c)
	}
	return s
}

func zshCompletion(cmds []compCommand) string {
	var b strings.Builder
	b.WriteString(`#compdef restart-injector kubectl-restarts
# zsh completion for restart-injector and kubectl-restarts (restart-injector completion zsh)
_restart_injector() {
    local cmd
    if [[ ${service:-$words[1]:t} == kubectl-restarts ]]; then
        cmd=status
    else
        if (( CURRENT == 2 )); then
            local -a cmds
            cmds=(
`)
	for _, c := range cmds {
		fmt.Fprintf(&b, "                '%s:%s'\n", c.name, zshQuote(summaryLine(c.summary)))
	}
	b.WriteString(`            )
            _describe -t commands 'restart-injector command' cmds
            return
        fi
        cmd=$words[2]
        shift words
        (( CURRENT-- ))
    fi
    case $cmd in
`)
	for _, c := range cmds {
		// ":" ends _arguments' own options: a first spec such as
		// '-A[...]' would otherwise be read as its -A (no options after
		// the first argument), and `status web --all<Tab>` would offer
		// nothing.
		fmt.Fprintf(&b, "    %s)\n        _arguments -s :", c.name)
		for _, f := range c.flags {
			action := ""
			if f.takesValue {
				action = ":value:_files"
				if f.values != nil {
					action = ":value:(" + strings.Join(f.values, " ") + ")"
				}
			}
			desc := zshQuote(summaryLine(f.usage))
			for _, w := range f.words() {
				fmt.Fprintf(&b, " \\\n            '%s[%s]%s'", w, desc, action)
			}
		}
		if c.args != nil {
			fmt.Fprintf(&b, " \\\n            '1:shell:(%s)'", strings.Join(c.args, " "))
		} else {
			b.WriteString(" \\\n            '*:file:_files'")
		}
		b.WriteString("\n        ;;\n")
	}
	b.WriteString(`    esac
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _restart_injector "$@"
else
    compdef _restart_injector restart-injector kubectl-restarts
fi
`)
	return b.String()
}

// fishQuote is s in fish's single quotes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

func fishCompletion(cmds []compCommand) string {
	var b strings.Builder
	b.WriteString("# fish completion for restart-injector and kubectl-restarts (restart-injector completion fish)\n")
	var names []string
	for _, c := range cmds {
		names = append(names, c.name)
	}
	b.WriteString("complete -c restart-injector -f\ncomplete -c kubectl-restarts -f\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "complete -c restart-injector -n 'not __fish_seen_subcommand_from %s' -a %s -d %s\n",
			strings.Join(names, " "), c.name, fishQuote(summaryLine(c.summary)))
	}
	for _, c := range cmds {
		conds := []string{fmt.Sprintf("-c restart-injector -n '__fish_seen_subcommand_from %s'", c.name)}
		if c.name == "status" {
			conds = append(conds, "-c kubectl-restarts")
		}
		for _, cond := range conds {
			for _, f := range c.flags {
				fmt.Fprintf(&b, "complete %s", cond)
				if f.short != "" {
					// Go's flag package and pflag both take -x.
					fmt.Fprintf(&b, " -s %s", f.short)
				}
				if f.long != "" {
					fmt.Fprintf(&b, " -l %s", f.long)
				}
				switch {
				case f.takesValue && f.values != nil:
					fmt.Fprintf(&b, " -x -a %s", fishQuote(strings.Join(f.values, " ")))
				case f.takesValue:
					b.WriteString(" -r -F")
				}
				fmt.Fprintf(&b, " -d %s\n", fishQuote(summaryLine(f.usage)))
			}
			if c.args != nil {
				fmt.Fprintf(&b, "complete %s -x -a %s\n", cond, fishQuote(strings.Join(c.args, " ")))
			}
		}
	}
	return b.String()
}
