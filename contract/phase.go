package contract

// Phase is what a container's supervisor is doing: the loop's phase
// (supervise.State.Phase) and, under the same name, the "state" of the
// container's status document, which the other containers' supervisors,
// restart-probe, the node agent and `restart-supervisor status` read. One
// name wherever a phase is shown.
type Phase string

const (
	// PhaseRunning: the workload runs.
	PhaseRunning Phase = "running"
	// PhaseBackingOff: the workload exited and waits for its next start.
	PhaseBackingOff Phase = "backoff"
	// PhaseHolding: the workload exited for good, but the supervisor keeps
	// the container alive because the kubelet would restart it otherwise.
	PhaseHolding Phase = "held"
	// PhaseEnded: the workload exited for good, with nothing to restart
	// it, in a pod whose other regular containers still run. Upstream a
	// pod restart (RestartAllContainers) restarts a container that has
	// ended too, so the supervisor keeps the container until the last of
	// them has ended, a pod restart restarts it, or a stop.
	PhaseEnded Phase = "ended"
	// PhaseInitialized: the re-run of an init container has nothing to do
	// until the next pod restart: the pod has just started, or the last
	// re-run initialized the container.
	PhaseInitialized Phase = "initialized"
	// PhaseStopping: a stop was requested; no restart follows. The
	// workload, or what is left of its process group, is finishing within
	// the grace period.
	PhaseStopping Phase = "stopping"
	// PhaseExited: supervision is over; the supervisor's exit status is
	// the container's.
	PhaseExited Phase = "exited"
)
