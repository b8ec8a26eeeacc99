package contract

// Annotations on the node agent's Events, which `restart-injector status`
// reads instead of the Events' prose.
const (
	// EventAnnotationRestart is on a RestartedInPlace Event: a JSON object
	// (container, total, exitCode, signal, rule, action, backoffSeconds).
	EventAnnotationRestart = "restart-supervisor.dev/restart"
	// EventAnnotationPodRestart is on a PodRestartedInPlace Event: the pod
	// restart generation, a decimal number.
	EventAnnotationPodRestart = "restart-supervisor.dev/pod-restart"
	// EventAnnotationHandOver is on a HandedOverToKubelet Event: a JSON
	// object (container, total, reason, message, exitCode, signal,
	// exitReason).
	EventAnnotationHandOver = "restart-supervisor.dev/hand-over"
)
