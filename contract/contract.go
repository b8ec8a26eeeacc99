// Package contract is the interface between the injector (the admission
// webhook and the offline inject CLI), the Docker helper and the supervisor:
// the environment variables, paths, state-volume layout and annotation keys
// that one side writes and the other reads. They live here, and only here,
// so that both sides change together; a value changed on one side alone
// breaks every pod the other side wrapped.
//
// Because pods injected by one release run the supervisor of the same
// release, but may be read by the tooling of another (`restart-supervisor
// status`, an upgraded webhook finding an injected pod), these values are
// also a compatibility surface: change them only with a migration in mind.
//
// The package imports nothing but the standard library and
// golang.org/x/sys (for signal names), so the supervisor binary can use it
// without pulling in Kubernetes or networking code.
package contract

// Environment the injector and the Docker helper set on a wrapped container
// and the supervisor reads.
const (
	// EnvConfig holds the restart rules as a compact JSON document
	// (rules.Config).
	EnvConfig = "RESTART_SUPERVISOR_CONFIG"
	// EnvConfigWatch, set by a user (the injector passes rules inline in
	// EnvConfig), names a rules file the supervisor reads and watches.
	EnvConfigWatch = "RESTART_SUPERVISOR_CONFIG_WATCH"
	// EnvStateDir is where the pod's state volume is mounted.
	EnvStateDir = "RESTART_SUPERVISOR_STATE_DIR"
	// EnvContainerName names the container in logs and in the state volume.
	EnvContainerName = "RESTART_SUPERVISOR_CONTAINER_NAME"
	// EnvPlatformCommands maps "os/arch[/variant]" to the workload's argv
	// when the image's entrypoint differs per platform.
	EnvPlatformCommands = "RESTART_SUPERVISOR_PLATFORM_COMMANDS"
	// EnvStopSignals lists the signals that stop the container: the
	// injector adds a container's lifecycle.stopSignal to SIGTERM and
	// SIGINT.
	EnvStopSignals = "RESTART_SUPERVISOR_STOP_SIGNALS"
	// EnvGracePeriod is how long a stopped workload may take before the
	// supervisor SIGKILLs it. The injector sets the pod's
	// terminationGracePeriodSeconds only under shareProcessNamespace, where
	// the supervisor is not PID 1.
	EnvGracePeriod = "RESTART_SUPERVISOR_GRACE_PERIOD"
	// EnvStartError chooses how a command that cannot be executed is
	// reported: "kubelet" (exit code 128, judged by the rules) or "shell"
	// (127/126). Unset, the supervisor tells from its environment.
	EnvStartError = "RESTART_SUPERVISOR_START_ERROR"
	// EnvInitSignals, "true", delivers signals to the workload as the
	// kernel does to a PID namespace's init (supervise.Options.InitSignals).
	// Users set it on the container; the injector leaves it alone.
	EnvInitSignals = "RESTART_SUPERVISOR_INIT_SIGNALS"
	// EnvKubeVersion chooses which Kubernetes release's validation the
	// supervisor applies to its config ("1.34" … ); unset, the newest.
	// Users set it; the injector does not.
	EnvKubeVersion = "RESTART_SUPERVISOR_KUBERNETES_VERSION"
	// EnvPodMembers lists, in the pod's start order, the containers that
	// take part in pod restarts (RestartAllContainers): FormatPodMembers
	// of the pod's wrapped sidecars and init re-runs (MemberInit) in
	// spec.initContainers order, then its wrapped regular containers.
	// The injector writes the list once, in the pod's AnnotationPodMembers,
	// and sets the variable on every wrapped container of a pod whose rules
	// use RestartAllContainers from that annotation (a downward API
	// fieldRef), so that the patch grows with the members, not with their
	// square; compose sets the value itself. Every supervisor waits for the
	// others to stop before it starts a new round, and a regular container
	// for the sidecars to run again.
	EnvPodMembers = "RESTART_SUPERVISOR_POD_MEMBERS"
	// The attempt context the supervisor gives the workload at every
	// start (supervise.attemptEnv); a value the container sets is
	// replaced. EnvRestartCount: the in-place restarts before this run.
	EnvRestartCount = "RESTART_SUPERVISOR_RESTART_COUNT"
	// EnvLastExitCode: the previous run's exit code (128+N for signal N);
	// unset for a supervisor's first run.
	EnvLastExitCode = "RESTART_SUPERVISOR_LAST_EXIT_CODE"
	// EnvLastExitSignal: the signal that ended the previous run
	// ("SIGKILL"); unset when it exited by itself.
	EnvLastExitSignal = "RESTART_SUPERVISOR_LAST_EXIT_SIGNAL"
	// EnvPodRestartGeneration: in a pod using RestartAllContainers, the pod
	// restart generation the run belongs to (0 before the first).
	EnvPodRestartGeneration = "RESTART_SUPERVISOR_POD_RESTART_GENERATION"
	// EnvLogFormat is not written by the injector; users
	// set them on the container to change the supervisor's defaults.
	EnvLogFormat = "RESTART_SUPERVISOR_LOG_FORMAT"
)

