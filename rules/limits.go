package rules

import (
	"fmt"
	"strings"
	"time"
)

// Limits are what the supervisor adds to the rules: when an exit that the
// rules would restart in place is handed to the kubelet instead, so that
// the container's restartCount moves and the pod's policy decides. The
// kubelet has no such fields: a native container restarts as its rules say,
// and every restart is in its restartCount, which the controllers above the
// pod (Job, JobSet, KubeRay, LeaderWorkerSet) count. Under the supervisor an
// in-place restart is invisible to them; a limit hands the container back.
//
// The watchdog lives here too, beside the progress file it often shares: it
// is the other thing the supervisor adds per container beyond the API's
// fields.
//
// None is set by default, which is upstream's behaviour: restart as the rules
// say, for ever, with the back-off.
type Limits struct {
	// RestartBudget bounds the in-place restarts of the container.
	RestartBudget *RestartBudget `json:"restartBudget,omitempty" yaml:"restartBudget,omitempty"`
	// HandOverExitCodes are handed to the kubelet at once, whatever the
	// rules say (NVIDIA's resiliency extension uses 93 for "do not
	// requeue").
	HandOverExitCodes []int32 `json:"handOverExitCodes,omitempty" yaml:"handOverExitCodes,omitempty"`
	// PreRestartCheck runs before each in-place restart; when it fails,
	// the exit is handed over instead.
	PreRestartCheck *PreRestartCheck `json:"preRestartCheck,omitempty" yaml:"preRestartCheck,omitempty"`
	// Progress hands the exit over once the workload has been restarted
	// in place a number of times without its progress file changing.
	Progress *Progress `json:"progress,omitempty" yaml:"progress,omitempty"`
	// Watchdog ends a run that stops making progress without exiting
	// (watchdog.go); its exit is then judged like any other, and the
	// limits above apply to it.
	Watchdog *Watchdog `json:"watchdog,omitempty" yaml:"watchdog,omitempty"`
	// Escalation climbs the action of the exits a rule restarts in place
	// as the container's own restarts add up (escalation.go).
	Escalation *Escalation `json:"escalation,omitempty" yaml:"escalation,omitempty"`
}

// RestartBudget is at most MaxRestarts in-place restarts of the container,
// counted across its supervisors (a hand-over and the kubelet's restart do
// not reset it, as nothing resets a native restartCount); with a Window,
// only those of the last Window count.
type RestartBudget struct {
	// MaxRestarts is required; 0 hands every exit over.
	MaxRestarts *int32    `json:"maxRestarts" yaml:"maxRestarts"`
	Window      *Duration `json:"window,omitempty" yaml:"window,omitempty"`
}

// Max is the number of in-place restarts the budget allows.
func (b *RestartBudget) Max() int {
	if b == nil || b.MaxRestarts == nil {
		return 0
	}
	return int(*b.MaxRestarts)
}

// MaxWindowedRestarts bounds MaxRestarts of a budget with a window, whose
// restart times the status document carries.
const MaxWindowedRestarts = 100

// WindowDuration is the budget's window; 0 means the pod's whole life.
func (b *RestartBudget) WindowDuration() time.Duration {
	if b == nil || b.Window == nil {
		return 0
	}
	return time.Duration(*b.Window)
}

// PreRestartCheck is a command run before each in-place restart, in the
// workload's environment and its own process group. Exit 0 lets the
// restart go ahead; any other exit, a timeout or a command that cannot be
// started hands the exit over instead.
type PreRestartCheck struct {
	Command        []string `json:"command" yaml:"command"`
	TimeoutSeconds int32    `json:"timeoutSeconds,omitempty" yaml:"timeoutSeconds,omitempty"`
}

// Bounds of the pre-restart check.
const (
	DefaultPreRestartTimeout = 30 * time.Second
	MaxPreRestartTimeout     = 3600
)

// Timeout is how long the check may run before its process group is
// killed.
func (c *PreRestartCheck) Timeout() time.Duration {
	if c == nil || c.TimeoutSeconds == 0 {
		return DefaultPreRestartTimeout
	}
	return time.Duration(c.TimeoutSeconds) * time.Second
}

// Progress is a file the workload writes as it makes progress (a
// checkpoint's iteration, say). Once MaxStalledRestarts in-place restarts
// in a row found its content unchanged, the next exit is handed over.
type Progress struct {
	File               string `json:"file" yaml:"file"`
	MaxStalledRestarts int32  `json:"maxStalledRestarts" yaml:"maxStalledRestarts"`
}

