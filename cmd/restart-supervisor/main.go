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
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/restart-supervisor/restart-supervisor/configreload"
	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/podstate"
	"github.com/restart-supervisor/restart-supervisor/rules"
	"github.com/restart-supervisor/restart-supervisor/supervise"
)

const (
	exitUsage = 2

	// defaultGracePeriod is the pod default terminationGracePeriodSeconds.
	defaultGracePeriod = 30 * time.Second
	// containerdStartErrorCode is the exit code containerd's CRI reports
	// for a container whose process could not be started (reason
	// StartError); the kubelet applies the rules to it.
	containerdStartErrorCode = 128
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
	{"version", "", "print the version (also --version)", versionCmd},
	{"status", "[--json]", "print the status of every supervised container of the pod",
		func(args []string) int { return statusCmd(args, os.Stdout, os.Stderr) }},
}

func run(args []string) int {
	// --version alone, as most commands take it; with anything after it,
	// it is a supervisor flag (none is called so) and parsing says so.
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		return versionCmd(nil)
	}
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
	fmt.Printf("restart-supervisor %s %s %s/%s\n", contract.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
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
	config, logFormat, stateDir, name, termPath, termPolicy, stopSignals, startError string
	grace, configWatch                                                               string
	initSignals                                                                      bool
	kubeVersion                                                                      rules.KubeVersion
}

func supervisorCmd(args []string) int {
	f, argv, help, err := parseSupervisorFlags(args)
	if help {
		return 0
	}
	if err != nil {
		return usageError("%v", err)
	}
	v, err := f.values()
	if err != nil {
		return usageError("%v", err)
	}
	grace, startErrorCode, stops := v.grace, v.startErrorCode, v.stops
	logger, err := newLogger(f.logFormat, os.Stderr, f.name)
	if err != nil {
		return usageError("%v", err)
	}
	cfg, src, err := loadConfig(f.config, f.kubeVersion)
	if err != nil {
		if src == "" {
			return usageError("%v", err)
		}
		return usageError("invalid config (%s): %v", src, err)
	}
	current, unwatchConfig, closeConfig, err := watchConfig(f, logger)
	if err != nil {
		return usageError("%v", err)
	}
	defer closeConfig()
	path, argv, lookErr, err := workloadCommand(argv)
	if err != nil {
		return usageError("%v", err)
	}
	if lookErr != nil {
		se := lookupError(argv[0], lookErr)
		if startErrorCode == 0 {
			fmt.Fprintf(os.Stderr, "restart-supervisor: %v\n", se)
			return se.Status()
		}
		// The loop reports the failure and the rules judge it; the
		// command may yet appear (a volume mounted later) before a retry.
		path = argv[0]
	}
	pod, initRerun, err := openPod(f, cfg, logger)
	if err != nil {
		return usageError("%v", err)
	}
	var final supervise.State
	// The termination message file: the flag's, or the kubelet's default
	// path in a pod (a state directory means the injector wrapped it).
	term := f.termPath
	if term == "" && f.stateDir != "" {
		term = contract.DefaultTerminationMessagePath
	}
	res := supervise.Run(supervise.Options{
		Path:           path,
		Argv:           argv,
		Env:            os.Environ(),
		Config:         cfg,
		Rules:          current,
		GracePeriod:    grace,
		StartErrorCode: startErrorCode,
		InitSignals:    f.initSignals,
		InitRerun:      initRerun,
		StopSignals:    stops,
		// The pod restart stops the workload as the runtime stops the
		// container.
		PodRestartSignal: runtimeStopSignal(stops),
		Log:              logger,
		ProbeCommand:     probeCommand(),
		Pod:              pod.Restarter(),
		Group:            pod.GroupRequester(),
		PodGeneration:    pod.PodGeneration(),
		Resume:           pod.Resume(),
		Limits:           pod.Limits(),
		MemoryEvents:     supervise.ContainerMemoryEvents(),
		ResourceFiles:    supervise.ContainerResourceFiles(),
		// In a pod (a state directory: the injector wrapped it) the
		// preStop hook tells the supervisor of the kubelet's stop.
		TerminatingSignal: terminatingSignal(f.stateDir),
		// The kubelet gives each container instance an empty
		// termination message file (kuberuntime_container.go
		// makeMounts, v1.37.2); each in-place run starts with one too,
		// so a message an earlier run wrote never becomes the final one.
		BeforeRestart: func() {
			if term != "" {
				if err := podstate.EmptyTerminationMessage(term); err != nil {
					logger.Warn("cannot empty the termination message for the next run", "err", err)
				}
			}
		},
		OnChange: func(st supervise.State) {
			if st.Phase == contract.PhaseStopping || st.Phase == contract.PhaseExited || st.Terminating {
				// No rule decides an exit from here on; an inotify
				// watch removed now does not hold up the exit.
				unwatchConfig()
			}
			if st.Restarts > 0 {
				tightenGC()
			}
			final = st
			pod.Observe(st)
		},
	})
	if res.StartErr != nil {
		fmt.Fprintf(os.Stderr, "restart-supervisor: %v\n", res.StartErr)
	}
	// Stopped before any run of its own ended, the container exits with
	// the exit its earlier supervisor handed over.
	status := pod.ExitStatus(final, res.Status)
	writeTerminationMessage(term, f.termPolicy, status, podstate.Summary(pod.Close(final)), logger)
	return status
}

