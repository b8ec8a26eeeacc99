// Command depsfloor is the floor of restart-supervisor built from what the
// supervisor cannot do without: the libraries the design names for it
// (gopkg.in/yaml.v3 for the config, encoding/json for the state volume's
// documents, fsnotify and golang.org/x/sys), the signals it must catch
// before its first fork, and the kernel steps of a PID 1 (child subreaper,
// the workload in its own process group, wait4 until no child is left).
// None of the supervisor's own code is linked.
//
// bench/supervisor.sh measures it beside go-floor (the Go runtime alone)
// and the supervisor, for size, start and exit, and resident memory: what
// the supervisor costs above depsfloor is its own code; what depsfloor
// costs above go-floor is the libraries' and the signal handlers'.
//
//	depsfloor [-config-watch poll|inotify] -- COMMAND [ARG...]
//
// With RESTART_SUPERVISOR_CONFIG set it decodes that YAML as the supervisor
// does, and with RESTART_SUPERVISOR_STATE_DIR set as well it writes one JSON
// status document there before the fork and one after the exit, as the
// injected form does.
package main

import (
	"encoding/json"
	"flag"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
	"gopkg.in/yaml.v3"
)

// handledSignals is supervise.HandledSignals() plus the default stop
// signals (SIGTERM and SIGINT are in it already), copied so that no
// supervisor package is linked; the test keeps the two equal.
var handledSignals = []os.Signal{
	unix.SIGCHLD,
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2,
	unix.SIGALRM, unix.SIGTERM, unix.SIGSTKFLT, unix.SIGCONT, unix.SIGTSTP,
	unix.SIGVTALRM, unix.SIGWINCH, unix.SIGIO, unix.SIGPWR,
	unix.SIGTTIN, unix.SIGTTOU, unix.SIGPIPE,
}

// config is the shape of the supervisor's config document, enough for
// yaml.v3 to do the same reflective decoding.
type config struct {
	RestartPolicy    string `yaml:"restartPolicy" json:"restartPolicy"`
	PodRestartPolicy string `yaml:"podRestartPolicy" json:"podRestartPolicy"`
	Rules            []struct {
		Action    string `yaml:"action" json:"action"`
		ExitCodes struct {
			Operator string  `yaml:"operator" json:"operator"`
			Values   []int32 `yaml:"values" json:"values"`
		} `yaml:"exitCodes" json:"exitCodes"`
	} `yaml:"restartPolicyRules" json:"restartPolicyRules"`
}

type status struct {
	Container string  `json:"container"`
	State     string  `json:"state"`
	ExitCode  *int    `json:"exitCode,omitempty"`
	Config    *config `json:"config,omitempty"`
}

func main() {
	watch := flag.String("config-watch", "poll", "poll or inotify")
	flag.Parse()
	argv := flag.Args()
	if len(argv) == 0 {
		os.Exit(2)
	}
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, handledSignals...)
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

	var cfg *config
	if doc := os.Getenv("RESTART_SUPERVISOR_CONFIG"); doc != "" {
		cfg = new(config)
		if err := yaml.Unmarshal([]byte(doc), cfg); err != nil {
			os.Exit(2)
		}
	}
	if *watch == "inotify" { // never in the benchmark: links fsnotify as the supervisor does
		w, err := fsnotify.NewWatcher()
		if err == nil {
			defer w.Close()
		}
	}
	dir := os.Getenv("RESTART_SUPERVISOR_STATE_DIR")
	writeStatus(dir, status{Container: "c", State: "running", Config: cfg})

	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		os.Exit(127)
	}
	code := -1
	for code < 0 {
		sig := <-sigs
		if sig != unix.SIGCHLD {
			_ = unix.Kill(-pid, sig.(syscall.Signal))
			continue
		}
		for {
			var ws unix.WaitStatus
			p, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err != nil || p <= 0 {
				break
			}
			if p == pid {
				code = ws.ExitStatus()
				if ws.Signaled() {
					code = 128 + int(ws.Signal())
				}
			}
		}
	}
	writeStatus(dir, status{Container: "c", State: "exited", ExitCode: &code, Config: cfg})
	os.Exit(code)
}

// writeStatus writes the document the way the state volume wants it: a
// temporary file renamed into place.
func writeStatus(dir string, s status) {
	if dir == "" {
		return
	}
	data, err := json.Marshal(s)
	if err != nil {
		return
	}
	tmp := filepath.Join(dir, ".c.json.tmp")
	if os.WriteFile(tmp, data, 0o644) == nil {
		_ = os.Rename(tmp, filepath.Join(dir, "c.json"))
	}
}