// Paths inside a wrapped container and inside the supervisor image.
const (
	// ImageBinaryPath is where the supervisor image holds the binary
	// (Dockerfile.supervisor); the install init container runs it.
	ImageBinaryPath = "/restart-supervisor"
	// BinDir is where the binary volume is mounted, read-only in the
	// wrapped containers; `restart-supervisor install BinDir` fills it.
	BinDir = "/opt/restart-supervisor"
	// BinaryName is the file `restart-supervisor install DIR` writes in DIR.
	BinaryName = "restart-supervisor"
	// SupervisorPath is the command of every wrapped container.
	SupervisorPath = BinDir + "/" + BinaryName
	// BinVolume is the name of the volume (an emptyDir in a pod, a named
	// volume in a Compose file) the install container fills with the
	// binaries and every wrapped container mounts read-only at BinDir; or,
	// delivered as an image volume, the supervisor image itself, whose
	// root holds the binaries at the same names.
	BinVolume = "restart-supervisor-bin"
	// InstallContainer is the init container (the one-shot service in a
	// Compose file) that runs `restart-supervisor install BinDir`.
	InstallContainer = "restart-supervisor-install"
	// StateVolume is the name of the pod's state volume (an emptyDir): the
	// node agent finds it on the node under the kubelet's pods directory,
	// <pod UID>/volumes/kubernetes.io~empty-dir/StateVolume.
	StateVolume = "restart-supervisor-state"
	// ImageProbePath is where the supervisor image holds restart-probe,
	// the checks that need the network (httpGet, tcpSocket, grpc) and the
	// readiness answer; `restart-supervisor install` copies it from the
	// supervisor's own directory into DIR when it is there.
	ImageProbePath = "/restart-probe"
	// ProbeBinaryName is the file restart-probe is installed as, next to
	// the supervisor, where the supervisor looks for it.
	ProbeBinaryName = "restart-probe"
	// ProbePath is restart-probe in a wrapped container: the command of
	// the readiness exec probe the injector writes.
	ProbePath = BinDir + "/" + ProbeBinaryName
	// StateDir is where the pod's state volume is mounted in every wrapped
	// container, and the default of `restart-supervisor status`.
	StateDir = "/run/restart-supervisor"
	// DefaultTerminationMessagePath is the kubelet's default
	// terminationMessagePath. The injector passes
	// --termination-message-path only for a container that sets another.
	DefaultTerminationMessagePath = "/dev/termination-log"
)

