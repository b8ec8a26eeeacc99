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

// The node agent signs its Events, so that `restart-injector status` can
// tell them from Events anyone who may create Events in a namespace could
// write with the same fields.
const (
	// EventAnnotationSignature is on every Event of the node agent: the
	// base64 (standard encoding) of an Ed25519 signature over the Event's
	// reason, involved object, source host and restart-supervisor.dev/
	// annotations (nodeagent.signedPayload), by its node's key.
	EventAnnotationSignature = "restart-supervisor.dev/signature"
	// EventAnnotationTime is on every Event of the node agent: when the
	// agent recorded it (RFC 3339, nanoseconds, UTC), under the signature.
	// status orders a container's Events by it, not by the Event's
	// timestamps, which whoever copies an Event sets as they like.
	EventAnnotationTime = "restart-supervisor.dev/time"
	// AgentKeyLabel is the label (app.kubernetes.io/name=…) of the
	// ConfigMaps, in the node agent's namespace, that publish each node's
	// public keys: data "node" names the node, data "keys" holds the
	// base64 of its newest Ed25519 public keys, newest first, one a line.
	AgentKeyLabel = "restart-supervisor-node-agent-key"
)
