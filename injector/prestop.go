package injector

import (
	"encoding/json"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// prestopHook is the preStop hook a wrapped container gets (regular
// containers and sidecars: the API refuses a lifecycle on any other init
// container): `restart-probe prestop`, which tells the supervisor that the
// kubelet is stopping the container before anything else of the hook
// runs, then runs the container's own hook. Upstream a pod marked for
// deletion has no container restarted and no liveness or startup probe
// run from that moment (pkg/kubelet/container/helpers.go
// ShouldContainerBeRestarted, pkg/kubelet/prober/worker.go, v1.37.2),
// which comes before the preStop hook and the stop signal; the supervisor
// otherwise learns of the stop from the signal alone, after the hook, and
// a workload that exits during its hook (`nginx -s quit`) would be
// restarted in place. The kubelet runs a preStop hook whenever it stops a
// container with a grace period: a deletion, an eviction, a restart it
// makes itself (an in-place resize with RestartContainer, a changed
// image); none of them may be followed by an in-place restart.
//
// The container's own hook keeps what it does: an exec command is exec'd
// by restart-probe (its output and status are the hook's, and the kubelet
// does no $(VAR) expansion in either); a sleep sleeps in the container, not
// in the kubelet; an httpGet is made from inside the pod, to 127.0.0.1
// unless it names a host (the kubelet's default host is the pod IP, the
// same listeners unless the workload binds the pod IP alone), its named
// port resolved here as a probe's. A tcpSocket hook, which the kubelet
// refuses to run ("invalid handler", pkg/kubelet/lifecycle/handlers.go),
// is dropped.
func prestopHook(c *corev1.Container) (*corev1.LifecycleHandler, error) {
	cmd := []string{contract.ProbePath, "prestop"}
	var own *corev1.LifecycleHandler
	if c.Lifecycle != nil {
		own = c.Lifecycle.PreStop
	}
	switch {
	case own == nil:
	case own.Exec != nil && len(own.Exec.Command) > 0:
		cmd = append(append(cmd, "--"), own.Exec.Command...)
	case own.Sleep != nil:
		cmd = append(cmd, "--sleep", strconv.FormatInt(own.Sleep.Seconds, 10))
	case own.HTTPGet != nil:
		a := &rules.HTTPGetAction{Path: own.HTTPGet.Path, Host: own.HTTPGet.Host, Scheme: string(own.HTTPGet.Scheme)}
		port, err := resolvePort(c, own.HTTPGet.Port, "lifecycle.preStop.httpGet.port")
		if err != nil {
			return nil, err
		}
		a.Port = port
		for _, hd := range own.HTTPGet.HTTPHeaders {
			a.HTTPHeaders = append(a.HTTPHeaders, rules.HTTPHeader{Name: hd.Name, Value: hd.Value})
		}
		doc, err := json.Marshal(rules.Probe{HTTPGet: a})
		if err != nil {
			return nil, err
		}
		cmd = append(cmd, "--http", string(doc))
	}
	return &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}}, nil
}

// withPrestop is the container's lifecycle with hook as its preStop, for
// the patch: postStart and stopSignal stay, and the handlers of the
// container's own preStop that hook does not set are named as null
// (replacing), so that `kubectl apply` of the injected object over a live
// one (a strategic merge) does not keep them beside the exec.
func withPrestop(c *corev1.Container, hook *corev1.LifecycleHandler) any {
	// corev1.Lifecycle's fields, in its order, with preStop as the patch
	// value replacing makes.
	var lc struct {
		PostStart  *corev1.LifecycleHandler `json:"postStart,omitempty"`
		PreStop    any                      `json:"preStop"`
		StopSignal *corev1.Signal           `json:"stopSignal,omitempty"`
	}
	var own *corev1.LifecycleHandler
	if c.Lifecycle != nil {
		lc.PostStart, lc.StopSignal, own = c.Lifecycle.PostStart, c.Lifecycle.StopSignal, c.Lifecycle.PreStop
	}
	lc.PreStop = replacing(hook, own)
	return lc
}