// Exit statuses of `restart-probe check`, which the supervisor reads.
const (
	// ProbeExitFailed: the check failed; it counts towards the probe's
	// failureThreshold.
	ProbeExitFailed = 1
	// ProbeExitErrored: the check errored (an httpGet response whose body
	// could not be read); the kubelet's worker throws such a result away,
	// so the supervisor counts neither a success nor a failure.
	ProbeExitErrored = 3
)

// Layout of the state volume, shared by the supervisors of all of a pod's
// containers and read by `restart-supervisor status`.
const (
	// StatusDir holds one status document per container, named
	// <container>StatusExt.
	StatusDir = "status"
	StatusExt = ".json"
	// LiveDir holds each supervisor's liveness lock (<container>.lock),
	// which it holds for its whole life, and its ended marker
	// (<container>.ended); statevol/live.go.
	LiveDir = "live"
	// PodRestartsDir holds one file per pod-wide restart generation.
	PodRestartsDir = "pod-restarts"
	// GroupDir holds a container's request for a group restart
	// (GroupRequestPrefix + container) and the node agent's refusal of it
	// (GroupAnswerPrefix + container); docs/gang.md.
	GroupDir           = "group"
	GroupRequestPrefix = "request."
	GroupAnswerPrefix  = "answer."
	// GroupSource is the source of a pod restart generation the node
	// agent delivered for a group restart: no container's name.
	GroupSource = "restart-supervisor.dev/group"
)

// Annotation keys on pods and pod templates.
const (
	// AnnotationRules carries restart rules for API servers without the
	// KEP-5307 container fields.
	AnnotationRules = "restart-supervisor.dev/rules"
	// AnnotationEntrypoint, followed by a container name, gives the argv of
	// a container without command when the image cannot be looked up.
	AnnotationEntrypoint = "restart-supervisor.dev/entrypoint."
	// AnnotationStatus marks an injected pod: the injector's Version and
	// the wrapped containers.
	AnnotationStatus = "restart-supervisor.dev/status"
	// AnnotationRestarts is kept by the node agent with --annotate: the
	// in-place restarts per container, a JSON object {"name": count}.
	AnnotationRestarts = "restart-supervisor.dev/restarts"
	// LabelGroup names a pod's group for RestartGroup explicitly; without
	// it the group is the workload's (nodeagent.GroupOf, docs/gang.md).
	LabelGroup = "restart-supervisor.dev/group"
	// AnnotationGroupMaxRestarts limits the group restarts of the pod's
	// group (a decimal count); past it a RestartGroup exit is handed to
	// the kubelet. Read from the pod whose request makes the group's
	// object.
	AnnotationGroupMaxRestarts = "restart-supervisor.dev/group-max-restarts"
	// AnnotationPodMembers holds EnvPodMembers once per pod; each wrapped
	// container reads it through a fieldRef (PodMembersFieldPath).
	AnnotationPodMembers = "restart-supervisor.dev/pod-members"
	// AnnotationReadiness says whether a wrapped container without a
	// readiness probe of its own gets `restart-probe ready` as one:
	// ReadinessOn, ReadinessOff, or (absent) the injector's rule: when
	// the pod restarts always and has labels, which a Service needs.
	AnnotationReadiness = "restart-supervisor.dev/readiness"
	// AnnotationUndo is where `restart-injector inject` keeps, on each object
	// it changed (the document's root, or an item of a List), what `uninject`
	// needs to give the object back as it was: for every edit of the
	// injection, the path, a digest of what was written there, and the text
	// of what it replaced or removed, in the document's own format. The
	// webhook does not write it: a pod admitted by the webhook is never
	// turned back.
	AnnotationUndo = "restart-supervisor.dev/uninject"
)

// PodMembersFieldPath is the downward API field path of
// AnnotationPodMembers, the source of EnvPodMembers in a wrapped pod.
const PodMembersFieldPath = "metadata.annotations['" + AnnotationPodMembers + "']"

// Values of AnnotationReadiness.
const (
	ReadinessOn  = "on"
	ReadinessOff = "off"
)
