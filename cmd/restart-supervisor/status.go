package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/supervise"
)

// containerStatus is the status file each supervisor keeps in the pod's
// state directory, one file per container, named <container>.json.
type containerStatus struct {
	Name          string    `json:"name"`
	Phase         string    `json:"phase"`
	PID           int       `json:"pid,omitempty"`
	Restarts      int       `json:"restarts"`
	LastExitCode  *int      `json:"lastExitCode,omitempty"`
	LastSignal    string    `json:"lastSignal,omitempty"`
	StartedAt     time.Time `json:"startedAt,omitzero"`
	FinishedAt    time.Time `json:"finishedAt,omitzero"`
	ExitStatus    *int      `json:"exitStatus,omitempty"`
	SupervisorPID int       `json:"supervisorPID"`
}

type statusWriter struct {
	dir, name string
	log       *slog.Logger
	failed    bool
}

func newStatusWriter(dir, name string, log *slog.Logger) *statusWriter {
	if dir == "" {
		return nil
	}
	if name == "" {
		name = "workload"
	}
	return &statusWriter{dir: dir, name: name, log: log}
}

// write replaces the status file atomically. It is called on every state
// change; a failure is logged once and never stops supervision.
func (w *statusWriter) write(st supervise.State) {
	if w == nil {
		return
	}
	cs := containerStatus{Name: w.name, Phase: string(st.Phase), PID: st.PID, Restarts: st.Restarts,
		StartedAt: st.StartedAt, FinishedAt: st.FinishedAt, SupervisorPID: os.Getpid()}
	if st.LastExit != nil {
		code := st.LastExit.Code
		cs.LastExitCode = &code
		if st.LastExit.Signal != 0 {
			cs.LastSignal = unix.SignalName(st.LastExit.Signal)
		}
	}
	if st.Phase == supervise.Exited {
		s := st.Status
		cs.ExitStatus = &s
	}
	data, _ := json.Marshal(cs)
	if err := writeAtomic(filepath.Join(w.dir, w.name+".json"), append(data, '\n')); err != nil && !w.failed {
		w.failed = true
		w.log.Warn("cannot write the status file", "dir", w.dir, "err", err)
	}
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// statusCmd prints the status files of every supervised container in the
// state directory.
func statusCmd(args []string) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print JSON")
	dir := fs.String("state-dir", os.Getenv(envStateDir), "state directory")
	if err := fs.Parse(args); err != nil {
		return usageError("status: %v", err)
	}
	if *dir == "" {
		return usageError("status: no state directory: set --state-dir or %s", envStateDir)
	}
	files, err := filepath.Glob(filepath.Join(*dir, "*.json"))
	if err != nil {
		return usageError("status: %v", err)
	}
	sort.Strings(files)
	all := []containerStatus{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var cs containerStatus
		if json.Unmarshal(data, &cs) == nil {
			all = append(all, cs)
		}
	}
	if *asJSON {
		out, _ := json.MarshalIndent(all, "", "  ")
		fmt.Println(string(out))
		return 0
	}
	fmt.Printf("%-24s %-11s %8s %9s\n", "CONTAINER", "PHASE", "RESTARTS", "LAST-EXIT")
	for _, cs := range all {
		last := "-"
		if cs.LastExitCode != nil {
			last = fmt.Sprint(*cs.LastExitCode)
			if cs.LastSignal != "" {
				last += " (" + cs.LastSignal + ")"
			}
		}
		fmt.Printf("%-24s %-11s %8d %9s\n", cs.Name, cs.Phase, cs.Restarts, last)
	}
	return 0
}

// writeTerminationMessage records the in-place restarts in the container's
// termination message, which the kubelet shows in the container status,
// because the kubelet's restartCount does not see them. It writes only to
// an existing, empty file: the kubelet creates it, and a message the
// workload wrote itself is worth more than ours.
func writeTerminationMessage(path string, res supervise.Result) {
	if path == "" || res.Restarts == 0 {
		return
	}
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	defer f.Close()
	msg := fmt.Sprintf("restart-supervisor: exit status %d after %d in-place restart(s)\n", res.Status, res.Restarts)
	f.WriteString(msg) // best effort: nothing is left to report a failure to
}