// flagValues are the flags that take a value the supervisor checks before
// it starts anything.
type flagValues struct {
	grace          time.Duration
	startErrorCode int
	stops          []syscall.Signal
}

// values checks the flags that take a value; an error names the flag.
func (f cliFlags) values() (flagValues, error) {
	var v flagValues
	var err error
	if v.grace, err = gracePeriod(f.grace, os.Getpid() == 1); err != nil {
		return v, fmt.Errorf("--grace-period: %v", err)
	}
	if v.startErrorCode, err = startErrorCode(f.startError); err != nil {
		return v, fmt.Errorf("--start-error: %v", err)
	}
	if f.termPolicy != "File" && f.termPolicy != "FallbackToLogsOnError" {
		return v, fmt.Errorf("--termination-message-policy: %q is neither File nor FallbackToLogsOnError", f.termPolicy)
	}
	if v.stops, err = parseStopSignals(f.stopSignals); err != nil {
		return v, fmt.Errorf("--stop-signals: %v", err)
	}
	return v, nil
}

// writeTerminationMessage writes the supervisor's summary into the
// termination message file, which the kubelet shows in the container
// status: the one place where in-place restarts become visible without
// logs. Under FallbackToLogsOnError the kubelet shows the log's tail
// instead when the exit is not 0 and the file is empty
// (kuberuntime_container.go convertToKubeContainerStatus,
// getTerminationMessage, v1.37.2): the summary would fill the file and
// hide the log, so it is left out then.
func writeTerminationMessage(term, policy string, status int, summary string, logger *lineLogger) {
	if term == "" {
		return
	}
	fallback := policy == "FallbackToLogsOnError" && status != 0
	if err := podstate.WriteTerminationMessageUnlessEmpty(term, summary, fallback); err != nil {
		logger.Warn("cannot write the termination message", "err", err)
	}
}

// terminatingSignal is the signal restart-probe prestop sends, where there
// is a state directory for it to find the supervisor through; elsewhere
// none is caught, which spares a signal.Notify at start-up.
func terminatingSignal(stateDir string) syscall.Signal {
	if stateDir == "" {
		return 0
	}
	return contract.SignalTerminating
}

