// Command restart-supervisor runs a container's workload as PID 1 and
// restarts it in place according to KEP-5307 restart rules, for clusters
// whose kubelet cannot do so itself.
//
//	restart-supervisor [flags] -- COMMAND [ARGS...]
//	restart-supervisor install DIR
//	restart-supervisor version
//	restart-supervisor status [--json]
//
// Exit status: the workload's final status (its exit code, or 128+signal);
// 127 when COMMAND is not found, 126 when it cannot be executed; 2 for a
// usage or configuration error, reported on one line before anything runs.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/configreload"
	"github.com/restart-supervisor/restart-supervisor/podstate"
	"github.com/restart-supervisor/restart-supervisor/rules"
	"github.com/restart-supervisor/restart-supervisor/supervise"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const (
	exitUsage = 2

	envConfig           = "RESTART_SUPERVISOR_CONFIG"
	envLogFormat        = "RESTART_SUPERVISOR_LOG_FORMAT"
	envStateDir         = "RESTART_SUPERVISOR_STATE_DIR"
	envName             = "RESTART_SUPERVISOR_CONTAINER_NAME"
	envPlatformCommands = "RESTART_SUPERVISOR_PLATFORM_COMMANDS"
	envStopSignals      = "RESTART_SUPERVISOR_STOP_SIGNALS"
)

func main() { os.Exit(run(os.Args[1:])) }

// tightenGC is called at the first in-place restart. The supervisor's live
// heap is a few hundred KiB, but Go's default lets the heap grow to 4 MiB
// before the first collection, which a restart storm reaches: collecting at
// +10% keeps the resident set near its idle size at the cost of frequent,
// tiny collections. It is not done at start-up, where changing the GC
// percentage costs a collection and start-up time. GOGC, when set, wins.
var tightenGC = sync.OnceFunc(func() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(10)
	}
})

// subcommand is a mode of the binary other than supervising, chosen by the
// first argument; any other first argument is a flag of the supervisor or
// "--".
type subcommand struct {
	name     string
	synopsis string // the arguments, for the usage text
	summary  string // one line, for the usage text
	run      func(args []string) int
}

// subcommands is every subcommand, in the order the usage text lists them.
var subcommands = []subcommand{
	{"install", "DIR", "copy this binary into DIR (the injected init container's job)", installCmd},
	{"version", "", "print the version", versionCmd},
	{"status", "[--json]", "print the status of every supervised container of the pod",
		func(args []string) int { return podstate.StatusCommand(args, os.Stdout, os.Stderr) }},
}

func run(args []string) int {
	if len(args) > 0 {
		for _, sc := range subcommands {
			if sc.name == args[0] {
				return sc.run(args[1:])
			}
		}
	}
	return supervisorCmd(args)
}

func versionCmd([]string) int {
	fmt.Printf("restart-supervisor %s %s %s/%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}

// usageError prints one line and returns the usage exit status.
func usageError(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "restart-supervisor: "+format+"\n", a...)
	return exitUsage
}

// usage is the text of --help, before the flags.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: restart-supervisor [flags] -- COMMAND [ARGS...]\n")
	for _, sc := range subcommands {
		fmt.Fprintf(&b, "       %-36s %s\n", strings.TrimSpace("restart-supervisor "+sc.name+" "+sc.synopsis), sc.summary)
	}
	b.WriteString("\nflags:\n")
	return b.String()
}

type cliFlags struct {
	config, logFormat, stateDir, name, termPath, stopSignals string
	grace                                                    time.Duration
}

