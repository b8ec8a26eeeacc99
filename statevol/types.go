// Package statevol owns the files of a pod's state volume
// (RESTART_SUPERVISOR_STATE_DIR) and the atomic operations on them: the
// status document of each supervised container (WriteStatus, ReadAll), the
// generation files of pod-wide restarts and the exactly-once rule that
// creates them (AnnounceWith), the markers of a round, and the group
// restart's requests, answers, deliveries and releases (group.go). It is
// what both sides of the volume read and write: the supervisors of the pod
// (package podstate, which runs a container's part on top of these files)
// and the node agent (package nodeagent), which links nothing of the
// supervisor loop.
//
// The writers run in different containers: different PID and mount
// namespaces, possibly different UIDs, sharing nothing but this directory.
// Everything here is therefore built from operations that are atomic on a
// local filesystem (rename, link) and needs no daemon and no cooperation
// beyond the files themselves, and everything read is read as an
// adversary's: bounded, never through a link, refused from the wrong owner
// where the owner matters.
//
// Layout of the directory:
//
//	status/<container>.json     one status document per container
//	live/<container>.lock       flock(2)ed by the container's supervisor while it lives (podstate)
//	pod-restarts/<generation>   one file per pod restart, 20 digits
//	pod-restarts/<generation>.<what>.<container>   a member's marker for it
//	group/request.<container>, group/answer.<container>   group restarts
package statevol

import (
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// The documents the files hold: what the node agent and restart-injector
// status read of them on any system (these types), while the files
// themselves are written and read through Unix-only calls (every other
// file of the package).

// Exit describes one exit of the workload and the decision taken on it.
type Exit struct {
	// Code is the exit status as the container runtime reports it: the
	// exit code, or 128+N when the workload was killed by signal N.
	Code int32 `json:"code"`
	// Signal names the signal that killed the workload ("SIGKILL").
	Signal string `json:"signal,omitempty"`
	// Rule is the index of the first matching restartPolicyRule; nil when
	// no rule matched.
	Rule *int `json:"rule,omitempty"`
	// Action is the matching rule's action.
	Action rules.Action `json:"action,omitempty"`
	// PodRestart is set when the workload was stopped by a pod restart:
	// the generation that did it. A 137 then is the SIGKILL at the end of
	// the pod restart's grace period, not an out-of-memory kill.
	PodRestart uint64 `json:"podRestart,omitempty"`
	// Stopped is set when the exit ended a stop of the container (the
	// kubelet's or the runtime's): the next supervisor does not take it
	// for a crash to back off from.
	Stopped bool `json:"stopped,omitempty"`
	// Reason is the kubelet's reason for such an exit when the
	// supervisor can tell it: OOMKilled, a SIGKILL that the container's
	// cgroup counted as an out-of-memory kill (memory.events oom_kill).
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Status is one container's status document.
type Status struct {
	Container string `json:"container"`
	// State is what the supervisor is doing: the contract.Phase names.
	State contract.Phase `json:"state"`
	// Restarts counts in-place restarts of the workload, whatever caused
	// them; the kubelet's restartCount does not see these.
	Restarts int `json:"restarts"`
	// RestartsTotal counts the in-place restarts of the container since
	// the pod started, across its supervisors: Restarts counts those of
	// this supervisor process, which starts from 0 whenever the kubelet
	// starts the container again (after a hand-over, or a supervisor that
	// died). The next supervisor of the same container continues from it,
	// as from BackoffRestarts, so the count never goes down while the pod
	// lives. A document written by an earlier release has none; its
	// Restarts is then taken as the total.
	RestartsTotal int `json:"restartsTotal"`
	// PodRestarts counts how many of those were pod-wide restarts
	// (RestartAllContainers), announced by this or another container.
	PodRestarts int `json:"podRestarts"`
	// Generation is the pod restart generation the current run belongs to.
	Generation uint64 `json:"generation"`
	// LastExit is the workload's most recent exit.
	LastExit *Exit `json:"lastExit,omitempty"`
	// LastRestart is the exit that caused the most recent in-place
	// restart; it stays when a later exit ends the container.
	LastRestart *Exit `json:"lastRestart,omitempty"`
	// StartedAt is when the workload was last started.
	StartedAt time.Time `json:"startedAt,omitzero"`
	// NextStartAt is when a workload in backoff starts again.
	NextStartAt time.Time `json:"nextStartAt,omitzero"`
	// Started: the workload runs and its startup probe, if it has one,
	// has succeeded in this run (`restart-probe started` answers it).
	Started bool `json:"started,omitempty"`
	// Announced is the highest pod restart generation this container
	// announced. It is written before the generation file is created, so
	// that the other members can check that a generation naming this
	// container as its source was announced by it.
	Announced uint64 `json:"announced,omitempty"`
	// BackoffRestarts is the container's CrashLoopBackOff count; the next
	// supervisor of the same container continues from it.
	BackoffRestarts int `json:"backoffRestarts,omitempty"`
	// BackoffKey stands for the container's resources when its curve took
	// its last step (16 hex digits; supervise.ValidBackoffKey): the next
	// supervisor starts a fresh curve when they differ, as the kubelet's
	// back-off key holds the resources.
	BackoffKey string `json:"backoffKey,omitempty"`
	// Limits is what the limits of the config (restartBudget, progress)
	// remember; the next supervisor of the same container continues from
	// it, so that neither a hand-over nor the kubelet's restart resets the
	// budget. Absent when the config sets none of them.
	Limits *Limits `json:"limits,omitempty"`
	// HandOver says why the last exit was handed to the kubelet although
	// the rules would have restarted it in place (a limit of the config);
	// absent otherwise.
	HandOver *HandOver `json:"handOver,omitempty"`
	// Terminating: the kubelet has begun to stop this container instance
	// (its preStop hook said so, restart-probe prestop); no exit is
	// restarted from then on. The hook waits for it before running the
	// container's own preStop.
	Terminating bool      `json:"terminating,omitempty"`
	UpdatedAt   time.Time `json:"updatedAt"`
	// SupervisorPID is the supervisor's PID in its own container's PID
	// namespace; it is not meaningful from another container.
	SupervisorPID     int    `json:"supervisorPid"`
	SupervisorVersion string `json:"supervisorVersion,omitempty"`
}

// Limits is supervise.LimitState in the status document.
type Limits struct {
	// BudgetRestarts counts the in-place restarts the container's own
	// exits caused, across its supervisors.
	BudgetRestarts int `json:"budgetRestarts,omitempty"`
	// BudgetRecent are the times of the most recent of them, oldest
	// first (at most supervise.MaxBudgetRecent), for a budget's window.
	BudgetRecent []time.Time `json:"budgetRecent,omitempty"`
	// ProgressDigest is the FNV-1a 128 digest of the progress file at the last
	// look ("absent": there was none), StalledRestarts the in-place
	// restarts since it last changed.
	ProgressDigest  string `json:"progressDigest,omitempty"`
	StalledRestarts int    `json:"stalledRestarts,omitempty"`
}

// HandOver is supervise.HandOver in the status document: a reason in the
// kubelet's CamelCase (RestartBudgetExhausted, HandOverExitCode,
// ProgressStalled, PreRestartCheckFailed) and a one-line message.
type HandOver struct {
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// GroupCause is what a generation delivered by the node agent for a group
// restart says about it.
type GroupCause struct {
	// Generation is the group's generation (not the pod's).
	Generation uint64 `json:"generation"`
	// Group names the group ("label=value").
	Group string `json:"group,omitempty"`
	// Pod, Container and ExitCode are the exit that asked for it.
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
	ExitCode  int32  `json:"exitCode"`
}