// parseSupervisorFlags reads the flags and, where a flag is not given, its
// RESTART_SUPERVISOR_* variable. help is true when --help printed the usage.
func parseSupervisorFlags(args []string) (f cliFlags, argv []string, help bool, err error) {
	fs := flag.NewFlagSet("restart-supervisor", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.config, "config", "", "restart configuration file, YAML or JSON (default: $"+contract.EnvConfig+")")
	fs.StringVar(&f.configWatch, "config-watch", envOr(contract.EnvConfigWatch, "poll"), "how a --config file's changes are noticed: \"poll\" (every second) or \"inotify\" (at once, but the kernel holds the supervisor's exit about 10 ms for it) ($"+contract.EnvConfigWatch+")")
	fs.StringVar(&f.grace, "grace-period", os.Getenv(contract.EnvGracePeriod), "after a stop signal, SIGKILL the workload's process group if it is still running after this long; 0: never, the container runtime does it (default: 0 as PID 1, else 30s) ($"+contract.EnvGracePeriod+")")
	fs.BoolVar(&f.initSignals, "init-signals", os.Getenv(contract.EnvInitSignals) == "true", "deliver signals to the workload as the kernel does to a container's PID 1: to its own process only, and only when it has a handler ($"+contract.EnvInitSignals+"=true)")
	fs.StringVar(&f.startError, "start-error", os.Getenv(contract.EnvStartError), "a command that cannot be executed: \"kubelet\" judges exit code 128 by the rules as the kubelet does, \"shell\" exits 127/126 at once (default: kubelet inside a Kubernetes pod, else shell) ($"+contract.EnvStartError+")")
	fs.StringVar(&f.logFormat, "log-format", envOr(contract.EnvLogFormat, "text"), "log format on stderr: text or json ($"+contract.EnvLogFormat+")")
	fs.StringVar(&f.stateDir, "state-dir", os.Getenv(contract.EnvStateDir), "directory for the status file shared by the pod's containers ($"+contract.EnvStateDir+")")
	fs.StringVar(&f.name, "name", os.Getenv(contract.EnvContainerName), "container name used in logs and the status file ($"+contract.EnvContainerName+")")
	fs.StringVar(&f.termPath, "termination-message-path", "", "file for the restart summary written on exit (default "+contract.DefaultTerminationMessagePath+" when --state-dir is set)")
	fs.StringVar(&f.termPolicy, "termination-message-policy", "File", "the container's terminationMessagePolicy: with FallbackToLogsOnError a failed exit whose last run wrote no message gets no summary either, so the kubelet shows the log's tail")
	fs.StringVar(&f.stopSignals, "stop-signals", envOr(contract.EnvStopSignals, "SIGTERM,SIGINT"), "comma-separated signals that stop the container instead of being only forwarded ($"+contract.EnvStopSignals+")")
	fs.Var(&f.kubeVersion, "kubernetes-version", "validate the config with the API-server messages and rules of this Kubernetes release, 1.34 to "+rules.NewestKube.String()+" ($"+contract.EnvKubeVersion+", default "+rules.NewestKube.String()+")")
	if v, ok := os.LookupEnv(contract.EnvKubeVersion); ok {
		if err := f.kubeVersion.Set(v); err != nil {
			return f, nil, false, fmt.Errorf("%s: %v", contract.EnvKubeVersion, err)
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Print(usage())
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			return f, nil, true, nil
		}
		return f, nil, false, fmt.Errorf("%v (see --help)", err)
	}
	return f, fs.Args(), false, nil
}

