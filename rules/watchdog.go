package rules

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Watchdog ends a run that stopped making progress: a rank that hangs in a
// collective, a stuck data loader, a device that stopped answering, none
// of which exits. Progress is shown by a heartbeat: a change of
// HeartbeatFile (its size, its modification time or the file itself), or
// a line of the workload's output that matches OutputPattern, or either
// when both are set. No heartbeat within FirstHeartbeatSeconds of a start,
// or within StallSeconds of the last one, and the run is stopped as a
// stop is (the stop signal, GracePeriodSeconds, then the whole process
// tree); its exit is then judged as exit code ExitCode with reason
// ReasonStalled, so that any rule (Restart, RestartAllContainers,
// RestartGroup) can match it. The Kubernetes API has no such field; it is
// this project's, as RestartGroup is (docs/supervisor.md, "Hangs").
type Watchdog struct {
	// HeartbeatFile is an absolute path the workload writes or touches.
	// Only its metadata is read (lstat), never its content; a symbolic
	// link or a special file is no heartbeat.
	HeartbeatFile string `json:"heartbeatFile,omitempty" yaml:"heartbeatFile,omitempty"`
	// OutputPattern is a regular expression (RE2, matched in time linear
	// in the line) on each line the workload writes to its standard output
	// or error, such as "step [0-9]+". With it the supervisor reads the
	// workload's output through a pipe and writes it on unchanged; without
	// it the output is not touched. A terminal stays the workload's: under
	// a TTY the pattern is not watched (the log says so).
	OutputPattern string `json:"outputPattern,omitempty" yaml:"outputPattern,omitempty"`
	// FirstHeartbeatSeconds bounds the time from a start to the first
	// heartbeat (loading a model and the data); 0 takes StallSeconds.
	FirstHeartbeatSeconds int32 `json:"firstHeartbeatSeconds,omitempty" yaml:"firstHeartbeatSeconds,omitempty"`
	// StallSeconds bounds the time between two heartbeats. Required.
	StallSeconds int32 `json:"stallSeconds" yaml:"stallSeconds"`
	// ExitCode is the exit code a stalled run is judged with; nil takes
	// DefaultStallExitCode.
	ExitCode *int32 `json:"exitCode,omitempty" yaml:"exitCode,omitempty"`
	// GracePeriodSeconds is how long the stop signal has before SIGKILL;
	// nil takes the pod's default, 30 s, as a probe kill does.
	GracePeriodSeconds *int32 `json:"gracePeriodSeconds,omitempty" yaml:"gracePeriodSeconds,omitempty"`
}

// ReasonStalled is the reason of an exit the watchdog caused, in the status
// document, the log, the node agent's Events and the metrics.
const ReasonStalled = "Stalled"

// DefaultStallExitCode is the exit code of a stalled run unless the
// watchdog says otherwise: timeout(1)'s for a command that timed out.
const DefaultStallExitCode int32 = 124

// Bounds of the watchdog.
const (
	// MaxOutputPattern bounds OutputPattern's length; RE2 keeps matching
	// linear in the line whatever the pattern.
	MaxOutputPattern = 1024
	// MaxStallSeconds is a week: longer is no watchdog.
	MaxStallSeconds = 7 * 24 * 3600
	// MaxWatchdogGrace bounds GracePeriodSeconds as the pod's
	// terminationGracePeriodSeconds is not, to an hour.
	MaxWatchdogGrace = 3600
)

// FirstHeartbeat is how long a run may go without its first heartbeat.
func (w *Watchdog) FirstHeartbeat() time.Duration {
	if w.FirstHeartbeatSeconds > 0 {
		return time.Duration(w.FirstHeartbeatSeconds) * time.Second
	}
	return w.Stall()
}

// Stall is how long a run may go between two heartbeats.
func (w *Watchdog) Stall() time.Duration { return time.Duration(w.StallSeconds) * time.Second }

// Code is the exit code a stalled run is judged with.
func (w *Watchdog) Code() int32 {
	if w.ExitCode != nil {
		return *w.ExitCode
	}
	return DefaultStallExitCode
}

// Pattern compiles OutputPattern; nil when there is none. Validate has
// already refused one that does not compile.
func (w *Watchdog) Pattern() *regexp.Regexp {
	if w == nil || w.OutputPattern == "" {
		return nil
	}
	re, err := regexp.Compile(w.OutputPattern)
	if err != nil {
		return nil
	}
	return re
}

func init() {
	configSchema[""]["watchdog"] = kindMap
	configSchema["watchdog"] = map[string]valueKind{"heartbeatFile": kindString, "outputPattern": kindString,
		"firstHeartbeatSeconds": kindInt32, "stallSeconds": kindInt32, "exitCode": kindInt32, "gracePeriodSeconds": kindInt32}
}

func (w *Watchdog) validate() ErrorList {
	if w == nil {
		return nil
	}
	var errs ErrorList
	switch f := w.HeartbeatFile; {
	case f == "" && w.OutputPattern == "":
		errs = append(errs, required("watchdog.heartbeatFile", "a heartbeat file, an outputPattern, or both"))
	case len(f) > MaxProgressPath:
		errs = append(errs, &FieldError{"watchdog.heartbeatFile", fmt.Sprintf("Too long: may not be more than %d bytes", MaxProgressPath)})
	case f != "" && (!strings.HasPrefix(f, "/") || strings.ContainsRune(f, 0)):
		errs = append(errs, &FieldError{"watchdog.heartbeatFile", fmt.Sprintf("Invalid value: %q: must be an absolute path", clip(f))})
	}
	if p := w.OutputPattern; len(p) > MaxOutputPattern {
		errs = append(errs, &FieldError{"watchdog.outputPattern", fmt.Sprintf("Too long: may not be more than %d bytes", MaxOutputPattern)})
	} else if p != "" {
		if _, err := regexp.Compile(p); err != nil {
			errs = append(errs, &FieldError{"watchdog.outputPattern", fmt.Sprintf("Invalid value: %q: %v", clip(p), err)})
		}
	}
	if w.StallSeconds < 1 || w.StallSeconds > MaxStallSeconds {
		errs = append(errs, &FieldError{"watchdog.stallSeconds", fmt.Sprintf("Invalid value: %d: must be between 1 and %d", w.StallSeconds, MaxStallSeconds)})
	}
	if w.FirstHeartbeatSeconds < 0 || w.FirstHeartbeatSeconds > MaxStallSeconds {
		errs = append(errs, &FieldError{"watchdog.firstHeartbeatSeconds", fmt.Sprintf("Invalid value: %d: must be between 1 and %d (0: stallSeconds)", w.FirstHeartbeatSeconds, MaxStallSeconds)})
	}
	if c := w.ExitCode; c != nil && (*c < 1 || *c > 255) {
		errs = append(errs, &FieldError{"watchdog.exitCode", fmt.Sprintf("Invalid value: %d: must be between 1 and 255", *c)})
	}
	if g := w.GracePeriodSeconds; g != nil && (*g < 0 || *g > MaxWatchdogGrace) {
		errs = append(errs, &FieldError{"watchdog.gracePeriodSeconds", fmt.Sprintf("Invalid value: %d: must be between 0 and %d", *g, MaxWatchdogGrace)})
	}
	return errs
}
