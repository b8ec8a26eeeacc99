package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// completionCases are command lines and candidates each shell must offer
// for the last word: commands, flags of Go's flag package and of pflag
// (status), the values of a flag that takes a few words, completion's
// shell argument, and the kubectl plugin's name.
var completionCases = []struct {
	words []string // the last one is being completed
	want  []string
}{
	{[]string{"restart-injector", "sta"}, []string{"status"}},
	{[]string{"restart-injector", "status", "-o", ""}, []string{"wide", "json", "yaml", "name"}},
	{[]string{"restart-injector", "status", "web", "--all"}, []string{"--all-namespaces"}},
	{[]string{"restart-injector", "inject", "--no-l"}, []string{"--no-lookup"}},
	{[]string{"restart-injector", "inject", "--kubernetes-version", ""}, []string{"1.34", "1.35", "1.36", "1.37"}},
	{[]string{"restart-injector", "serve", "--native", ""}, []string{"off", "auto", "on"}},
	{[]string{"restart-injector", "completion", ""}, []string{"bash", "zsh", "fish"}},
	{[]string{"kubectl-restarts", "--all"}, []string{"--all-namespaces"}},
}

// needShell finds a shell, or skips (fails with CI=true, where every
// shell is expected).
func needShell(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not installed", name)
		}
		t.Skipf("%s not installed (Debian: apt-get install %s)", name, name)
	}
	return p
}