// watchConfig watches a --config file: an edit (or a ConfigMap update)
// decides every exit from the moment it is valid and in force. Without
// --config, current is nil and the other two do nothing.
func watchConfig(f cliFlags, logger *lineLogger) (current func() rules.Config, unwatch, closeFn func(), err error) {
	unwatch, closeFn = func() {}, func() {}
	if f.config == "" {
		return nil, unwatch, closeFn, nil
	}
	// Polling by default: a process that holds an inotify watch when it
	// exits is reaped about 9 ms later (the kernel waits for an SRCU grace
	// period to free the watch's marks, fsnotify_destroy_group), against
	// 0.2 ms without one (docs/benchmarks.md), and a ConfigMap volume
	// changes about once a minute at most; a stat and a read each second
	// cost less.
	var forcePoll bool
	switch f.configWatch {
	case "poll":
		forcePoll = true
	case "inotify":
	default:
		return nil, unwatch, closeFn, fmt.Errorf("--config-watch: %q is neither poll nor inotify", f.configWatch)
	}
	r, err := configreload.Watch(f.config, configreload.Options{
		ForcePoll: forcePoll,
		OnReload:  func(rules.Config) { logger.Info("configuration reloaded", "config", f.config) },
		OnError: func(err error) {
			logger.Warn("configuration change rejected; the rules in force stay", "config", f.config, "err", err)
		},
		KubeVersion: f.kubeVersion,
	})
	if err != nil {
		return nil, unwatch, closeFn, fmt.Errorf("invalid config (--config %s): %v", f.config, err)
	}
	return r.Get, sync.OnceFunc(r.Unwatch), func() { r.Close() }, nil
}

// workloadCommand is the workload's argv (the image's entrypoint for this
// platform first, when the injector gave one per platform), its path in
// PATH, and lookErr when it cannot be found, for the caller to report by
// its --start-error convention. A command found relative to the working
// directory (exec.ErrDot) is run, as the container runtime would.
func workloadCommand(argv []string) (path string, _ []string, lookErr, err error) {
	if pc, ok := os.LookupEnv(contract.EnvPlatformCommands); ok {
		cmd, err := platformCommand(pc, platformKeys())
		if err != nil {
			return "", nil, nil, fmt.Errorf("%s: %v", contract.EnvPlatformCommands, err)
		}
		argv = append(cmd, argv...)
	}
	if len(argv) == 0 {
		return "", nil, nil, errors.New("no command given: usage: restart-supervisor [flags] -- COMMAND [ARGS...]")
	}
	path, lookErr = exec.LookPath(argv[0])
	if errors.Is(lookErr, exec.ErrDot) {
		lookErr = nil
	}
	return path, argv, lookErr, nil
}

// openPod opens the container's place in the pod's state directory: its
// status document, and its part in pod restarts when
// RESTART_SUPERVISOR_POD_MEMBERS lists it. initRerun is true for the re-run
// of an init container, which only takes part in pod restarts.
func openPod(f cliFlags, cfg rules.Config, logger *lineLogger) (pod *podstate.Pod, initRerun bool, err error) {
	members, err := contract.ParsePodMembers(os.Getenv(contract.EnvPodMembers))
	if err != nil {
		return nil, false, fmt.Errorf("%s: %v", contract.EnvPodMembers, err)
	}
	for _, m := range members {
		initRerun = initRerun || (m.Name == f.name && m.Kind == contract.MemberInit)
	}
	if initRerun && (f.stateDir == "" || !cfg.InitContainer) {
		// The re-run of an init container does nothing but take part in
		// pod restarts, and judges its exits as an init container's.
		return nil, false, fmt.Errorf("%s: container %q is an init container re-run (kind %s), which needs the state directory and a config with initContainer: true",
			contract.EnvPodMembers, f.name, contract.MemberInit)
	}
	watch := podstate.PodRestartWatch(members, announcesPodRestarts(cfg))
	pod, err = podstate.OpenMember(f.stateDir, f.name, members, watch, logger)
	if err != nil {
		return nil, false, fmt.Errorf("--state-dir %s: %v", f.stateDir, err)
	}
	if initRerun && pod.Restarter() == nil {
		return nil, false, fmt.Errorf("--state-dir %s: container %q is an init container re-run, but pod restarts cannot be watched there", f.stateDir, f.name)
	}
	return pod, initRerun, nil
}

// announcesPodRestarts reports whether cfg, the rules the supervisor
// starts with, has a RestartAllContainers or RestartGroup rule (a group
// restart arrives as a pod restart). A --config file changed
// later to have one announces all the same; only its noticing of other
// containers' announcements stays at podstate.PodRestartWatch's choice.
func announcesPodRestarts(cfg rules.Config) bool {
	for _, r := range cfg.RestartPolicyRules {
		if r.Action == rules.ActionRestartAllContainers || r.Action == rules.ActionRestartGroup {
			return true
		}
	}
	return false
}

