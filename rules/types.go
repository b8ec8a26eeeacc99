// Package rules owns the KEP-5307 container restart API as this project
// understands it: the types (field names and JSON/YAML keys identical to
// k8s.io/api/core/v1), the validation the API server applies to them, and the
// kubelet's restart decision. It does no I/O and imports nothing from k8s.io,
// because it is compiled into the supervisor that runs in every pod.
package rules

// RestartPolicy is a pod or container restart policy.
type RestartPolicy string

const (
	Always    RestartPolicy = "Always"
	OnFailure RestartPolicy = "OnFailure"
	Never     RestartPolicy = "Never"
)

// Action is what a matching rule asks for.
type Action string

const (
	// ActionRestart restarts the container whose exit matched (KEP-5307).
	ActionRestart Action = "Restart"
	// ActionRestartAllContainers restarts every container of the pod in place
	// (KEP-5532).
	ActionRestartAllContainers Action = "RestartAllContainers"
	// ActionRestartGroup restarts every container of every pod of the
	// pod's group in place (docs/gang.md). It is this project's own
	// action: the API server refuses it in restartPolicyRules, so it is
	// accepted only in the supervisor's config and the
	// restart-supervisor.dev/rules annotation (ValidateCarried).
	ActionRestartGroup Action = "RestartGroup"
)

// Operator compares an exit code with a rule's values.
type Operator string

const (
	OpIn    Operator = "In"
	OpNotIn Operator = "NotIn"
)

// Rule mirrors core/v1 ContainerRestartRule.
type Rule struct {
	Action    Action     `json:"action,omitempty" yaml:"action,omitempty"`
	ExitCodes *ExitCodes `json:"exitCodes,omitempty" yaml:"exitCodes,omitempty"`
}

// ExitCodes mirrors core/v1 ContainerRestartRuleOnExitCodes.
type ExitCodes struct {
	Operator Operator `json:"operator,omitempty" yaml:"operator,omitempty"`
	Values   []int32  `json:"values,omitempty" yaml:"values,omitempty"`
}

// Container holds the restart fields of one container, exactly as they stand
// in a core/v1 Container.
type Container struct {
	RestartPolicy      *RestartPolicy `json:"restartPolicy,omitempty" yaml:"restartPolicy,omitempty"`
	RestartPolicyRules []Rule         `json:"restartPolicyRules,omitempty" yaml:"restartPolicyRules,omitempty"`
}

// Limits enforced by the API server's validation.
const (
	MaxRules          = 20
	MaxValuesPerRule  = 255
	supportedPolicies = "\"Always\", \"Never\", \"OnFailure\""
)

var (
	supportedActions   = []string{string(ActionRestart), string(ActionRestartAllContainers)}
	supportedOperators = []string{string(OpIn), string(OpNotIn)}
)

// PolicyPtr is a convenience for building a Container in code.
func PolicyPtr(p RestartPolicy) *RestartPolicy { return &p }