// TestCompletionScripts loads the script each shell gets from the real
// binary into the real shell and asks it for the candidates of each case:
// bash through its completion function, fish through complete -C, zsh
// through an interactive shell on a pseudo-terminal.
func TestCompletionScripts(t *testing.T) {
	dir := t.TempDir()
	script := func(shell string) string {
		code, out, errs := runBin(t, nil, "completion", shell)
		if code != exitOK || out == "" {
			t.Fatalf("completion %s: exit %d %s", shell, code, errs)
		}
		p := filepath.Join(dir, "completion."+shell)
		if err := os.WriteFile(p, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	check := func(t *testing.T, words []string, got string, want []string) {
		t.Helper()
		fields := strings.Fields(got)
		var missing []string
		for _, w := range want {
			if !slices.Contains(fields, w) {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 {
			t.Errorf("%q: candidates %q lack %q", strings.Join(words, " "), fields, missing)
		}
	}

	t.Run("bash", func(t *testing.T) {
		bash := needShell(t, "bash")
		s := script("bash")
		for _, c := range completionCases {
			var quoted []string
			for _, w := range c.words {
				quoted = append(quoted, "'"+w+"'")
			}
			prog := `source "$1"; COMP_WORDS=(` + strings.Join(quoted, " ") + `); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); COMPREPLY=(); _restart_injector; printf '%s\n' "${COMPREPLY[@]}"`
			out, err := exec.Command(bash, "-c", prog, "bash", s).CombinedOutput()
			if err != nil {
				t.Fatalf("bash: %v\n%s", err, out)
			}
			check(t, c.words, string(out), c.want)
		}
	})
	t.Run("fish", func(t *testing.T) {
		fish := needShell(t, "fish")
		s := script("fish")
		for _, c := range completionCases {
			line := strings.Join(c.words, " ")
			out, err := exec.Command(fish, "--no-config", "-c", "source $argv[1]; complete -C $argv[2]", s, line).CombinedOutput()
			if err != nil {
				t.Fatalf("fish: %v\n%s", err, out)
			}
			var cands []string
			for _, l := range strings.Split(string(out), "\n") {
				cand, _, _ := strings.Cut(l, "\t")
				cands = append(cands, cand)
			}
			check(t, c.words, strings.Join(cands, " "), c.want)
		}
	})
	t.Run("zsh", func(t *testing.T) {
		zsh := needShell(t, "zsh")
		s := script("zsh")
		if out, err := exec.Command(zsh, "-n", s).CombinedOutput(); err != nil {
			t.Fatalf("zsh -n: %v\n%s", err, out)
		}
		driver, err := filepath.Abs("testdata/zsh-complete.zsh")
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range completionCases {
			out := filepath.Join(dir, "zsh-out-"+string(rune('a'+i)))
			// The driver waits for the shell's answers; a bound, should a
			// broken script keep zsh from ever answering.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			cmd := exec.CommandContext(ctx, zsh, "-f", driver, strings.Join(c.words, " "), s, out)
			cmd.Dir = dir
			b, err := cmd.CombinedOutput()
			cancel()
			if err != nil {
				t.Fatalf("zsh: %v\n%s", err, b)
			}
			got, _ := os.ReadFile(out)
			if e, _ := os.ReadFile(out + ".err"); len(e) > 0 {
				t.Errorf("%q: zsh errors: %s", strings.Join(c.words, " "), e)
			}
			check(t, c.words, string(got), c.want)
		}
	})
}

// TestCompletionFlagsAreTheCommandsOwn: the scripts list the flags of the
// flag sets the commands parse, and every list of values names a flag that
// exists.
func TestCompletionFlagsAreTheCommandsOwn(t *testing.T) {
	flags := map[string]bool{}
	for _, c := range completionCommands(context.Background()) {
		for _, f := range c.flags {
			flags[c.name+" "+f.long] = true
			flags[c.name+" "+f.short] = true
		}
	}
	for k := range flagValues {
		if !flags[k] {
			t.Errorf("flagValues %q: no such flag", k)
		}
	}
	for _, k := range []string{"inject f", "inject no-lookup", "serve native", "status namespace", "status n", "status watch", "version o"} {
		if !flags[k] {
			t.Errorf("flag %q not collected", k)
		}
	}
	if flagSetMade != nil {
		t.Error("flagSetMade left set")
	}
}

// TestCompletionAndVersionUsage: the exit status and one-line messages of
// completion and version, and version's formats.
func TestCompletionAndVersionUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"completion"}, exitUsage, "want one shell (bash, zsh, fish), got 0 arguments"},
		{[]string{"completion", "tcsh"}, exitUsage, `"tcsh": want one of bash, zsh, fish`},
		{[]string{"completion", "bash", "zsh"}, exitUsage, "got 2 arguments"},
		{[]string{"completion", "-h"}, exitOK, "usage: restart-injector completion bash|zsh|fish"},
		{[]string{"version", "-o", "xml"}, exitUsage, `-o "xml": want json or yaml`},
		{[]string{"version", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"--version", "--bogus"}, exitUsage, "unknown flag: --bogus"},
	} {
		code, _, errs := runBin(t, nil, c.args...)
		if code != c.code || !strings.Contains(errs, c.msg) {
			t.Errorf("%s: exit %d %q, want %d and %q", strings.Join(c.args, " "), code, errs, c.code, c.msg)
		}
	}
	_, line, _ := runBin(t, nil, "version")
	if _, v, _ := runBin(t, nil, "--version"); v != line || !strings.HasPrefix(line, "restart-injector "+contract.Version+" ") {
		t.Errorf("--version %q, version %q", v, line)
	}
	for _, o := range []string{"-o", "--output", "-output"} {
		code, out, errs := runBin(t, nil, "version", o, "json")
		var v versionInfo
		if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Version != contract.Version || v.Platform != runtime.GOOS+"/"+runtime.GOARCH || v.GoVersion != runtime.Version() {
			t.Errorf("version %s json: exit %d %v %q %s", o, code, err, out, errs)
		}
	}
	if code, out, _ := runBin(t, nil, "version", "-o", "yaml"); code != 0 || !strings.Contains(out, "version: "+contract.Version+"\n") || !strings.Contains(out, "goVersion: ") {
		t.Errorf("version -o yaml: exit %d %q", code, out)
	}
}
