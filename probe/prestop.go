package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// PrestopAckWait bounds how long Prestop waits for the supervisor to take
// the news: a few milliseconds when it runs, and the hook must not spend
// the grace period when it does not answer.
const PrestopAckWait = 2 * time.Second

// prestopPoll is how often Prestop looks for the answer.
const prestopPoll = 5 * time.Millisecond

// ErrNoWorkload is Prestop's answer when the supervisor runs no workload
// (back-off, hold, a pod restart's round): natively there is no container
// running then, so the kubelet would run no preStop hook; the supervisor
// exits, and the container's own hook is not run.
var ErrNoWorkload = errors.New("no workload runs; the supervisor exits with its last status")

// Prestop tells the supervisor of container, through its status document
// in stateDir, that the kubelet has begun to stop the container: it sends
// the supervisor contract.SignalTerminating and waits, at most ackWait,
// until the document says the supervisor took it. nil means the workload
// runs and will not be restarted, and the container's own preStop may run
// now; ErrNoWorkload that none runs. Any other error leaves the
// supervisor uninformed (the stop signal still stops it), and the caller
// runs the container's own hook all the same.
//
// The document is read only when this UID owns it, bounded and without
// following a symbolic link: another UID of the pod can create a document
// under this container's name, but not replace one it does not own
// (podstate's sticky directory), so the PID in it is this supervisor's.
// The PID is checked to be the supervisor's too (its /proc cmdline), since
// under a shared PID namespace a process of this UID could have written an
// earlier document.
func Prestop(stateDir, container string, ackWait time.Duration) error {
	st, err := readStatusOwned(stateDir, container, true)
	if err != nil {
		return err
	}
	if st.State == "exited" {
		return ErrNoWorkload
	}
	if st.Terminating {
		return nil
	}
	if err := checkSupervisor(st.SupervisorPID); err != nil {
		return err
	}
	if err := syscall.Kill(st.SupervisorPID, contract.SignalTerminating); err != nil {
		return fmt.Errorf("signalling the supervisor (PID %d): %v", st.SupervisorPID, err)
	}
	deadline := time.Now().Add(ackWait)
	for {
		time.Sleep(prestopPoll)
		st, err := readStatusOwned(stateDir, container, true)
		switch {
		case err == nil && st.State == "exited":
			return ErrNoWorkload
		case err == nil && st.Terminating:
			return nil
		case time.Now().After(deadline):
			if err != nil {
				return fmt.Errorf("no answer from the supervisor within %v: %v", ackWait, err)
			}
			return fmt.Errorf("no answer from the supervisor within %v", ackWait)
		}
	}
}

// checkSupervisor: pid is a supervisor process, found by the name of the
// command it was started with (the injector gives contract.SupervisorPath;
// a binary volume mounted elsewhere keeps the name).
func checkSupervisor(pid int) error {
	if pid < 1 {
		return fmt.Errorf("status document: supervisorPid %d is not a process", pid)
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return fmt.Errorf("supervisor PID %d: %v", pid, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return fmt.Errorf("supervisor PID %d: %v", pid, err)
	}
	argv0, _, _ := bytes.Cut(b, []byte{0})
	if filepath.Base(string(argv0)) != contract.BinaryName {
		return fmt.Errorf("PID %d is not the supervisor (%q)", pid, clip(string(argv0)))
	}
	return nil
}

// LifecycleGet runs an httpGet lifecycle hook as the kubelet's
// handlerRunner does (pkg/kubelet/lifecycle/handlers.go runHTTPHandler,
// v1.37.2): one GET, whose status code does not matter, the body read up
// to 10 KiB and dropped, and an HTTPS request that gets an HTTP answer
// sent again over HTTP without its Authorization header. Only a request
// that cannot be made is an error. The host defaults to DefaultHost, as
// for the checks (the package comment). No timeout of its own, as the
// kubelet's: the hook ends with the container at the latest.
func LifecycleGet(ctx context.Context, a *rules.HTTPGetAction) error {
	req, err := httpGetRequest(ctx, a, "kube-lifecycle/restart-probe")
	if err != nil {
		return err
	}
	client := httpClient()
	resp, err := client.Do(req)
	discard(resp)
	if err != nil && req.URL.Scheme == "https" && strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		retry := req.Clone(ctx)
		retry.URL.Scheme = "http"
		retry.Header.Del("Authorization")
		resp, err = client.Do(retry)
		discard(resp)
	}
	if err != nil {
		return fmt.Errorf("httpGet %s: %v", URL(a), err)
	}
	return nil
}

func discard(resp *http.Response) {
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
}
