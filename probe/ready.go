package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/boundedfile"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// maxStatusSize bounds the status document read, as podstate does.
const maxStatusSize = 64 << 10

// Ready answers the readiness probe the injector gives a wrapped
// container (`restart-probe ready`): not ready while the supervisor runs
// no workload — in back-off, held, stopping, waiting in a pod restart —,
// as a container that is not running is not ready natively; otherwise the
// result of the container's own readiness check (readiness, nil when it
// had none: ready). The supervisor's status document in the pod's state
// volume says whether the workload runs; it is read bounded and without
// following a symbolic link.
func Ready(ctx context.Context, stateDir, container string, readiness *rules.Probe, env []string) error {
	st, err := readStatus(stateDir, container)
	if err != nil {
		return fmt.Errorf("not ready: %v", err)
	}
	if st.State != "running" {
		return fmt.Errorf("not ready: the workload is not running (%s)", clip(st.State))
	}
	if readiness == nil {
		return nil
	}
	return Check(ctx, readiness, env)
}

// Started answers the startup probe the injector gives a container whose
// startup probe the supervisor runs (`restart-probe started`): started
// once the workload runs and its startup probe has succeeded. The kubelet
// then counts the container as started, which lets the containers after a
// sidecar start, as the sidecar's own startup probe does natively.
func Started(stateDir, container string) error {
	st, err := readStatus(stateDir, container)
	if err != nil {
		return fmt.Errorf("not started: %v", err)
	}
	if st.State != "running" || !st.Started {
		return fmt.Errorf("not started: the workload's startup probe has not succeeded (%s)", clip(st.State))
	}
	return nil
}

// status is what restart-probe reads of a status document.
type status struct {
	State         string `json:"state"`
	Started       bool   `json:"started"`
	Terminating   bool   `json:"terminating"`
	SupervisorPID int    `json:"supervisorPid"`
}

func readStatus(stateDir, container string) (*status, error) {
	return readStatusOwned(stateDir, container, false)
}

// readStatusOwned reads the container's status document, bounded and
// without following a symbolic link; with own, only when this process's
// UID owns it.
func readStatusOwned(stateDir, container string, own bool) (*status, error) {
	if stateDir == "" || container == "" || strings.ContainsAny(container, "/\x00") || container == "." || container == ".." {
		return nil, fmt.Errorf("%s and %s must name the state volume and the container", contract.EnvStateDir, contract.EnvContainerName)
	}
	path := filepath.Join(stateDir, contract.StatusDir, container+contract.StatusExt)
	if own {
		fi, err := os.Lstat(path)
		if err != nil {
			return nil, fmt.Errorf("status document: %v", err)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
			return nil, fmt.Errorf("status document %s: owned by UID %d, not by this container's UID %d", path, st.Uid, os.Geteuid())
		}
	}
	data, err := boundedfile.Read(path, "status document", maxStatusSize, false)
	if err != nil {
		return nil, err
	}
	var st status
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("status document %s: invalid JSON", path)
	}
	return &st, nil
}

func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}
