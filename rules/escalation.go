package rules

import (
	"fmt"
	"time"
)

// Escalation is a ladder of actions for the exits a rule restarts in place:
// the container's own in-place restarts (those its own exits caused, in the
// last Window, or in the pod's life without one) choose the step. The
// first Steps[0].Restarts of them take Steps[0].Action, the next
// Steps[1].Restarts take Steps[1].Action, and so on; past the last step
// the exit is handed to the kubelet, whose pod restartPolicy decides, as a
// limit's hand-over is (reason EscalationExhausted). A restart in a round
// another member started is not the container's own and climbs nothing.
// HyperPod's numRestartBeforeFullJobRestart is the two-step ladder
// Restart then RestartGroup. The API has no such field; it is this
// project's, in the rules annotation and the config (docs/supervisor.md,
// "Escalation").
type Escalation struct {
	Window *Duration        `json:"window,omitempty" yaml:"window,omitempty"`
	Steps  []EscalationStep `json:"steps" yaml:"steps"`
}

// EscalationStep is Restarts in-place restarts with Action.
type EscalationStep struct {
	Action   Action `json:"action" yaml:"action"`
	Restarts int32  `json:"restarts" yaml:"restarts"`
}

// MaxEscalationSteps bounds a ladder.
const MaxEscalationSteps = 10

// WindowDuration is the ladder's window; 0 means the pod's whole life.
func (e *Escalation) WindowDuration() time.Duration {
	if e == nil || e.Window == nil {
		return 0
	}
	return time.Duration(*e.Window)
}

// Step returns the step the next own restart takes after used of them, its
// index, and false past the last step.
func (e *Escalation) Step(used int) (EscalationStep, int, bool) {
	for i, s := range e.Steps {
		if used < int(s.Restarts) {
			return s, i, true
		}
		used -= int(s.Restarts)
	}
	return EscalationStep{}, len(e.Steps), false
}

// Total is how many own restarts the ladder allows.
func (e *Escalation) Total() int {
	n := 0
	for _, s := range e.Steps {
		n += int(s.Restarts)
	}
	return n
}

// PodWide reports whether a step restarts more than the container: the
// pod (RestartAllContainers) or its group (RestartGroup).
func (e *Escalation) PodWide() (all, group bool) {
	if e == nil {
		return false, false
	}
	for _, s := range e.Steps {
		all = all || s.Action == ActionRestartAllContainers || s.Action == ActionRestartGroup
		group = group || s.Action == ActionRestartGroup
	}
	return all, group
}

func init() {
	configSchema[""]["escalation"] = kindMap
	configSchema["escalation"] = map[string]valueKind{"window": kindDuration, "steps": kindList}
	configSchema["escalation.steps[]"] = map[string]valueKind{"action": kindString, "restarts": kindInt32}
}

func (e *Escalation) validate() ErrorList {
	if e == nil {
		return nil
	}
	var errs ErrorList
	switch {
	case len(e.Steps) == 0:
		errs = append(errs, required("escalation.steps", "at least one step"))
	case len(e.Steps) > MaxEscalationSteps:
		errs = append(errs, &FieldError{"escalation.steps", fmt.Sprintf("Too many: %d: must have at most %d items", len(e.Steps), MaxEscalationSteps)})
	}
	for i, s := range e.Steps {
		field := fmt.Sprintf("escalation.steps[%d]", i)
		switch s.Action {
		case ActionRestart, ActionRestartAllContainers, ActionRestartGroup:
		case "":
			errs = append(errs, required(field+".action", "Restart, RestartAllContainers or RestartGroup"))
		default:
			errs = append(errs, &FieldError{field + ".action", fmt.Sprintf("Unsupported value: %q: supported values: %q, %q, %q",
				clip(string(s.Action)), ActionRestart, ActionRestartAllContainers, ActionRestartGroup)})
		}
		if s.Restarts < 1 {
			errs = append(errs, &FieldError{field + ".restarts", fmt.Sprintf("Invalid value: %d: must be greater than or equal to 1", s.Restarts)})
		}
	}
	if e.Window != nil {
		if *e.Window <= 0 {
			errs = append(errs, &FieldError{"escalation.window", fmt.Sprintf("Invalid value: %q: must be greater than 0", e.Window.String())})
		}
		// The times of the own restarts a window counts are kept, at
		// most MaxWindowedRestarts of them.
		if n := e.Total(); n > MaxWindowedRestarts {
			errs = append(errs, &FieldError{"escalation.steps", fmt.Sprintf("Invalid value: %d restarts in all: must be at most %d with a window", n, MaxWindowedRestarts)})
		}
	}
	return errs
}
