package rules

// Source says which level of the API made a restart decision.
type Source string

const (
	SourceRule            Source = "rule"
	SourceContainerPolicy Source = "containerPolicy"
	SourcePodPolicy       Source = "podPolicy"
	// SourceInitialized: an init container exited 0, which initializes it
	// whatever its rules say.
	SourceInitialized Source = "initialized"
)

// Decision is the kubelet's verdict on one container exit.
type Decision struct {
	Restart bool
	// Rule is the index of the first matching rule, or -1 when none matched
	// or rules were not consulted.
	Rule int
	// Action is the matching rule's action; empty when no rule matched.
	Action Action
	Source Source
}

// Decide returns what the kubelet does when a container with the restart
// fields c, in a pod whose restartPolicy is pod, exits with exitCode. It
// follows ContainerShouldRestart in kubernetes pkg/api/v1/pod/util.go: rules
// are consulted only when the container sets restartPolicy, the first match
// wins, and an unmatched exit falls back to the container policy, then (when
// the container has none) to the pod policy. A pod policy that is empty or
// unknown means Always, as in the kubelet.
func Decide(c Container, pod RestartPolicy, exitCode int32) Decision {
	if c.RestartPolicy != nil {
		if i, ok := MatchingRule(c.RestartPolicyRules, exitCode); ok {
			switch a := c.RestartPolicyRules[i].Action; a {
			case ActionRestart, ActionRestartAllContainers, ActionRestartGroup:
				return Decision{Restart: true, Rule: i, Action: a, Source: SourceRule}
			}
			// An action this version does not know falls back to the
			// container policy, as the kubelet's switch does.
		}
		return Decision{Restart: policyRestarts(*c.RestartPolicy, exitCode), Rule: -1, Source: SourceContainerPolicy}
	}
	return Decision{Restart: policyRestarts(pod, exitCode), Rule: -1, Source: SourcePodPolicy}
}

// MatchingRule returns the index of the first rule whose exit-code condition
// matches exitCode. Rules without exitCodes or with an unknown operator never
// match.
func MatchingRule(rules []Rule, exitCode int32) (int, bool) {
	for i, r := range rules {
		if r.ExitCodes == nil {
			continue
		}
		in := contains(r.ExitCodes.Values, exitCode)
		switch r.ExitCodes.Operator {
		case OpIn:
			if in {
				return i, true
			}
		case OpNotIn:
			if !in {
				return i, true
			}
		}
	}
	return -1, false
}

func contains(values []int32, v int32) bool {
	for _, x := range values {
		if x == v {
			return true
		}
	}
	return false
}

// policyRestarts applies a restart policy to an exit code. Anything but
// OnFailure and Never restarts, matching the kubelet's default branch.
func policyRestarts(p RestartPolicy, exitCode int32) bool {
	switch p {
	case OnFailure:
		return exitCode != 0
	case Never:
		return false
	default:
		return true
	}
}

// PolicyRestarts reports whether restart policy p alone restarts a container
// that exited with exitCode.
func PolicyRestarts(p RestartPolicy, exitCode int32) bool { return policyRestarts(p, exitCode) }

// Handling says who carries out a Decision when the supervisor runs the
// container on a kubelet that does not know the restart fields.
type Handling int

const (
	// HandOver: the supervisor exits with the workload's status and the
	// kubelet, applying the pod policy, does exactly what Decide said.
	HandOver Handling = iota
	// RestartInPlace: the kubelet would not restart (or the restart comes
	// from a rule), so the supervisor restarts the workload itself.
	RestartInPlace
	// Hold: the container must not restart but the kubelet would restart it
	// if the supervisor exited (container Never or OnFailure under pod
	// Always). The supervisor keeps the container alive with no workload.
	Hold
)

func (h Handling) String() string {
	switch h {
	case RestartInPlace:
		return "restartInPlace"
	case Hold:
		return "hold"
	}
	return "handOver"
}

// Plan decides an exit and says who acts on it. A restart happens in place
// when a rule matched, or when the container policy asks for a restart that
// the pod policy would not give; every other restart and every final exit
// is left to the kubelet so that its restartCount and CrashLoopBackOff stay
// as they would be without the supervisor.
func Plan(c Container, pod RestartPolicy, exitCode int32) (Decision, Handling) {
	d := Decide(c, pod, exitCode)
	kubeletRestarts := policyRestarts(pod, exitCode)
	switch {
	case d.Restart && (d.Source == SourceRule || !kubeletRestarts):
		return d, RestartInPlace
	case !d.Restart && kubeletRestarts:
		return d, Hold
	}
	return d, HandOver
}

// PlanInit is Plan for an init container that is not a sidecar. The
// kubelet consults the restart decision for such a container only when it
// failed (computeInitContainerActions and isInitContainerFailed in
// pkg/kubelet/kuberuntime, v1.34.4 to v1.36.3): exit 0 initializes it and
// the next init container starts, whatever its rules match. The one
// exception is a first matching rule for 0 whose action is
// RestartAllContainers: ShouldAllContainersRestart
// (pkg/kubelet/container/helpers.go, v1.35.4 and v1.36.3) looks at every
// exited container, init containers and exit 0 included.
func PlanInit(c Container, pod RestartPolicy, exitCode int32) (Decision, Handling) {
	if exitCode != 0 {
		return Plan(c, pod, exitCode)
	}
	if i, ok := MatchingRule(c.RestartPolicyRules, 0); ok && c.RestartPolicyRules[i].Action == ActionRestartAllContainers {
		return Decision{Restart: true, Rule: i, Action: ActionRestartAllContainers, Source: SourceRule}, RestartInPlace
	}
	return Decision{Rule: -1, Source: SourceInitialized}, HandOver
}