func supervisorCmd(args []string) int {
	var f cliFlags
	fs := flag.NewFlagSet("restart-supervisor", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.config, "config", "", "restart configuration file, YAML or JSON (default: $"+envConfig+")")
	fs.DurationVar(&f.grace, "grace-period", 25*time.Second, "after a stop signal, SIGKILL the workload's process group if it is still running after this long")
	fs.StringVar(&f.logFormat, "log-format", envOr(envLogFormat, "text"), "log format on stderr: text or json ($"+envLogFormat+")")
	fs.StringVar(&f.stateDir, "state-dir", os.Getenv(envStateDir), "directory for the status file shared by the pod's containers ($"+envStateDir+")")
	fs.StringVar(&f.name, "name", os.Getenv(envName), "container name used in logs and the status file ($"+envName+")")
	fs.StringVar(&f.termPath, "termination-message-path", "", "file for the restart summary written on exit (default "+podstate.DefaultTerminationMessagePath+" when --state-dir is set)")
	fs.StringVar(&f.stopSignals, "stop-signals", envOr(envStopSignals, "SIGTERM,SIGINT"), "comma-separated signals that stop the container instead of being only forwarded ($"+envStopSignals+")")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Print(usage())
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			return 0
		}
		return usageError("%v (see --help)", err)
	}
	if f.grace < 0 {
		return usageError("--grace-period: must not be negative, got %s", f.grace)
	}
	argv := fs.Args()

	logger, err := newLogger(f.logFormat, os.Stderr, f.name)
	if err != nil {
		return usageError("%v", err)
	}
	cfg, src, err := loadConfig(f.config)
	if err != nil {
		if src == "" {
			return usageError("%v", err)
		}
		return usageError("invalid config (%s): %v", src, err)
	}
	// A config file is watched: an edit (or a ConfigMap update) decides
	// every exit from the moment it is valid and in force.
	var current func() rules.Config
	if f.config != "" {
		r, err := configreload.Watch(f.config, configreload.Options{
			OnReload: func(rules.Config) { logger.Info("configuration reloaded", "config", f.config) },
			OnError: func(err error) {
				logger.Warn("configuration change rejected; the rules in force stay", "config", f.config, "err", err)
			},
		})
		if err != nil {
			return usageError("invalid config (--config %s): %v", f.config, err)
		}
		defer r.Close()
		current = r.Get
	}
	stops, err := parseStopSignals(f.stopSignals)
	if err != nil {
		return usageError("--stop-signals: %v", err)
	}
	if pc, ok := os.LookupEnv(envPlatformCommands); ok {
		cmd, err := platformCommand(pc, platformKeys())
		if err != nil {
			return usageError("%s: %v", envPlatformCommands, err)
		}
		argv = append(cmd, argv...)
	}
	if len(argv) == 0 {
		return usageError("no command given: usage: restart-supervisor [flags] -- COMMAND [ARGS...]")
	}

	path, err := exec.LookPath(argv[0])
	if err != nil && !errors.Is(err, exec.ErrDot) {
		se := lookupError(argv[0], err)
		fmt.Fprintf(os.Stderr, "restart-supervisor: %v\n", se)
		return se.Status()
	}

	p, err := joinPod(f.stateDir, f.name, logger)
	if err != nil {
		return usageError("--state-dir %s: %v", f.stateDir, err)
	}
	var final supervise.State
	res := supervise.Run(supervise.Options{
		Path:        path,
		Argv:        argv,
		Env:         os.Environ(),
		Config:      cfg,
		Rules:       current,
		GracePeriod: f.grace,
		StopSignals: stops,
		Log:         logger,
		Pod:         p.restarter(),
		OnChange: func(st supervise.State) {
			if st.Restarts > 0 {
				tightenGC()
			}
			final = st
			p.update(st)
		},
	})
	if res.StartErr != nil {
		fmt.Fprintf(os.Stderr, "restart-supervisor: %v\n", res.StartErr)
	}
	summary := p.close(final).Summary()
	// The kubelet shows the termination message in the container status,
	// the one place where in-place restarts become visible without logs.
	if term := f.termPath; term != "" || f.stateDir != "" {
		if err := podstate.WriteTerminationMessage(term, summary); err != nil {
			logger.Warn("cannot write the termination message", "err", err)
		}
	}
	return res.Status
}

func signalName(sig syscall.Signal) string { return unix.SignalName(sig) }

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

// loadConfig reads --config or the inline environment variable. Both at
// once is an error: silently preferring one would drop the other's rules.
// It returns a description of the source for error messages.
func loadConfig(file string) (rules.Config, string, error) {
	inline, hasInline := os.LookupEnv(envConfig)
	switch {
	case file != "" && hasInline:
		return rules.Config{}, "", fmt.Errorf("both --config and %s are set; use one", envConfig)
	case file != "":
		data, err := os.ReadFile(file)
		if err != nil {
			return rules.Config{}, "", fmt.Errorf("--config: %v", err)
		}
		cfg, err := rules.Parse(data)
		return cfg, "--config " + file, err
	case hasInline:
		cfg, err := rules.Parse([]byte(inline))
		return cfg, envConfig, err
	}
	return rules.Config{}, "", nil
}

func newLogger(format string, w io.Writer, name string) (*slog.Logger, error) {
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(w, nil)
	case "json":
		h = slog.NewJSONHandler(w, nil)
	default:
		return nil, fmt.Errorf("--log-format: unsupported value %q: supported values: \"text\", \"json\"", format)
	}
	l := slog.New(h).With("logger", "restart-supervisor")
	if name != "" {
		l = l.With("container", name)
	}
	return l, nil
}

func parseStopSignals(list string) ([]syscall.Signal, error) {
	var out []syscall.Signal
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		sig, ok := supervise.ParseSignal(name)
		if !ok || sig == syscall.SIGKILL || sig == syscall.SIGSTOP || sig == syscall.SIGCHLD {
			return nil, fmt.Errorf("unsupported signal %q", name)
		}
		out = append(out, sig)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no signal given")
	}
	return out, nil
}

// lookupError turns an exec.LookPath failure into the status a shell would
// give: 127 for a command that does not exist, 126 for one that exists but
// cannot be executed.
func lookupError(command string, err error) *supervise.StartError {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return supervise.NotFound(command)
	}
	if errors.Is(err, os.ErrPermission) {
		return &supervise.StartError{Command: command, Err: syscall.EACCES}
	}
	return &supervise.StartError{Command: command, Err: err}
}