// MaxProgressPath bounds Progress.File (PATH_MAX).
const MaxProgressPath = 4096

// HandsOver reports whether exit code is one of HandOverExitCodes.
func (l Limits) HandsOver(code int32) bool {
	for _, c := range l.HandOverExitCodes {
		if c == code {
			return true
		}
	}
	return false
}

func init() {
	root := configSchema[""]
	root["restartBudget"], root["handOverExitCodes"], root["preRestartCheck"], root["progress"] = kindMap, kindInt32List, kindMap, kindMap
	configSchema["restartBudget"] = map[string]valueKind{"maxRestarts": kindInt32, "window": kindDuration}
	configSchema["preRestartCheck"] = map[string]valueKind{"command": kindStringList, "timeoutSeconds": kindInt32}
	configSchema["progress"] = map[string]valueKind{"file": kindString, "maxStalledRestarts": kindInt32}
}

// Validate checks the limits; each error names its field, under path (""
// at the top of the config document).
func (l Limits) Validate(path string) ErrorList {
	errs := l.validate()
	if path != "" {
		for _, e := range errs {
			e.Field = path + "." + e.Field
		}
	}
	return errs
}

func (l Limits) validate() ErrorList {
	var errs ErrorList
	if b := l.RestartBudget; b != nil {
		switch {
		case b.MaxRestarts == nil:
			errs = append(errs, required("restartBudget.maxRestarts", "the number of in-place restarts allowed"))
		case *b.MaxRestarts < 0:
			errs = append(errs, &FieldError{"restartBudget.maxRestarts", fmt.Sprintf("Invalid value: %d: must be greater than or equal to 0", *b.MaxRestarts)})
		}
		if b.Window != nil && b.MaxRestarts != nil && *b.MaxRestarts > MaxWindowedRestarts {
			errs = append(errs, &FieldError{"restartBudget.maxRestarts", fmt.Sprintf("Invalid value: %d: must be at most %d with a window", *b.MaxRestarts, MaxWindowedRestarts)})
		}
		if b.Window != nil && *b.Window <= 0 {
			errs = append(errs, &FieldError{"restartBudget.window", fmt.Sprintf("Invalid value: %q: must be greater than 0", b.Window.String())})
		}
	}
	if len(l.HandOverExitCodes) > MaxValuesPerRule {
		errs = append(errs, &FieldError{"handOverExitCodes", fmt.Sprintf("Too many: %d: must have at most %d items", len(l.HandOverExitCodes), MaxValuesPerRule)})
	}
	if c := l.PreRestartCheck; c != nil {
		switch {
		case len(c.Command) == 0 || c.Command[0] == "":
			errs = append(errs, required("preRestartCheck.command", "the command to run"))
		case len(c.Command) > MaxProbeCommandArgs:
			errs = append(errs, &FieldError{"preRestartCheck.command", fmt.Sprintf("Too many: %d: must have at most %d items", len(c.Command), MaxProbeCommandArgs)})
		}
		for i, a := range c.Command {
			if strings.ContainsRune(a, 0) {
				errs = append(errs, &FieldError{fmt.Sprintf("preRestartCheck.command[%d]", i), "Invalid value: must not contain a NUL byte"})
				break
			}
		}
		if c.TimeoutSeconds < 0 || c.TimeoutSeconds > MaxPreRestartTimeout {
			errs = append(errs, &FieldError{"preRestartCheck.timeoutSeconds", fmt.Sprintf("Invalid value: %d: must be between 1 and %d (0: %s)", c.TimeoutSeconds, MaxPreRestartTimeout, DefaultPreRestartTimeout)})
		}
	}
	if p := l.Progress; p != nil {
		switch {
		case p.File == "":
			errs = append(errs, required("progress.file", "an absolute path"))
		case len(p.File) > MaxProgressPath:
			errs = append(errs, &FieldError{"progress.file", fmt.Sprintf("Too long: may not be more than %d bytes", MaxProgressPath)})
		case !strings.HasPrefix(p.File, "/") || strings.ContainsRune(p.File, 0):
			errs = append(errs, &FieldError{"progress.file", fmt.Sprintf("Invalid value: %q: must be an absolute path", clip(p.File))})
		}
		if p.MaxStalledRestarts < 1 {
			errs = append(errs, &FieldError{"progress.maxStalledRestarts", fmt.Sprintf("Invalid value: %d: must be greater than or equal to 1", p.MaxStalledRestarts)})
		}
	}
	errs = append(errs, l.Watchdog.validate()...)
	return append(errs, l.Escalation.validate()...)
}