// probeCommand is restart-probe next to this executable, where `install`
// puts it; empty when it is not there, which fails a network check with a
// line in the log.
func probeCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(exe), contract.ProbeBinaryName)
	if fi, err := os.Stat(p); err != nil || fi.IsDir() {
		return ""
	}
	return p
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

// loadConfig reads --config or the inline environment variable. Both at
// once is an error: silently preferring one would drop the other's rules.
// It returns a description of the source for error messages.
func loadConfig(file string, v rules.KubeVersion) (rules.Config, string, error) {
	inline, hasInline := os.LookupEnv(contract.EnvConfig)
	switch {
	case file != "" && hasInline:
		return rules.Config{}, "", fmt.Errorf("both --config and %s are set; use one", contract.EnvConfig)
	case file != "":
		data, err := configreload.ReadFile(file)
		if err != nil {
			return rules.Config{}, "", fmt.Errorf("--config: %v", err)
		}
		cfg, err := rules.ParseFor(data, v)
		return cfg, "--config " + file, err
	case hasInline:
		cfg, err := rules.ParseFor([]byte(inline), v)
		return cfg, contract.EnvConfig, err
	}
	return rules.Config{}, "", nil
}

func newLogger(format string, w io.Writer, name string) (*lineLogger, error) {
	var l *lineLogger
	switch format {
	case "text":
		l = newLineLogger(w, false)
	case "json":
		l = newLineLogger(w, true)
	default:
		return nil, fmt.Errorf("--log-format: unsupported value %q: supported values: \"text\", \"json\"", format)
	}
	l = l.with("logger", "restart-supervisor")
	if name != "" {
		l = l.with("container", name)
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
		sig, ok := contract.ParseSignal(name)
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

// runtimeStopSignal is the signal the container runtime stops the container
// with, as far as the stop signals tell: the injector lists SIGTERM and
// SIGINT and adds the container's own stop signal (lifecycle.stopSignal or
// the image's STOPSIGNAL) after them. So it is the last one that is not
// SIGINT, which is there for a terminal's Ctrl-C, else the first.
func runtimeStopSignal(stops []syscall.Signal) syscall.Signal {
	for i := len(stops) - 1; i >= 0; i-- {
		if stops[i] != syscall.SIGINT {
			return stops[i]
		}
	}
	return stops[0]
}

// gracePeriod resolves --grace-period. As PID 1 of the container the
// default is no timer at all: the runtime SIGKILLs the whole PID namespace
// at the end of the grace period it was given, which may be the pod's
// terminationGracePeriodSeconds, a deletion's shorter one or a probe's own,
// none of which the supervisor can know; racing it could only cut the
// workload short. Under a shared PID namespace the supervisor is not PID
// 1, its workload would outlive it, and the injector passes the pod's
// terminationGracePeriodSeconds, so that both kills fall together.
func gracePeriod(v string, pid1 bool) (time.Duration, error) {
	if v == "" {
		if pid1 {
			return 0, nil
		}
		return defaultGracePeriod, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want a Go duration such as \"30s\"", v)
	}
	if d < 0 {
		return 0, fmt.Errorf("must not be negative, got %s", d)
	}
	return d, nil
}

// startErrorCode resolves --start-error into supervise.Options'
// StartErrorCode. Unset, it follows where the supervisor runs: the kubelet
// sets KUBERNETES_SERVICE_HOST in every container it starts (whatever
// enableServiceLinks says), and Docker sets nothing of the kind.
func startErrorCode(mode string) (int, error) {
	if mode == "" {
		mode = "shell"
		if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
			mode = "kubelet"
		}
	}
	switch mode {
	case "kubelet":
		return containerdStartErrorCode, nil
	case "shell":
		return 0, nil
	}
	return 0, fmt.Errorf("unsupported value %q: supported values: \"kubelet\", \"shell\"", mode)
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
